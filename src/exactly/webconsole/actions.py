"""The console's two actions, run with the acting user's own client so that the broker's ACLs
decide (the console's reading credentials never act):

- force-terminate a transactional id's open transaction, a prepared (in-doubt) 2PC one included
  (KIP-939 forceTerminateTransaction: InitProducerId without KeepPreparedTxn). Needs WRITE on the
  transactional id; refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED otherwise.
- abort a hanging transaction on one partition by writing its abort marker (KIP-664's
  abortTransaction: WriteTxnMarkers). Needs CLUSTER_ACTION on the cluster; refused with
  CLUSTER_AUTHORIZATION_FAILED otherwise.

Each checks first, as `exactly transactions` does, that there is something to end: an unknown
transactional id would be created by a force-terminate, and an abort for a producer with nothing
open would write a stray marker. An `ActionError` says what happened, in words for the page.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from exactly.client.admin import AsyncAdmin
from exactly.client.errors import AuthenticationError, KafkaError
from exactly.protocol.errors import ErrorCode
from exactly.protocol.structs import TopicPartition
from exactly.webconsole.gather import problem_text
from exactly.webconsole.sessions import Login

_REFUSALS = {
    ErrorCode.transactional_id_authorization_failed:
        "the broker refused: {user} is not allowed to act on transactional id {target} "
        "(TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an ACL allowing WRITE on it is needed",
    ErrorCode.cluster_authorization_failed:
        "the broker refused: {user} may not write transaction markers "
        "(CLUSTER_AUTHORIZATION_FAILED); an ACL with CLUSTER_ACTION on the cluster is needed",
    ErrorCode.topic_authorization_failed:
        "the broker refused: {user} may not describe the topic of {target} "
        "(TOPIC_AUTHORIZATION_FAILED); an ACL allowing DESCRIBE on it is needed",
}


class ActionError(Exception):
    """An action that did not happen; `refused` when the broker's ACLs said no."""

    def __init__(self, message: str, *, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


@dataclass(frozen=True, slots=True)
class Actor:
    """Who acts: the console's client settings with the user's SASL credentials, if any."""

    settings: Mapping[str, Any]
    login: Login | None

    @property
    def name(self) -> str:
        return f"User:{self.login.username}" if self.login else "the console's principal"

    def admin(self) -> AsyncAdmin:
        settings = dict(self.settings)
        if self.login is not None:
            settings["sasl.username"] = self.login.username
            settings["sasl.password"] = self.login.password
        return AsyncAdmin(settings)


def _explain(actor: Actor, what: str, target: str, exc: BaseException) -> ActionError:
    code = getattr(exc, "code", None)
    if isinstance(exc, KafkaError) and code in _REFUSALS:
        return ActionError(f"{what}: " + _REFUSALS[code].format(user=actor.name, target=target),
                           refused=True)
    return ActionError(problem_text(what, exc))


async def force_terminate(actor: Actor, transactional_id: str) -> str:
    """Terminate the id's transaction; what was done, for the page."""
    what = f"force-terminate {transactional_id!r}"
    async with actor.admin() as admin:
        try:
            described = await admin.describe_transactions([transactional_id])
        except KafkaError as exc:
            if exc.code == ErrorCode.transactional_id_not_found:
                raise ActionError(f"{what}: transactional id {transactional_id!r} does not "
                                  "exist: nothing to terminate") from None
            raise _explain(actor, what, repr(transactional_id), exc) from None
        except (OSError, TimeoutError) as exc:
            raise _explain(actor, what, repr(transactional_id), exc) from None
        try:
            await admin.force_terminate_transaction(transactional_id)
        except (KafkaError, OSError, TimeoutError) as exc:
            raise _explain(actor, what, repr(transactional_id), exc) from None
    before = described[transactional_id]
    return (f"Terminated the {before.state} transaction of {transactional_id!r} (producer "
            f"{before.producer_id}, epoch {before.producer_epoch}) as {actor.name}: its data is "
            "aborted and its producer fenced; the application must initialize again.")


async def abort_hanging(actor: Actor, topic: str, partition: int, producer_id: int,
                        producer_epoch: int) -> str:
    """Write the abort marker of `producer_id`'s open transaction on one partition."""
    where = f"{topic}-{partition}"
    what = f"abort the transaction of producer {producer_id} on {where}"
    async with actor.admin() as admin:
        try:
            producers = await admin.describe_producers([(topic, partition)])
        except (KafkaError, OSError, TimeoutError) as exc:
            raise _explain(actor, what, where, exc) from None
        found = [p for p in producers.get(TopicPartition(topic, partition), [])
                 if p.producer_id == producer_id and p.current_txn_start_offset >= 0]
        if not found:
            raise ActionError(f"{what}: producer {producer_id} has no open transaction on "
                              f"{where} any more: nothing to abort")
        if found[0].producer_epoch != producer_epoch:
            raise ActionError(f"{what}: its open transaction there now has epoch "
                              f"{found[0].producer_epoch}, not {producer_epoch}: nothing aborted "
                              "(look again)")
        try:
            await admin.abort_transaction(topic, partition, producer_id, producer_epoch,
                                          found[0].coordinator_epoch)
        except (KafkaError, OSError, TimeoutError) as exc:
            raise _explain(actor, what, where, exc) from None
    return (f"Aborted the transaction of producer {producer_id} (epoch {producer_epoch}) on "
            f"{where} as {actor.name}: its abort marker is written, the LSO moves on.")


async def check_login(settings: Mapping[str, Any], login: Login) -> str | None:
    """None if the broker accepts these credentials, else why not."""
    try:
        async with Actor(settings, login).admin() as admin:
            await admin.describe_cluster()
    except AuthenticationError as exc:
        return f"the broker did not accept user {login.username!r} ({exc})"
    except KafkaError as exc:
        return problem_text("log in", exc)
    except (OSError, TimeoutError) as exc:
        return problem_text("log in", exc)
    return None

