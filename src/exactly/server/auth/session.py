"""A connection's security state: its listener, its SASL exchange, its principal."""

from __future__ import annotations

import hmac
import logging
from dataclasses import dataclass

from exactly.protocol.errors import ErrorCode
from exactly.server.auth.scram import HASHES, ScramCredentialStore, ScramError, ScramServer

log = logging.getLogger("exactly.auth")

ANONYMOUS = "User:ANONYMOUS"
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = ("SSL", "SASL_SSL")


@dataclass(slots=True)
class ListenerRuntime:
    """One bound listener: its name (= security protocol) and what it advertises."""

    name: str
    advertised_host: str
    advertised_port: int

    @property
    def sasl(self) -> bool:
        return self.name in SASL_PROTOCOLS

    @property
    def tls(self) -> bool:
        return self.name in TLS_PROTOCOLS


class SaslFailure(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class PlainServer:
    """SASL/PLAIN (RFC 4616): one message "authzid NUL authcid NUL passwd"."""

    def __init__(self, users: dict[str, str]) -> None:
        self.users = users
        self.username: str | None = None
        self.complete = False

    def evaluate(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise ScramError("invalid SASL/PLAIN message: expected authzid NUL username NUL password")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise ScramError("SASL/PLAIN message is not UTF-8") from None
        if not user:
            raise ScramError("SASL/PLAIN username is empty")
        if authzid and authzid != user:
            raise ScramError("authorization id differs from the username")
        expected = self.users.get(user)
        # Compare even for an unknown user, so the answer takes as long either way.
        ok = hmac.compare_digest((expected or "\0").encode(), password.encode())
        if expected is None or not ok:
            raise ScramError("invalid credentials")
        self.username, self.complete = user, True
        return b""


class AuthSession:
    """Per connection. `principal` is what authorization sees."""

    def __init__(self, listener: ListenerRuntime, *, mechanisms: tuple[str, ...],
                 plain_users: dict[str, str], scram_store: ScramCredentialStore,
                 tls_principal: str | None = None) -> None:
        self.listener = listener
        self.mechanisms = mechanisms
        self.plain_users = plain_users
        self.scram_store = scram_store
        self.principal = tls_principal or ANONYMOUS
        self.authenticated = not listener.sasl
        self.mechanism: str | None = None
        self.handshake_version = -1
        # Close the connection once the current answer is sent: a failed authentication, or
        # a refused acks=0 Produce (which has no answer to carry its error).
        self.close_after_response = False
        self._server: PlainServer | ScramServer | None = None

    @property
    def advertised(self) -> tuple[str, int]:
        return self.listener.advertised_host, self.listener.advertised_port

    def raw_tokens_expected(self) -> bool:
        """After a SaslHandshake v0, the next frames are bare SASL tokens (no Kafka header)."""
        return self.handshake_version == 0 and self._server is not None and not self.authenticated

    def allows_before_auth(self, api_key: int) -> bool:
        return api_key in (17, 18, 36)  # SaslHandshake, ApiVersions, SaslAuthenticate

    def handshake(self, mechanism: str, version: int) -> ErrorCode:
        if not self.listener.sasl:
            return ErrorCode.illegal_sasl_state
        if self.authenticated or self.mechanism is not None:
            return ErrorCode.illegal_sasl_state
        if mechanism not in self.mechanisms:
            return ErrorCode.unsupported_sasl_mechanism
        self.mechanism = mechanism
        self.handshake_version = version
        if mechanism == "PLAIN":
            self._server = PlainServer(self.plain_users)
        elif mechanism in HASHES:
            self._server = ScramServer(mechanism, self.scram_store)
        else:  # enabled but unknown: the config check keeps this from happening
            return ErrorCode.unsupported_sasl_mechanism
        return ErrorCode.none

    def authenticate(self, token: bytes) -> bytes:
        """One SaslAuthenticate token in, the server's token out; raises SaslFailure."""
        if self._server is None or self.authenticated:
            raise SaslFailure(ErrorCode.illegal_sasl_state,
                              "SaslAuthenticate needs a SaslHandshake first on this connection"
                              if self._server is None else "already authenticated")
        try:
            out = self._server.evaluate(token)
        except ScramError as exc:
            log.info("authentication failed: mechanism=%s reason=%s", self.mechanism, exc)
            raise SaslFailure(
                ErrorCode.sasl_authentication_failed,
                f"Authentication failed during authentication due to invalid credentials with "
                f"SASL mechanism {self.mechanism}: {exc}") from None
        if self._server.complete:
            self.authenticated = True
            self.principal = f"User:{self._server.username}"
            log.info("authenticated: principal=%s mechanism=%s", self.principal, self.mechanism)
        return out
