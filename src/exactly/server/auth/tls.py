"""TLS for SSL and SASL_SSL listeners: the server's SSLContext from Kafka's ssl.* keys (PEM
only), and the principal of a client certificate."""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Mapping
from typing import Any

# Short names Java's X500Principal uses in an RFC 2253 distinguished name.
_DN_NAMES = {"commonName": "CN", "organizationalUnitName": "OU", "organizationName": "O",
             "localityName": "L", "stateOrProvinceName": "ST", "countryName": "C",
             "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID"}


class TlsConfigError(ValueError):
    pass


def server_context(config: Mapping[str, Any] | Any) -> ssl.SSLContext:
    """An SSLContext for the broker's TLS listeners, from ssl.keystore.* / ssl.truststore.*."""
    for key in ("ssl.keystore.type", "ssl.truststore.type"):
        kind = config[key]
        if kind is not None and kind.upper() != "PEM":
            raise TlsConfigError(f"{key}={kind}: only PEM is supported; convert the store with "
                                 "openssl or keytool")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    password = config["ssl.key.password"]
    location = config["ssl.keystore.location"]
    chain, key = config["ssl.keystore.certificate.chain"], config["ssl.keystore.key"]
    try:
        if location:
            ctx.load_cert_chain(location, password=password)
        elif chain and key:
            _load_inline(ctx, chain, key, password)
        else:
            raise TlsConfigError(
                "an SSL or SASL_SSL listener needs a server certificate: set ssl.keystore.location "
                "(a PEM file with the certificate chain and the private key) or "
                "ssl.keystore.certificate.chain and ssl.keystore.key")
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(f"cannot load the server certificate "
                             f"({location or 'ssl.keystore.certificate.chain'}): {exc}") from None
    client_auth = config["ssl.client.auth"]
    truststore = config["ssl.truststore.location"]
    if truststore:
        try:
            ctx.load_verify_locations(cafile=truststore)
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(f"cannot load ssl.truststore.location={truststore}: {exc}") from None
    if client_auth != "none":
        if not truststore:
            raise TlsConfigError(f"ssl.client.auth={client_auth} needs ssl.truststore.location "
                                 "(PEM with the CA certificates that sign client certificates)")
        ctx.verify_mode = ssl.CERT_REQUIRED if client_auth == "required" else ssl.CERT_OPTIONAL
    return ctx


def _load_inline(ctx: ssl.SSLContext, chain: str, key: str, password: str | None) -> None:
    # The ssl module reads certificates from files only: write them to a private temp file.
    fd, path = tempfile.mkstemp(prefix="exactly-keystore-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(chain.strip() + "\n" + key.strip() + "\n")
        ctx.load_cert_chain(path, password=password)
    finally:
        os.unlink(path)


def principal_of(peercert: dict[str, Any] | None) -> str | None:
    """`User:CN=alice,OU=...` from a verified client certificate (Kafka's default
    ssl.principal.mapping.rules: the subject's RFC 2253 name), or None without one."""
    if not peercert or "subject" not in peercert:
        return None
    rdns = []
    for rdn in reversed(peercert["subject"]):  # RFC 2253 lists the most specific part first
        rdns.append("+".join(f"{_DN_NAMES.get(k, k)}={_escape(v)}" for k, v in rdn))
    return "User:" + ",".join(rdns) if rdns else None


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;=' else c for c in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out
