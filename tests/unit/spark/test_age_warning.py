"""exactly.spark.stream_sink.age_warning: in transactionResume=producer-id mode the driver warns,
as it decides a batch, when the batch's oldest transaction has lived half of
transaction.timeout.ms: past the timeout the broker aborts it and the batch's rows are lost."""

from __future__ import annotations

from exactly.spark.stream_sink import age_warning


def test_a_young_batch_is_not_warned_of() -> None:
    assert age_warning(3, began_at=100.0, now=100.0 + 14.9, timeout_ms=30_000) is None


def test_a_batch_past_half_the_timeout_is_warned_of_with_its_figures() -> None:
    line = age_warning(3, began_at=100.0, now=100.0 + 24.0, timeout_ms=30_000)
    assert line is not None
    assert line.startswith("event=spark_transaction_age_near_timeout batch=3 age_ms=24000 "
                           "transaction_timeout_ms=30000 ")
    assert "80% of transaction.timeout.ms" in line
    assert "raise kafka.transaction.timeout.ms" in line


def test_a_batch_past_the_timeout_is_warned_of_too() -> None:
    line = age_warning(7, began_at=0.0, now=45.0, timeout_ms=30_000)
    assert line is not None and "150% of transaction.timeout.ms" in line
