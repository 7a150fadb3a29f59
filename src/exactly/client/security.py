"""The client's side of TLS and SASL: an SSLContext from librdkafka's/Java's ssl.* keys, and the
SASL/PLAIN and SASL/SCRAM-SHA-256/512 exchanges (RFC 4616, RFC 5802/7677)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import ssl
from dataclasses import dataclass
from typing import Any

from exactly.client.errors import AuthenticationError, ConfigError

_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


@dataclass(frozen=True, slots=True)
class Security:
    """What BrokerConnection.connect needs to secure a connection."""

    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    check_hostname: bool = True
    mechanism: str = "PLAIN"
    username: str | None = None
    password: str | None = None

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


PLAINTEXT = Security()


def security_from_config(config: Any) -> Security:
    """A Security from a ClientConfig (checked: SASL needs a username and a password)."""
    protocol = config["security.protocol"]
    if protocol == "PLAINTEXT":
        return PLAINTEXT
    ctx = None
    check_hostname = True
    if protocol in ("SSL", "SASL_SSL"):
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        ca = config["ssl.ca.location"] or config["ssl.truststore.location"]
        try:
            if ca:
                ctx.load_verify_locations(cafile=ca)
            if config["ssl.certificate.location"]:
                ctx.load_cert_chain(config["ssl.certificate.location"],
                                    config["ssl.key.location"], password=config["ssl.key.password"])
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"cannot load TLS files (ssl.ca.location={ca}, "
                              f"ssl.certificate.location={config['ssl.certificate.location']}): "
                              f"{exc}") from None
        check_hostname = config["ssl.endpoint.identification.algorithm"] == "https"
        ctx.check_hostname = check_hostname
        if not config["enable.ssl.certificate.verification"]:
            ctx.check_hostname = check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL") and (
            not config["sasl.username"] or config["sasl.password"] is None):
        raise ConfigError(f"security.protocol={protocol} needs sasl.username and sasl.password")
    return Security(protocol, ctx, check_hostname, config["sasl.mechanism"],
                    config["sasl.username"], config["sasl.password"])


class PlainClient:
    def __init__(self, username: str, password: str) -> None:
        self._token = b"\0" + username.encode() + b"\0" + password.encode()
        self.complete = False

    def first(self) -> bytes:
        return self._token

    def evaluate(self, challenge: bytes) -> bytes | None:
        self.complete = True
        return None


class ScramClient:
    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self.hash = _HASHES[mechanism]
        self.mechanism = mechanism
        self.username = username.replace("=", "=3D").replace(",", "=2C")
        self.password = password
        self.nonce = secrets.token_urlsafe(24)
        self.complete = False
        self._client_first_bare = f"n={self.username},r={self.nonce}"
        self._server_signature = b""
        self._step = 0

    def first(self) -> bytes:
        return ("n,," + self._client_first_bare).encode()

    def evaluate(self, challenge: bytes) -> bytes | None:
        if self._step == 0:
            self._step = 1
            return self._client_final(challenge.decode())
        attrs = dict(p.split("=", 1) for p in challenge.decode().split(",") if "=" in p)
        if "e" in attrs:
            raise AuthenticationError(f"{self.mechanism}: the broker says {attrs['e']}", 58)
        if not hmac.compare_digest(base64.b64decode(attrs.get("v", "")), self._server_signature):
            raise AuthenticationError(f"{self.mechanism}: the broker's signature is wrong: it "
                                      "does not know the password (is this the right broker?)", 58)
        self.complete = True
        return None

    def _client_final(self, server_first: str) -> bytes:
        attrs = dict(p.split("=", 1) for p in server_first.split(",") if "=" in p)
        nonce, salt, iterations = attrs["r"], base64.b64decode(attrs["s"]), int(attrs["i"])
        if not nonce.startswith(self.nonce):
            raise AuthenticationError(f"{self.mechanism}: the broker's nonce does not extend ours",
                                      58)
        salted = hashlib.pbkdf2_hmac(self.hash, self.password.encode(), salt, iterations)
        client_key = hmac.new(salted, b"Client Key", self.hash).digest()
        stored_key = hashlib.new(self.hash, client_key).digest()
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._client_first_bare},{server_first},{without_proof}".encode()
        signature = hmac.new(stored_key, auth_message, self.hash).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = hmac.new(salted, b"Server Key", self.hash).digest()
        self._server_signature = hmac.new(server_key, auth_message, self.hash).digest()
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def sasl_client(security: Security) -> PlainClient | ScramClient:
    assert security.username is not None and security.password is not None
    if security.mechanism == "PLAIN":
        return PlainClient(security.username, security.password)
    return ScramClient(security.mechanism, security.username, security.password)


def scram_salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """For AlterUserScramCredentials (KIP-554): the client salts and hashes the password."""
    return hashlib.pbkdf2_hmac(_HASHES[mechanism], password.encode(), salt, iterations)
