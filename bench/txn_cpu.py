"""The broker's own CPU per transaction, with no client and no network: one 1-record
transaction (AddPartitionsToTxn v3, a transactional Produce v9, EndTxn v3) and the markers after
it, driven in-process on the broker's event loop, `log.flush.policy=os`.

What `bench/transactions.py` cannot resolve (librdkafka and two processes on two cores make the
client the limit and the noise), this counts in the broker's code alone: microseconds of CPU per
transaction, so that two versions of the broker can be compared. Each request is what the
network layer does with it (decode the frame, run the handler, encode the answer); the frames
are built before a round starts, so the client's work is not counted. Per request it reports
the CPU up to the answer (the critical path: librdkafka sends each request after the previous
answer) and, apart, what runs after the EndTxn answer (markers, CompleteCommit), which overlaps
the client's turnaround. Each figure is the best round's.

    .venv/bin/python bench/txn_cpu.py [--transactions N] [--rounds N]

To compare two versions of the broker, run it against each in turn, several times, alternating
(`PYTHONPATH=OTHER/src .venv/bin/python bench/txn_cpu.py`).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import time
from typing import Any

from exactly.protocol import framing
from exactly.protocol.apis import ApiKey, build, request_class
from exactly.protocol.records import Record, build_batch
from exactly.server.auth import AuthSession, ListenerRuntime
from exactly.server.context import RequestContext
from exactly.server.handlers import HANDLERS
from exactly.server.services import Services
from exactly.testing import broker_in_process

TOPIC, PARTITIONS, TXN_ID = "t", 4, "bench-txn"
PHASES = ("AddPartitionsToTxn", "Produce", "EndTxn", "after the answer")


def _nested(api_key: int, version: int, entity: str, /, **fields: Any) -> Any:
    from kio.index import load_payload_module
    from kio.static.constants import EntityType

    module = load_payload_module(api_key, version, EntityType.request)
    return build(getattr(module, entity), **fields)


def _frame(api_key: int, version: int, request: Any) -> bytes:
    """The request as the network hands it to the broker (without the size prefix)."""
    header = framing.RequestHeader(api_key, version, 1, "bench")
    return framing.encode_request(header, request)[4:]


class Driver:
    """Does with the frames of one producer what the network layer does with them."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.session = AuthSession(ListenerRuntime("PLAINTEXT", "127.0.0.1", 0), mechanisms=(),
                                   plain_users={}, scram_store=None)  # type: ignore[arg-type]
        self.pid = self.epoch = -1
        self.sequence = [0] * PARTITIONS

    async def call(self, frame: bytes) -> bytes:
        header, request = framing.decode_request(frame)
        ctx = RequestContext(self.services, header.api_key, header.api_version,
                             header.correlation_id, header.client_id, "127.0.0.1",
                             session=self.session, principal=self.session.principal)
        response = await HANDLERS[header.api_key](ctx, request)
        return framing.encode_response(header.api_key, header.api_version,
                                       header.correlation_id, response)

    async def init(self) -> None:
        k = ApiKey.INIT_PRODUCER_ID
        request = build(request_class(k, 4), transactional_id=TXN_ID,
                        transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
                        producer_epoch=-1)
        ctx = RequestContext(self.services, k, 4, 1, "bench", "127.0.0.1", session=self.session)
        response = await HANDLERS[k](ctx, request)
        self.pid, self.epoch = response.producer_id, response.producer_epoch

    def frames(self, i: int) -> tuple[bytes, bytes, bytes]:
        """The three requests of the `i`th transaction."""
        partition = i % PARTITIONS
        k = ApiKey.ADD_PARTITIONS_TO_TXN
        add = _frame(k, 3, build(
            request_class(k, 3), v3_and_below_transactional_id=TXN_ID,
            v3_and_below_producer_id=self.pid, v3_and_below_producer_epoch=self.epoch,
            v3_and_below_topics=(_nested(k, 3, "AddPartitionsToTxnTopic", name=TOPIC,
                                         partitions=(partition,)),)))
        records = build_batch([Record(None, b"v" * 1024)], timestamp=int(time.time() * 1000),
                              producer_id=self.pid, producer_epoch=self.epoch,
                              base_sequence=self.sequence[partition], transactional=True)
        self.sequence[partition] += 1
        k = ApiKey.PRODUCE
        produce = _frame(k, 9, build(
            request_class(k, 9), transactional_id=TXN_ID, acks=-1,
            timeout=datetime.timedelta(seconds=30),
            topic_data=(_nested(k, 9, "TopicProduceData", name=TOPIC, partition_data=(
                _nested(k, 9, "PartitionProduceData", index=partition, records=records),)),)))
        k = ApiKey.END_TXN
        end = _frame(k, 3, build(request_class(k, 3), transactional_id=TXN_ID,
                                 producer_id=self.pid, producer_epoch=self.epoch, committed=True))
        return add, produce, end

    async def transaction(self, frames: tuple[bytes, bytes, bytes], costs: list[int]) -> None:
        """One transaction; adds the CPU nanoseconds of each phase to `costs`."""
        clock = time.process_time_ns
        t0 = clock()
        await self.call(frames[0])
        t1 = clock()
        await self.call(frames[1])
        t2 = clock()
        await self.call(frames[2])
        t3 = clock()
        await asyncio.sleep(0)  # the markers' task
        await asyncio.sleep(0)
        t4 = clock()
        costs[0] += t1 - t0
        costs[1] += t2 - t1
        costs[2] += t3 - t2
        costs[3] += t4 - t3


async def run(transactions: int, rounds: int) -> list[list[float]]:
    """Per round, the microseconds of CPU per transaction of each phase (PHASES)."""
    async with broker_in_process({"log.flush.policy": "os"}) as services:
        services.logs.create_topic(TOPIC, PARTITIONS)
        driver = Driver(services)
        await driver.init()
        for i in range(200):  # warm-up
            await driver.transaction(driver.frames(i), [0] * len(PHASES))
        results = []
        for _ in range(rounds):
            frames = [driver.frames(i) for i in range(transactions)]
            costs = [0] * len(PHASES)
            for f in frames:
                await driver.transaction(f, costs)
            results.append([c / transactions / 1e3 for c in costs])
        # Every transaction committed: its record and its marker, nothing left open.
        logs = [services.logs.get_log(TOPIC, p) for p in range(PARTITIONS)]
        written = sum(plog.high_watermark for plog in logs)
        if written != 2 * (200 + transactions * rounds) or any(
                plog.last_stable_offset != plog.high_watermark for plog in logs):
            raise SystemExit(f"the transactions did not all commit: {written} records")
        return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--transactions", type=int, default=2000, help="per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    results = asyncio.run(run(args.transactions, args.rounds))
    best = min(results, key=sum)
    critical = sum(best[:3])
    print(f"broker CPU per 1-record transaction: best round {sum(best):.1f} us "
          f"(rounds {', '.join(f'{sum(r):.1f}' for r in results)})")
    print(f"  up to the answers {critical:.1f} us: "
          + ", ".join(f"{name} {us:.1f}" for name, us in zip(PHASES[:3], best[:3], strict=True))
          + f"; {PHASES[3]} {best[3]:.1f} us")


if __name__ == "__main__":
    main()
