"""bench/txn_fsync.py --trace reads `perf script` output into a transaction's timeline: which read
is a request, which write its answer, and the steps of the sync round between (the broker's
append, io_submit and eventfd read, the kernel's fdatasync of the broker's file)."""

from __future__ import annotations

import sys

from tests.paths import BENCH

sys.path.insert(0, str(BENCH))
import txn_fsync  # bench/ is not a package: found through the path above

# `perf script -F time,event,trace` of a Produce that waits for a round (connection fd 15,
# eventfd 18), then a read that finds nothing (EAGAIN), then a request answered at once.
SCRIPT = """\
  100.000000:        syscalls:sys_enter_read: fd: 0x0000000f, buf: 0x5592a77553b0, count: 0x00000800
  100.000003:         syscalls:sys_exit_read: 0xef
  100.000070:    syscalls:sys_enter_pwritev2: fd: 0x00000016, vec: 0x7f0, vlen: 0x00000002, pos_l: 0x6c8, pos_h: 0x0, flags: 0x0
  100.000120:   syscalls:sys_enter_io_submit: ctx_id: 0x7f8afc0b0000, nr: 0x00000001, iocbpp: 0x7f8
  100.000150: ext4:ext4_sync_file_enter: dev 254,0 ino 2146353 parent 2154428 datasync 1
  100.000330:  ext4:ext4_sync_file_exit: dev 254,0 ino 2146353 ret 0
  100.000345:        syscalls:sys_enter_read: fd: 0x00000012, buf: 0x7fff9cd34688, count: 0x00000008
  100.000346:         syscalls:sys_exit_read: 0x8
  100.000400:       syscalls:sys_enter_write: fd: 0x0000000f, buf: 0x7fab42b61250, count: 0x00000037
  100.000410:        syscalls:sys_enter_read: fd: 0x0000000f, buf: 0x5592a77553b0, count: 0x00000800
  100.000411:         syscalls:sys_exit_read: 0xfffffffffffffff5
  100.001000:        syscalls:sys_enter_read: fd: 0x0000000f, buf: 0x5592a77553b0, count: 0x00000800
  100.001002:         syscalls:sys_exit_read: 0x3a
  100.001090:       syscalls:sys_enter_write: fd: 0x0000000f, buf: 0x7fab42b61250, count: 0x0000000e
"""


def test_the_timeline_splits_a_round_into_its_steps() -> None:
    rows = txn_fsync.perf_rows(SCRIPT)
    assert rows[4] == (100.000150, "ext4:ext4_sync_file_enter", {"ino": 2146353})
    assert rows[10][2] == {"count": -11}  # EAGAIN
    trace = txn_fsync.timeline(rows)
    assert [round(t) for t in trace.answers] == [400, 90]
    assert {phase: [round(t) for t in times] for phase, times in trace.rounds.items()} == {
        "request -> append": [70], "append -> io_submit": [50], "io_submit -> sync starts": [30],
        "sync": [180], "sync ends -> eventfd read": [15], "eventfd read -> answer": [55]}
