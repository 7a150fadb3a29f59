"""SCRAM-SHA-256/512 (RFC 5802, RFC 7677): the server's side of the exchange and the stored
credentials (KIP-554: the client sends salt, iterations and salted password; the broker keeps
StoredKey and ServerKey, never the password).

Credentials live in `scram-credentials.json` in the log dir, rewritten atomically (temp file,
fsync, rename, fsync of the directory) on every change: a change is durable once acknowledged.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from pathlib import Path

from exactly.log.files import write_atomically

# KIP-554's ScramMechanism ids on the wire.
MECHANISM_IDS: dict[str, int] = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MECHANISM_NAMES: dict[int, str] = {v: k for k, v in MECHANISM_IDS.items()}
HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS = 4096  # Kafka's ScramMechanism.minIterations
MAX_ITERATIONS = 16384  # Kafka's AlterUserScramCredentials upper bound
FILE_NAME = "scram-credentials.json"


class ScramError(Exception):
    """The exchange failed; the message is for the client."""


def _hmac(hash_name: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hash_name).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) of RFC 5802: PBKDF2 with the mechanism's HMAC."""
    return hashlib.pbkdf2_hmac(HASHES[mechanism], password.encode(), salt, iterations)


@dataclass(frozen=True, slots=True)
class ScramCredential:
    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_salted_password(cls, mechanism: str, salt: bytes, salted: bytes,
                             iterations: int) -> ScramCredential:
        h = HASHES[mechanism]
        client_key = _hmac(h, salted, b"Client Key")
        return cls(mechanism, salt, hashlib.new(h, client_key).digest(),
                   _hmac(h, salted, b"Server Key"), iterations)

    def to_json(self) -> dict[str, object]:
        b64 = base64.b64encode
        return {"salt": b64(self.salt).decode(), "stored_key": b64(self.stored_key).decode(),
                "server_key": b64(self.server_key).decode(), "iterations": self.iterations}

    @classmethod
    def from_json(cls, mechanism: str, data: dict[str, object]) -> ScramCredential:
        d = base64.b64decode
        return cls(mechanism, d(str(data["salt"])), d(str(data["stored_key"])),
                   d(str(data["server_key"])), int(data["iterations"]))  # type: ignore[call-overload]


class ScramCredentialStore:
    """{user: {mechanism: credential}}, kept in one JSON file."""

    def __init__(self, log_dir: Path) -> None:
        self.path = Path(log_dir) / FILE_NAME
        self._users: dict[str, dict[str, ScramCredential]] = {}
        if self.path.exists():
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            for user, mechs in raw.get("users", {}).items():
                self._users[user] = {m: ScramCredential.from_json(m, c) for m, c in mechs.items()}

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def users(self) -> list[str]:
        return sorted(self._users)

    def mechanisms(self, user: str) -> dict[str, ScramCredential]:
        return dict(self._users.get(user, {}))

    def apply(self, upserts: list[tuple[str, ScramCredential]],
              deletions: list[tuple[str, str]]) -> None:
        """Change several credentials and write them out once."""
        for user, mechanism in deletions:
            mechs = self._users.get(user)
            if mechs is not None:
                mechs.pop(mechanism, None)
                if not mechs:
                    del self._users[user]
        for user, cred in upserts:
            self._users.setdefault(user, {})[cred.mechanism] = cred
        self._save()

    def _save(self) -> None:
        data = {"version": 1, "users": {u: {m: c.to_json() for m, c in mechs.items()}
                                        for u, mechs in sorted(self._users.items())}}
        write_atomically(self.path, json.dumps(data, indent=1))


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ScramError(f"invalid SCRAM attribute {part[:20]!r}")
        out.setdefault(part[0], part[2:])
    return out


def _unescape_name(name: str) -> str:
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise ScramError("invalid username encoding in SCRAM message")
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """One server-side exchange: feed the client's messages, get the server's."""

    def __init__(self, mechanism: str, store: ScramCredentialStore) -> None:
        self.mechanism = mechanism
        self.hash = HASHES[mechanism]
        self.store = store
        self.username: str | None = None
        self._step = 0
        self._cred: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._gs2_header = ""
        self._nonce = ""

    @property
    def complete(self) -> bool:
        return self._step == 2

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("SCRAM message is not UTF-8") from None
        if self._step == 0:
            return self._client_first(text)
        if self._step == 1:
            return self._client_final(text)
        raise ScramError("unexpected SCRAM message after the exchange completed")

    def _client_first(self, text: str) -> bytes:
        # gs2-header: "n,," or "y,," (no channel binding) or "n,a=authzid,"
        parts = text.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y") or (parts[1] and not parts[1].startswith("a=")):
            raise ScramError("invalid SCRAM client-first message")
        self._gs2_header = f"{parts[0]},{parts[1]},"
        self._client_first_bare = parts[2]
        attrs = _attributes(parts[2])
        if "m" in attrs:
            raise ScramError("SCRAM mandatory extensions are not supported")
        if "n" not in attrs or "r" not in attrs:
            raise ScramError("SCRAM client-first message lacks the username or nonce")
        user = _unescape_name(attrs["n"])
        authzid = _unescape_name(parts[1][2:]) if parts[1] else ""
        if authzid and authzid != user:
            raise ScramError("authorization id differs from the username")
        if attrs.get("tokenauth", "false").lower() == "true":
            raise ScramError("delegation tokens are not supported")
        cred = self.store.get(user, self.mechanism)
        if cred is None:
            raise ScramError(f"unknown user or no {self.mechanism} credential for it")
        self.username, self._cred = user, cred
        self._nonce = attrs["r"] + secrets.token_urlsafe(24)
        self._server_first = (f"r={self._nonce},s={base64.b64encode(cred.salt).decode()},"
                              f"i={cred.iterations}")
        self._step = 1
        return self._server_first.encode()

    def _client_final(self, text: str) -> bytes:
        assert self._cred is not None
        head, sep, proof_b64 = text.rpartition(",p=")
        if not sep:
            raise ScramError("SCRAM client-final message lacks the proof")
        attrs = _attributes(head)
        if attrs.get("r") != self._nonce:
            raise ScramError("SCRAM nonce mismatch")
        if attrs.get("c") != base64.b64encode(self._gs2_header.encode()).decode():
            raise ScramError("SCRAM channel binding mismatch")
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except ValueError:
            raise ScramError("SCRAM proof is not base64") from None
        auth_message = f"{self._client_first_bare},{self._server_first},{head}".encode()
        signature = _hmac(self.hash, self._cred.stored_key, auth_message)
        if len(proof) != len(signature):
            raise ScramError("invalid credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self.hash, client_key).digest(), self._cred.stored_key):
            raise ScramError("invalid credentials")
        self._step = 2
        server_signature = _hmac(self.hash, self._cred.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)
