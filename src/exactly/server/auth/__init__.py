"""Authentication: TLS listeners, SASL/PLAIN and SASL/SCRAM-SHA-256/512, principals.

A connection gets an `AuthSession` from its listener; on a SASL listener only ApiVersions,
SaslHandshake and SaslAuthenticate are served until the session is authenticated.
"""

from exactly.server.auth.scram import MECHANISM_IDS, ScramCredential, ScramCredentialStore
from exactly.server.auth.session import ANONYMOUS, AuthSession, ListenerRuntime

__all__ = ["ANONYMOUS", "MECHANISM_IDS", "AuthSession", "ListenerRuntime", "ScramCredential",
           "ScramCredentialStore"]
