"""A null broker: the fastest a Python broker could answer a transactional producer here.

It speaks just enough of the Kafka protocol for `bench/transactions.py`'s 1-record transactions
(ApiVersions, Metadata, FindCoordinator, InitProducerId, AddPartitionsToTxn, Produce, EndTxn) and
does nothing else: no log, no disk, no coordinator state, no checks. Every topic asked for
exists with 4 partitions on node 1; Produce answers with an offset counter. It uses what Exactly
uses for the wire (uvloop, the same framing, kio and the hand-written answers of
`exactly.protocol.fast_responses`), on an `asyncio.Protocol` with no stream reader in between.

What it measures: the part of a transaction's time that is the Python process answering at all,
with zero work per request. The gap between it and Exactly is the broker's work; the gap between
it and librdkafka's mock is what a Python process costs before any work. Never use it for
anything else: it loses every record.

    .venv/bin/python bench/null_broker.py [--port N]     # prints "null broker on HOST:PORT"
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import struct
from typing import Any

from exactly.protocol import fast_responses, framing
from exactly.protocol.apis import SUPPORTED, ApiKey, build, response_module
from exactly.protocol.errors import ErrorCode

PARTITIONS = 4
NODE = 1
# Only what is answered below, plus the transactional APIs librdkafka wants to see advertised.
ADVERTISED = (ApiKey.PRODUCE, ApiKey.METADATA, ApiKey.API_VERSIONS, ApiKey.FIND_COORDINATOR,
              ApiKey.INIT_PRODUCER_ID, ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN,
              ApiKey.END_TXN, ApiKey.TXN_OFFSET_COMMIT)
_SIZE = struct.Struct(">i")
OK = ErrorCode.none
NO_THROTTLE = datetime.timedelta(0)


class NullBroker(asyncio.Protocol):
    def __init__(self, host: str, port: int, offsets: dict[tuple[str, int], int]) -> None:
        self.host, self.port = host, port
        self.offsets = offsets
        self.buffer = bytearray()
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        while len(buffer) >= 4:
            (size,) = _SIZE.unpack_from(buffer)
            if len(buffer) < 4 + size:
                return
            frame = bytes(buffer[4:4 + size])
            del buffer[:4 + size]
            header, request = framing.decode_request(frame)
            body = self.answer(header.api_key, header.api_version, request)
            if body is None:
                self.transport.close()
                return
            self.transport.write(framing.encode_response(header.api_key, header.api_version,
                                                         header.correlation_id, body))

    def answer(self, key: int, version: int, request: Any) -> Any:
        module = response_module(key, version)
        if key == ApiKey.PRODUCE:
            topics = []
            for topic in request.topic_data:
                parts = []
                for p in topic.partition_data:
                    base = self.offsets.get((topic.name, p.index), 0)
                    self.offsets[(topic.name, p.index)] = base + 1
                    parts.append((p.index, 0, base, 0, None, (), -1))
                topics.append((topic.name, None, parts))
            return None if request.acks == 0 else fast_responses.produce(version, topics)
        if key == ApiKey.ADD_PARTITIONS_TO_TXN and version <= 3:
            return fast_responses.add_partitions_to_txn(version, [
                (t.name, [(p, 0) for p in t.partitions])
                for t in request.v3_and_below_topics])
        if key == ApiKey.END_TXN:
            return fast_responses.end_txn(version, 0, request.producer_id, request.producer_epoch)
        if key == ApiKey.API_VERSIONS:
            return build(module.ApiVersionsResponse, error_code=OK, throttle_time=NO_THROTTLE, api_keys=tuple(
                build(module.ApiVersion, api_key=k, min_version=SUPPORTED[k][0],
                      max_version=SUPPORTED[k][1]) for k in ADVERTISED))
        if key == ApiKey.METADATA:
            names = [t.name for t in request.topics or ()]
            return build(module.MetadataResponse, throttle_time=NO_THROTTLE, error_code=OK, cluster_id="null",
                         controller_id=NODE, cluster_authorized_operations=-2147483648,
                         brokers=(build(module.MetadataResponseBroker, node_id=NODE,
                                        host=self.host, port=self.port, rack=None),),
                         topics=tuple(self._topic(module, name) for name in names))
        if key == ApiKey.FIND_COORDINATOR:
            where = {"node_id": NODE, "host": self.host, "port": self.port, "error_code": OK,
                     "error_message": None}
            if version >= 4:
                return build(module.FindCoordinatorResponse, throttle_time=NO_THROTTLE, coordinators=tuple(
                    build(module.Coordinator, key=k, **where) for k in request.coordinator_keys))
            return build(module.FindCoordinatorResponse, throttle_time=NO_THROTTLE, **where)
        if key == ApiKey.INIT_PRODUCER_ID:
            return build(module.InitProducerIdResponse, throttle_time=NO_THROTTLE, error_code=OK,
                         producer_id=1000, producer_epoch=0)
        return None  # not spoken here: the connection is closed

    @staticmethod
    def _topic(module: Any, name: str) -> Any:
        partitions = tuple(
            build(module.MetadataResponsePartition, error_code=OK, partition_index=p,
                  leader_id=NODE, leader_epoch=0, replica_nodes=(NODE,), isr_nodes=(NODE,),
                  offline_replicas=())
            for p in range(PARTITIONS))
        return build(module.MetadataResponseTopic, error_code=OK, name=name, topic_id=None,
                     is_internal=False, partitions=partitions,
                     topic_authorized_operations=-2147483648)


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    offsets: dict[tuple[str, int], int] = {}
    holder: dict[str, int] = {}
    server = await loop.create_server(lambda: NullBroker(host, holder["port"], offsets), host, port)
    holder["port"] = server.sockets[0].getsockname()[1]
    print(f"null broker on {host}:{holder['port']}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve("127.0.0.1", args.port))
    else:
        uvloop.run(serve("127.0.0.1", args.port))


if __name__ == "__main__":
    main()
