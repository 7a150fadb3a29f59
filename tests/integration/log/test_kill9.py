"""A real kill -9 of a process appending to a log, then recovery."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from exactly.log import LogConfig, PartitionLog
from exactly.protocol.records import Record, build_batch
from tests.helpers.log.log_helpers import offsets_of

WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from exactly.log import LogConfig, PartitionLog
    from exactly.protocol.records import Record, build_batch

    plog = PartitionLog.open(Path(sys.argv[1]), LogConfig(segment_bytes=20_000))
    seq = 0
    while True:
        batch = build_batch([Record(b"k", b"v" * 300) for _ in range(3)], timestamp=seq,
                            producer_id=5, producer_epoch=0, base_sequence=seq)
        plog.append(batch)
        seq += 3
        if seq % 30 == 0:
            plog.flush()
            print(plog.flushed_offset, flush=True)
""")


def test_kill9_while_appending(tmp_path: Path) -> None:
    directory = tmp_path / "k-0"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(directory)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    acknowledged = 0
    for line in proc.stdout:
        acknowledged = int(line)
        if acknowledged >= 600:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (directory / ".clean_shutdown").exists()

    plog = PartitionLog.open(directory, LogConfig(segment_bytes=20_000))
    try:
        assert plog.log_end_offset >= acknowledged
        assert plog.log_end_offset % 3 == 0
        offset, seen = 0, []
        while offset < plog.log_end_offset:
            offs = offsets_of(plog.read(offset, 1 << 20))
            seen.extend(offs)
            offset = offs[-1] + 1
        assert seen == list(range(plog.log_end_offset))
        entry = plog.producer_state.last_entry(5)
        assert entry is not None and entry.last_sequence == plog.log_end_offset - 1
        nxt = build_batch([Record(b"k", b"v")], timestamp=0, producer_id=5, producer_epoch=0,
                          base_sequence=plog.log_end_offset)
        assert plog.append(nxt).base_offset == entry.last_offset + 1
    finally:
        plog.close()
