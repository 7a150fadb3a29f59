"""The broker's own CPU per transaction, with no client and no network: the request handlers of
one 1-record transaction (AddPartitionsToTxn v3, a transactional Produce v9, EndTxn v3) and the
markers after it, driven in-process on the broker's event loop, `log.flush.policy=os`.

What `bench/transactions.py` cannot resolve (librdkafka and two processes on two cores make the
client the limit and the noise), this counts in the broker's code alone: microseconds of CPU per
transaction, best of several rounds, so that two versions of the broker can be compared.

    .venv/bin/python bench/txn_cpu.py [--transactions N] [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import time
from typing import Any

from exactly.protocol.apis import ApiKey, build, request_class
from exactly.protocol.records import Record, build_batch
from exactly.server.auth import AuthSession, ListenerRuntime
from exactly.server.context import RequestContext
from exactly.server.handlers import HANDLERS
from exactly.server.services import Services
from exactly.testing import broker_in_process

TOPIC, PARTITIONS, TXN_ID = "t", 4, "bench-txn"


def _nested(api_key: int, version: int, entity: str, /, **fields: Any) -> Any:
    from kio.index import load_payload_module
    from kio.static.constants import EntityType

    module = load_payload_module(api_key, version, EntityType.request)
    return build(getattr(module, entity), **fields)


class Driver:
    """Calls the handlers as the network would, for one producer."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.session = AuthSession(ListenerRuntime("PLAINTEXT", "127.0.0.1", 0), mechanisms=(),
                                   plain_users={}, scram_store=None)  # type: ignore[arg-type]
        self.pid = self.epoch = -1
        self.sequence = [0] * PARTITIONS

    async def call(self, api_key: int, version: int, request: Any) -> Any:
        ctx = RequestContext(self.services, api_key, version, 1, "bench", "127.0.0.1",
                             session=self.session)
        return await HANDLERS[api_key](ctx, request)

    async def init(self) -> None:
        k = ApiKey.INIT_PRODUCER_ID
        response = await self.call(k, 4, build(
            request_class(k, 4), transactional_id=TXN_ID,
            transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
            producer_epoch=-1))
        self.pid, self.epoch = response.producer_id, response.producer_epoch

    async def transaction(self, i: int) -> None:
        partition = i % PARTITIONS
        k = ApiKey.ADD_PARTITIONS_TO_TXN
        await self.call(k, 3, build(
            request_class(k, 3), v3_and_below_transactional_id=TXN_ID,
            v3_and_below_producer_id=self.pid, v3_and_below_producer_epoch=self.epoch,
            v3_and_below_topics=(_nested(k, 3, "AddPartitionsToTxnTopic", name=TOPIC,
                                         partitions=(partition,)),)))
        records = build_batch([Record(None, b"v" * 1024)], timestamp=int(time.time() * 1000),
                              producer_id=self.pid, producer_epoch=self.epoch,
                              base_sequence=self.sequence[partition], transactional=True)
        self.sequence[partition] += 1
        k = ApiKey.PRODUCE
        await self.call(k, 9, build(
            request_class(k, 9), transactional_id=TXN_ID, acks=-1,
            timeout=datetime.timedelta(seconds=30),
            topic_data=(_nested(k, 9, "TopicProduceData", name=TOPIC, partition_data=(
                _nested(k, 9, "PartitionProduceData", index=partition, records=records),)),)))
        k = ApiKey.END_TXN
        await self.call(k, 3, build(request_class(k, 3), transactional_id=TXN_ID,
                                    producer_id=self.pid, producer_epoch=self.epoch,
                                    committed=True))
        await asyncio.sleep(0)  # the markers' task
        await asyncio.sleep(0)


async def run(transactions: int, rounds: int) -> list[float]:
    async with broker_in_process({"log.flush.policy": "os"}) as services:
        services.logs.create_topic(TOPIC, PARTITIONS)
        driver = Driver(services)
        await driver.init()
        for i in range(200):  # warm-up
            await driver.transaction(i)
        costs = []
        for _ in range(rounds):
            started = time.process_time()
            for i in range(transactions):
                await driver.transaction(i)
            costs.append((time.process_time() - started) / transactions * 1e6)
        # Every transaction committed: its record and its marker, nothing left open.
        logs = [services.logs.get_log(TOPIC, p) for p in range(PARTITIONS)]
        written = sum(plog.high_watermark for plog in logs)
        if written != 2 * (200 + transactions * rounds) or any(
                plog.last_stable_offset != plog.high_watermark for plog in logs):
            raise SystemExit(f"the transactions did not all commit: {written} records")
        return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--transactions", type=int, default=2000, help="per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    costs = asyncio.run(run(args.transactions, args.rounds))
    print(f"broker CPU per 1-record transaction: best {min(costs):.1f} us, "
          f"rounds {', '.join(f'{c:.1f}' for c in costs)}")


if __name__ == "__main__":
    main()
