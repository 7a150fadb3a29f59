"""The client's exceptions. Kafka error codes keep their names; the kinds a caller must tell
apart (retry, abort the transaction, give up) are distinct types."""

from __future__ import annotations

from exactly.protocol.errors import ErrorCode, error_name


class KafkaError(Exception):
    """An error answered by a broker (`code` is Kafka's error code) or found by the client."""

    def __init__(self, message: str, code: int = -1) -> None:
        super().__init__(message)
        self.code = code

    @property
    def name(self) -> str:
        return error_name(self.code) if self.code >= 0 else "CLIENT_ERROR"

    @property
    def retriable(self) -> bool:
        try:
            return bool(ErrorCode(self.code).retriable)
        except ValueError:
            return False


class ConfigError(KafkaError, ValueError):
    """A client configuration key or value that cannot be used."""


class KafkaConnectionError(KafkaError, ConnectionError):
    """A broker could not be reached, or the connection broke."""


class UnsupportedVersionError(KafkaError):
    """The broker does not speak a version of an API this client needs."""


class KafkaTimeoutError(KafkaError, TimeoutError):
    """A request or an operation did not finish in time."""


class IllegalStateError(KafkaError):
    """A call that the current state does not allow; the message names the state."""


class TransactionError(KafkaError):
    """Base of the transaction errors."""


class ProducerFencedError(TransactionError):
    """A newer session with the same transactional id took over: this one can only close."""


class TransactionAbortableError(TransactionError):
    """The transaction cannot commit; abort it and begin a new one."""


class TransactionFatalError(TransactionError):
    """The session cannot go on (bad configuration, authorization, protocol errors): close it."""


def raise_for(code: int, context: str) -> None:
    """Raise the error a response's error code stands for, if any."""
    if code == ErrorCode.none:
        return
    raise KafkaError(f"{context}: {error_name(code)}", code)


class AuthenticationError(KafkaError):
    """TLS or SASL authentication failed (wrong password, unknown user, a mechanism the broker
    does not enable, an untrusted certificate); the message names the cause. Not retriable."""
