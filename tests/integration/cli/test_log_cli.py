"""`exactly log verify` and `exactly log dump` as an operator runs them (issue 14, item 5), on a
data directory a broker process wrote: verify exits 0 on it, finds a byte flipped in an older
segment (in a record, in a batch length, in a CRC) with its file and offset and exits 1, notes a
running broker; dump prints the batches, records, markers, indexes and checkpoints."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from exactly.log.checkpoints import RECOVERY_POINT_CHECKPOINT, read_checkpoint
from exactly.protocol.records import HEADER_SIZE, decode_records, iter_batches
from exactly.testing import EmbeddedBroker
from tests.helpers.cli.support import exactly
from tests.support import create_topic, produce_confluent

TOPIC = "orders"


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A data directory after a clean stop: `orders` in segments of 16 KiB, plain records, a
    committed and an aborted transaction; the coordinators' internal topics too."""
    data = tmp_path_factory.mktemp("log-cli") / "data"
    with EmbeddedBroker(data_dir=data, settings={"offsets.topic.num.partitions": "2",
                                                  "transaction.state.log.num.partitions": "2"}
                        ) as broker:
        create_topic(broker.bootstrap, TOPIC, config={"segment.bytes": "16384"})
        produce_confluent(broker.bootstrap, TOPIC,
                          [f"order {i:04d} ".encode() * 5 for i in range(800)],
                          extra={"batch.size": 2048})
        txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "cli-t"})
        txn.init_transactions(30)
        for outcome in ("committed", "aborted"):
            txn.begin_transaction()
            txn.produce(TOPIC, f"{outcome} in a transaction".encode())
            txn.flush(30)
            if outcome == "committed":
                txn.commit_transaction(30)
            else:
                txn.abort_transaction(30)
    yield data


@pytest.fixture
def data_dir(written: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "data"
    shutil.copytree(written, copy)
    return copy


def segments(data_dir: Path) -> list[Path]:
    return sorted((data_dir / f"{TOPIC}-0").glob("*.log"))


def test_verify_a_clean_data_dir_exits_0(data_dir: Path) -> None:
    proc = exactly("log", "verify", "--data-dir", str(data_dir))
    (summary,) = proc.stdout.splitlines()  # no problem line
    assert summary.startswith(f"Verified {data_dir}: 5 partitions, ")
    assert summary.endswith(": no problems found")
    assert int(re.search(r"([\d,]+) records", summary)[1].replace(",", "")) >= 802  # type: ignore[index]
    assert len(segments(data_dir)) >= 3


@pytest.mark.parametrize(("where", "at", "message"), [
    ("payload", HEADER_SIZE + 40, "record batch CRC mismatch: stored "),
    ("length", 8, "runs past the end of the segment"),
    ("crc", 18, "record batch CRC mismatch: stored "),
])
def test_verify_finds_a_flipped_byte_in_an_older_segment(data_dir: Path, where: str, at: int,
                                                         message: str) -> None:
    path = segments(data_dir)[1]
    bad = list(iter_batches(path.read_bytes()))[3]
    data = bytearray(path.read_bytes())
    data[bad.position + at] ^= 0x04
    path.write_bytes(bytes(data))

    proc = exactly("log", "verify", "--data-dir", str(data_dir), check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    first = proc.stdout.splitlines()[0]
    place = f"position {bad.position}" if where == "length" else \
        f"offset {bad.base_offset}, position {bad.position}"
    assert first.startswith(f"{path}: {place}: ") and message in first, first
    assert re.search(r": \d+ problems? found$", proc.stdout.strip())


def test_verify_notes_a_running_broker_and_still_verifies(data_dir: Path) -> None:
    with EmbeddedBroker(data_dir=data_dir) as broker:
        proc = exactly("log", "verify", "--data-dir", str(data_dir))
        assert (f"note: a broker (pid {broker.process.pid}) is running on {data_dir}; its "  # type: ignore[union-attr]
                "active segments may change while verified") in proc.stderr
        assert proc.stdout.strip().endswith(": no problems found")
    assert "note: a broker" not in exactly("log", "verify", "--data-dir", str(data_dir)).stderr


def test_bad_arguments_exit_2(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    proc = exactly("log", "verify", "--data-dir", str(missing), check=False)
    assert (proc.returncode, proc.stderr.strip()) == (
        2, f"error: data directory {missing} does not exist")
    assert exactly("log", "verify", check=False).returncode == 2
    proc = exactly("log", "dump", str(tmp_path / "00000000000000000000.log"), check=False)
    assert proc.returncode == 2 and "no such file" in proc.stderr


def test_dump_prints_batches_records_and_markers(data_dir: Path) -> None:
    path = segments(data_dir)[-1]  # the active segment: the transactions are at its end
    stored = list(iter_batches(path.read_bytes()))
    lines = exactly("log", "dump", str(path), "--print-data-log").stdout.splitlines()
    assert lines[:2] == [f"Dumping {path}", f"Log starting offset: {int(path.stem)}"]
    batch_lines = [line for line in lines if line.startswith("baseOffset: ")]
    assert len(batch_lines) == len(stored)
    for line, batch in zip(batch_lines, stored, strict=True):
        assert line.startswith(f"baseOffset: {batch.base_offset} lastOffset: {batch.last_offset} "
                               f"count: {batch.records_count} ")
        assert f" position: {batch.position} CreateTime: {batch.max_timestamp} size: " \
               f"{batch.size} magic: 2 compresscodec: none crc: {batch.crc} isvalid: true" in line
    records = [line for line in lines if line.startswith("| offset: ")]
    values = [r.value for b in stored for r in decode_records(b)]
    assert len(records) == len(values)
    payloads = [line.split(" payload: ", 1)[1] for line in records if " payload: " in line]
    assert payloads == [v.decode() for b in stored if not b.is_control
                        for v in (r.value for r in decode_records(b))]
    assert payloads[-2:] == ["committed in a transaction", "aborted in a transaction"]
    markers = [line.split(" endTxnMarker: ", 1)[1] for line in records if "endTxnMarker" in line]
    assert [m.split()[0] for m in markers] == ["COMMIT", "ABORT"]


def test_dump_prints_indexes_and_checkpoints(data_dir: Path) -> None:
    first = segments(data_dir)[0]
    index = exactly("log", "dump", str(first.with_suffix(".index"))).stdout.splitlines()
    assert index[1] == "offset: 0 position: 0"
    assert all(re.fullmatch(r"offset: \d+ position: \d+", line) for line in index[1:])
    aborted = next(p for p in (data_dir / f"{TOPIC}-0").glob("*.txnindex") if p.stat().st_size)
    (entry,) = exactly("log", "dump", str(aborted)).stdout.splitlines()[1:]
    assert re.fullmatch(r"version: 0 producerId: \d+ firstOffset: \d+ lastOffset: \d+ "
                        r"lastStableOffset: \d+", entry)
    checkpoint = data_dir / RECOVERY_POINT_CHECKPOINT
    lines = exactly("log", "dump", str(checkpoint)).stdout.splitlines()[1:]
    assert lines == [f"topic: {topic} partition: {partition} offset: {offset}"
                     for (topic, partition), offset in sorted(read_checkpoint(checkpoint).items())]
    proc = exactly("log", "dump", str(data_dir / "topics.json"), check=False)
    assert proc.returncode == 2 and "cannot dump this kind of file" in proc.stderr
