"""The broker keys of authentication: `sasl.*` for SASL listeners, `ssl.*` for TLS listeners
(PEM only). exactly/server/config.py gathers `AUTH_KEYS`; tls.py reads the ssl.* values.

The keys holding secrets are `sensitive`: DescribeConfigs hides their values, as Kafka hides its
PASSWORD keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from exactly.configdef import Key, int_range, one_of, parse_optional_str, split_list

SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _parse_mechanisms(text: str) -> tuple[str, ...]:
    mechanisms = tuple(m.upper() for m in split_list(text))
    for m in mechanisms:
        if m not in SASL_MECHANISMS:
            raise ValueError(f"mechanism {m} is not supported; use {', '.join(SASL_MECHANISMS)}")
    return mechanisms


def _parse_plain_users(text: str) -> tuple[str, ...]:
    users = split_list(text)
    for item in users:
        user, sep, _ = item.partition(":")
        if not sep or not user:
            raise ValueError("must be USER:PASSWORD pairs separated by commas, e.g. alice:secret")
    return users


def plain_users(values: Mapping[str, Any]) -> dict[str, str]:
    """sasl.plain.users as {user: password} (a password may hold ':')."""
    return dict(item.partition(":")[::2] for item in values["sasl.plain.users"])


AUTH_KEYS: tuple[Key, ...] = (
    Key(
        "sasl.server.max.receive.size",
        "INT",
        524288,
        int_range(1),
        "Largest request frame accepted before a SASL listener's client has authenticated; a "
        "larger one closes the connection.",
    ),
    Key(
        "sasl.enabled.mechanisms",
        "LIST",
        "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        _parse_mechanisms,
        "SASL mechanisms offered on SASL_PLAINTEXT and SASL_SSL listeners: PLAIN, SCRAM-SHA-256, "
        "SCRAM-SHA-512.",
    ),
    Key(
        "sasl.plain.users",
        "LIST",
        "",
        _parse_plain_users,
        "Exactly's own key (Kafka puts these in a JAAS file): the SASL/PLAIN users, "
        "USER:PASSWORD pairs separated by commas, e.g. alice:secret,bob:pw. SCRAM users are "
        "managed with AlterUserScramCredentials (`exactly users add-scram`) instead.",
        sensitive=True,
    ),
    Key("ssl.keystore.type", "STRING", "PEM", one_of(("PEM",)), "Only PEM is supported."),
    Key(
        "ssl.keystore.location",
        "STRING",
        None,
        parse_optional_str,
        "PEM file with the server's certificate chain and private key, for SSL and SASL_SSL "
        "listeners.",
    ),
    Key(
        "ssl.keystore.certificate.chain",
        "STRING",
        None,
        parse_optional_str,
        "The server's certificate chain in PEM, inline (instead of ssl.keystore.location).",
        sensitive=True,  # Kafka's type PASSWORD: DescribeConfigs hides it
    ),
    Key(
        "ssl.keystore.key",
        "STRING",
        None,
        parse_optional_str,
        "The server's private key in PEM, inline (with ssl.keystore.certificate.chain).",
        sensitive=True,
    ),
    Key(
        "ssl.key.password",
        "STRING",
        None,
        parse_optional_str,
        "Password of an encrypted private key.",
        sensitive=True,
    ),
    Key("ssl.truststore.type", "STRING", "PEM", one_of(("PEM",)), "Only PEM is supported."),
    Key(
        "ssl.truststore.location",
        "STRING",
        None,
        parse_optional_str,
        "PEM file with the CA certificates that client certificates must be signed by.",
    ),
    Key(
        "ssl.client.auth",
        "STRING",
        "none",
        one_of(("none", "requested", "required")),
        "Whether TLS clients must present a certificate; its subject becomes the principal "
        "(User:CN=...,O=...) on an SSL listener.",
    ),
)
