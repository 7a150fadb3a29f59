"""SaslHandshake (v0–1), SaslAuthenticate (v0–2) and the SCRAM credential APIs of KIP-554:
DescribeUserScramCredentials (v0) and AlterUserScramCredentials (v0)."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Protocol

from exactly.protocol.apis import ApiKey
from exactly.protocol.errors import ErrorCode
from exactly.server.acl.model import Operation
from exactly.server.auth.scram import (
    MAX_ITERATIONS,
    MECHANISM_NAMES,
    MIN_ITERATIONS,
    ScramCredential,
)
from exactly.server.auth.session import SaslFailure
from exactly.server.context import Handler, RequestContext
from exactly.server.handlers.common import NO_THROTTLE

if TYPE_CHECKING:
    from kio.static.protocol import ResponsePayload

    from exactly.protocol.requests import (
        AlterUserScramCredentialsRequest,
        DescribeUserScramCredentialsRequest,
        SaslAuthenticateRequest,
        SaslHandshakeRequest,
    )

NO_SESSION_LIFETIME = datetime.timedelta(0)  # no re-authentication (KIP-368) is required


async def handle_sasl_handshake(ctx: RequestContext,
                                request: SaslHandshakeRequest) -> ResponsePayload:
    session = ctx.session
    error = session.handshake(request.mechanism, ctx.api_version)
    if error is not ErrorCode.none:
        # Kafka closes after a failed handshake; the client reads the enabled list first.
        session.close_after_response = True
    return ctx.response(error_code=error, mechanisms=tuple(session.mechanisms))


async def handle_sasl_authenticate(ctx: RequestContext,
                                   request: SaslAuthenticateRequest) -> ResponsePayload:
    session = ctx.session
    try:
        if session.handshake_version == 0:
            raise SaslFailure(ErrorCode.illegal_sasl_state,
                              "SaslAuthenticate after a SaslHandshake v0: send bare SASL tokens")
        token = session.authenticate(request.auth_bytes)
    except SaslFailure as exc:
        session.close_after_response = True
        return ctx.response(error_code=exc.code, error_message=str(exc), auth_bytes=b"",
                            session_lifetime=NO_SESSION_LIFETIME)
    return ctx.response(error_code=ErrorCode.none, error_message=None, auth_bytes=token,
                        session_lifetime=NO_SESSION_LIFETIME)


async def handle_describe_user_scram_credentials(ctx: RequestContext,
                                                 request: DescribeUserScramCredentialsRequest,
                                                 ) -> ResponsePayload:
    if not ctx.authorize(Operation.DESCRIBE):
        return ctx.response(throttle_time=NO_THROTTLE,
                            error_code=ErrorCode.cluster_authorization_failed,
                            error_message="DESCRIBE on the cluster is needed", results=())
    store = ctx.services.credentials
    # KIP-554: null or an empty list both mean every user with a credential (as Kafka)
    asked = [u.name for u in request.users] if request.users else None
    names = store.users() if asked is None else asked
    results = []
    seen: set[str] = set()
    for name in names:
        if name in seen:
            results.append(ctx.nested("DescribeUserScramCredentialsResult", user=name,
                                      error_code=ErrorCode.duplicate_resource,
                                      error_message=f"user {name!r} asked for more than once",
                                      credential_infos=()))
            continue
        seen.add(name)
        mechs = store.mechanisms(name)
        if not mechs:
            results.append(ctx.nested("DescribeUserScramCredentialsResult", user=name,
                                      error_code=ErrorCode.resource_not_found,
                                      error_message=f"user {name!r} has no SCRAM credential",
                                      credential_infos=()))
            continue
        infos = tuple(ctx.nested("CredentialInfo", mechanism=_mech_id(m), iterations=c.iterations)
                      for m, c in sorted(mechs.items()))
        results.append(ctx.nested("DescribeUserScramCredentialsResult", user=name,
                                  error_code=ErrorCode.none, error_message="",
                                  credential_infos=infos))
    # Kafka answers "" (not null) for the messages of success here
    return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message="",
                        results=tuple(results))


def _mech_id(mechanism: str) -> int:
    return {v: k for k, v in MECHANISM_NAMES.items()}[mechanism]


class _Change(Protocol):
    """What a SCRAM credential's deletion and upsertion both name."""

    @property
    def name(self) -> str: ...

    @property
    def mechanism(self) -> int: ...


async def handle_alter_user_scram_credentials(ctx: RequestContext,
                                              request: AlterUserScramCredentialsRequest,
                                              ) -> ResponsePayload:
    allowed = ctx.authorize(Operation.ALTER)
    errors: dict[str, tuple[ErrorCode, str]] = {}
    order: list[str] = []

    def fail(user: str, code: ErrorCode, message: str) -> None:
        errors.setdefault(user, (code, message))

    # KIP-554: one user may not be both upserted and deleted, nor twice for one mechanism.
    seen: dict[tuple[str, int], int] = {}
    changes: tuple[_Change, ...] = (*request.deletions, *request.upsertions)
    for entry in changes:
        if entry.name not in order:
            order.append(entry.name)
        key = (entry.name, int(entry.mechanism))
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > 1:
            fail(entry.name, ErrorCode.duplicate_resource,
                 f"user {entry.name!r} has more than one change for one mechanism")
    if not allowed:
        for user in order:
            errors[user] = (ErrorCode.cluster_authorization_failed,
                            "ALTER on the cluster is needed to change SCRAM credentials")
    store = ctx.services.credentials
    deletions: list[tuple[str, str]] = []
    upserts: list[tuple[str, ScramCredential]] = []
    for d in request.deletions:
        mechanism = MECHANISM_NAMES.get(int(d.mechanism))
        if not d.name:
            fail(d.name, ErrorCode.unacceptable_credential, "the username must not be empty")
        elif mechanism is None:
            fail(d.name, ErrorCode.unsupported_sasl_mechanism,
                 f"unknown SCRAM mechanism {d.mechanism}; use 1 (SCRAM-SHA-256) or 2 (SCRAM-SHA-512)")
        elif store.get(d.name, mechanism) is None:
            fail(d.name, ErrorCode.resource_not_found,
                 f"user {d.name!r} has no {mechanism} credential to delete")
        else:
            deletions.append((d.name, mechanism))
    for u in request.upsertions:
        mechanism = MECHANISM_NAMES.get(int(u.mechanism))
        if not u.name:
            fail(u.name, ErrorCode.unacceptable_credential, "the username must not be empty")
        elif mechanism is None:
            fail(u.name, ErrorCode.unsupported_sasl_mechanism,
                 f"unknown SCRAM mechanism {u.mechanism}; use 1 (SCRAM-SHA-256) or 2 (SCRAM-SHA-512)")
        elif not MIN_ITERATIONS <= u.iterations <= MAX_ITERATIONS:
            fail(u.name, ErrorCode.unacceptable_credential,
                 f"iterations {u.iterations} outside {MIN_ITERATIONS}..{MAX_ITERATIONS}")
        elif not u.salt or not u.salted_password:
            fail(u.name, ErrorCode.unacceptable_credential, "salt and salted password are needed")
        else:
            upserts.append((u.name, ScramCredential.from_salted_password(
                mechanism, bytes(u.salt), bytes(u.salted_password), int(u.iterations))))
    # A user's changes are applied all or none.
    store.apply([(n, c) for n, c in upserts if n not in errors],
                [(n, m) for n, m in deletions if n not in errors])
    results = tuple(
        ctx.nested("AlterUserScramCredentialsResult", user=user,
                   error_code=errors.get(user, (ErrorCode.none, None))[0],
                   error_message=errors.get(user, (ErrorCode.none, None))[1])
        for user in order)
    return ctx.response(throttle_time=NO_THROTTLE, results=results)


HANDLERS: dict[int, Handler] = {
    ApiKey.SASL_HANDSHAKE: handle_sasl_handshake,
    ApiKey.SASL_AUTHENTICATE: handle_sasl_authenticate,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: handle_describe_user_scram_credentials,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: handle_alter_user_scram_credentials,
}
