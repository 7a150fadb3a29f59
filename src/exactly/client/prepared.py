"""PreparedTxnState (KIP-939): the identity of a prepared transaction, as text an external
coordinator stores next to its own decision (a database row, Spark's commit message).

The text is Kafka's own format, "producerId:epoch", so a state written by this client can be
read by the Java client and the other way round; "" is the state of "no transaction".
"""

from __future__ import annotations

_MAX_PRODUCER_ID = (1 << 63) - 1
_MAX_EPOCH = (1 << 15) - 1


class PreparedTxnState:
    """`PreparedTxnState("42:7")`, `str(state) == "42:7"`; `PreparedTxnState()` is no transaction."""

    __slots__ = ("_epoch", "_producer_id")

    def __init__(self, text: str = "") -> None:
        if not isinstance(text, str):
            raise TypeError(f"PreparedTxnState takes the text str(state) gave, not {type(text).__name__}")
        self._producer_id, self._epoch = _parse(text.strip())

    @classmethod
    def of(cls, producer_id: int, epoch: int) -> PreparedTxnState:
        """The state of the transaction of this producer id and epoch (-1, -1: none)."""
        if (producer_id, epoch) == (-1, -1):
            return cls()
        return cls(f"{producer_id}:{epoch}")

    @property
    def producer_id(self) -> int:
        return self._producer_id

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def has_transaction(self) -> bool:
        return self._producer_id != -1 and self._epoch != -1

    def __str__(self) -> str:
        return f"{self._producer_id}:{self._epoch}" if self.has_transaction else ""

    def __repr__(self) -> str:
        return f"PreparedTxnState({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PreparedTxnState):
            return NotImplemented
        return (self._producer_id, self._epoch) == (other._producer_id, other._epoch)

    def __hash__(self) -> int:
        return hash((self._producer_id, self._epoch))


def _parse(text: str) -> tuple[int, int]:
    if not text:
        return -1, -1
    pid_text, sep, epoch_text = text.partition(":")
    if not sep or ":" in epoch_text:
        raise ValueError(f"bad PreparedTxnState {text!r}: expected 'producerId:epoch', e.g. '42:7', "
                         "or '' for no transaction")
    try:
        producer_id, epoch = int(pid_text), int(epoch_text)
    except ValueError:
        raise ValueError(f"bad PreparedTxnState {text!r}: producer id and epoch must be "
                         "whole numbers, as in '42:7'") from None
    if not 0 <= producer_id <= _MAX_PRODUCER_ID or not 0 <= epoch <= _MAX_EPOCH:
        raise ValueError(f"bad PreparedTxnState {text!r}: producer id must be in 0..{_MAX_PRODUCER_ID} "
                         f"and epoch in 0..{_MAX_EPOCH}")
    return producer_id, epoch
