"""What a passing `exactly demo` run printed: its verdict and its table of outputs."""

from __future__ import annotations


def assert_verified(out: str) -> None:
    """`out` (the demo's stdout) says every event exactly once and no open transaction, and its
    table has each output topic with records, as many as expected, none duplicated, missing
    or wrong."""
    assert "open transactions of the queries: 0" in out
    assert "verified: every event exactly once" in out
    table = [line.split() for line in out.splitlines()
             if line.startswith(("orders-enriched", "orders-dlq", "order-stats"))]
    assert len(table) == 3
    for name, expected, records, duplicates, missing, wrong in table:
        assert expected == records and int(records) > 0, name
        assert duplicates == missing == wrong == "0", name
