"""The broker's services, by name: what a request handler, the network and the metrics may use.

`Broker` (broker.py) builds one `Services` and runs it; everything else receives it (or the parts
it uses) and cannot reach the broker itself, as Tansu's services get a narrow typed context:

    logs          the partition logs (exactly.log.LogManager)
    cleaner       the log cleaner's choices, checkpoint and figures (exactly.log.cleaner)
    txn           the transaction coordinator's state machine (exactly.txn)
    groups        the group coordinator's state machine (exactly.groups)
    share         share groups, share-partitions and their state (exactly.share, KIP-932);
                  `share.is_share_group(group_id)` tells whether an id is a share group
    transactions  the transaction driver: markers, recovery, KIP-890 write verification
    appends       durability under the flush policy, and wake-ups of waiting fetches
    authorizer    the ACL authorizer, None when `authorizer.class.name` is empty
    credentials   the SCRAM credential store
    identity      node id, cluster id, finalized features
    config        the broker's checked configuration
    clock         milliseconds since the epoch; the one clock every service reads
    answers       encoded answers that only change with the topics (Metadata for all topics)
    dynamic_config  the dynamic broker configs (KIP-226) over `config`; None: none can change
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from exactly.groups import GroupCoordinator
    from exactly.log import LogManager
    from exactly.log.cleaner import LogCleaner
    from exactly.server.acl import Authorizer
    from exactly.server.appends import AppendService
    from exactly.server.auth import ScramCredentialStore
    from exactly.server.config import BrokerConfig
    from exactly.server.dynamic_config import DynamicBrokerConfig
    from exactly.server.transactions import TransactionDriver
    from exactly.share import ShareCoordinator
    from exactly.txn import ProducerIdManager, TransactionCoordinator

Clock = Callable[[], int]


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class BrokerIdentity:
    """Who this broker is, as Metadata, DescribeCluster and ApiVersions tell clients."""

    node_id: int
    cluster_id: str
    finalized_features: Mapping[str, int]  # KIP-584: feature name -> finalized level


@dataclass(frozen=True, slots=True)
class Services:
    logs: LogManager
    cleaner: LogCleaner
    txn: TransactionCoordinator
    producer_ids: ProducerIdManager
    groups: GroupCoordinator
    transactions: TransactionDriver
    appends: AppendService
    authorizer: Authorizer | None
    credentials: ScramCredentialStore
    identity: BrokerIdentity
    config: BrokerConfig
    share: ShareCoordinator
    clock: Clock = wall_clock_ms
    answers: dict[Hashable, bytes] = field(default_factory=dict)
    dynamic_config: DynamicBrokerConfig | None = None
