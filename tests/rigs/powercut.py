"""A FUSE filesystem that forgets every write not made durable, on command: power cuts for tests.

`kill -9` of a broker keeps the page cache, so a crash test cannot tell whether the broker
fsyncs what it must before it acknowledges. This filesystem can: it keeps its files in memory,
twice, in the model of LazyFS (Ramos et al., "When Amnesia Strikes: Understanding and
Reproducing Data Loss Bugs with Fault Injection", PVLDB 17(11), 2024;
github.com/dsrhaslab/lazyfs), which keeps unsynced writes in a page cache of its own and drops
them on its clear-cache command. Here directory entries are volatile too, until their
directory's fsync:

- A file has volatile data, what reads see, and durable data. `fsync`/`fdatasync` of the file
  makes its data and size durable. A file never fsynced has no durable data.
- A directory has volatile entries (name -> inode) and durable entries. `fsync` of the directory
  (`os.fsync` on a descriptor from `os.open(dir, os.O_RDONLY)`) makes its entries durable.
  create, mkdir, rename, unlink and rmdir change the volatile entries only; truncate changes the
  volatile data, made durable by the file's fsync.
- A power cut replaces every volatile state by the durable one: from the root, each directory
  gets its durable entries back, each file its durable data; an inode no durable entry reaches
  is gone. This is strict POSIX durability, what a power cut on ext4 without luck may leave
  (no torn writes: a file keeps whole fsyncs).

The process that writes must be dead (`kill -9`, waited for) before the cut: no descriptor
survives a power cut. The cut is asked for over a Unix socket next to the mount (`--control`),
a line `cut`, answered with a line of JSON once it is done. `flock` is not implemented here, so
the kernel keeps flock locks itself, as on a local filesystem (the broker's data-directory lock
works). Reads and writes bypass the page cache (`direct_io`) and the kernel caches no name or
attribute (timeouts 0), so nothing the kernel kept outlives a cut. The broker uses neither mmap
nor sendfile, which `direct_io` would not serve. `--fsync-latency-ms` makes each fsync take
that long, as a disk's flush does: FUSE serves other calls meanwhile (several threads, one lock
over the model), so appends go on during an fsync, and a cut can find them unsynced.

    python tests/rigs/powercut.py MOUNTPOINT --control SOCKET

or, from Python (tests, bench/power_cut.py):

    with PowerCutFS(mountpoint, fsync_latency_ms=1) as fs:
        data = fs.make_durable_dir("data")     # the operator's directory, durable
        ...                                    # a broker writes under data, then is killed
        fs.cut()                               # everything not fsynced is gone
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import logging
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple, Self

from exactly.testing.logs import ProcessLog, register_log

log = logging.getLogger(__name__)

_BLOCK = 4096
_FS_BLOCKS = 1 << 24  # statvfs: 64 GiB, all free: the data live in this process's memory


# -- the model ----------------------------------------------------------------------------------

class File:
    """A regular file: volatile data and durable data. The bytes written since the last fsync
    began lie in [dirty_lo, dirty_hi) (a superset), so an fsync copies those, not the whole file.

    An fsync is two steps, so that it can take time (`--fsync-latency-ms`) as a disk's does:
    `capture` takes what is written when it begins, and `apply` makes that durable when it
    ends; what is written in between waits for the next fsync. `applied` numbers the newest
    capture applied: an older one that ends later adds its bytes, not its older size."""

    __slots__ = ("applied", "data", "dirty_hi", "dirty_lo", "durable", "durable_mtime_ns", "ino",
                 "mode", "mtime_ns")

    def __init__(self, ino: int, mode: int, now_ns: int) -> None:
        self.ino = ino
        self.mode = mode
        self.data = bytearray()
        self.durable = bytearray()
        self.dirty_lo = self.dirty_hi = 0
        self.mtime_ns = self.durable_mtime_ns = now_ns
        self.applied = 0

    def _dirty(self, lo: int, hi: int) -> None:
        if self.dirty_lo == self.dirty_hi:
            self.dirty_lo, self.dirty_hi = lo, hi
        else:
            self.dirty_lo, self.dirty_hi = min(self.dirty_lo, lo), max(self.dirty_hi, hi)

    def write(self, offset: int, buf: bytes, now_ns: int) -> None:
        size = len(self.data)
        if offset > size:  # the hole reads as zeros, and must be durable as zeros too
            self.data.extend(bytes(offset - size))
        self.data[offset : offset + len(buf)] = buf
        self._dirty(min(offset, size), offset + len(buf))
        self.mtime_ns = now_ns

    def truncate(self, length: int, now_ns: int) -> None:
        size = len(self.data)
        if length < size:
            del self.data[length:]
        elif length > size:
            self.data.extend(bytes(length - size))
            self._dirty(size, length)
        self.mtime_ns = now_ns

    def capture(self) -> FileCapture:
        """An fsync begins: the size and the bytes written since the last one began."""
        size = len(self.data)
        lo, hi = min(self.dirty_lo, size), min(self.dirty_hi, size)
        self.dirty_lo = self.dirty_hi = 0
        return FileCapture(size, lo, bytes(self.data[lo:hi]), self.mtime_ns)

    def apply(self, number: int, capture: FileCapture) -> int:
        """The fsync that took capture `number` ends: that is durable. Returns bytes copied."""
        if number > self.applied:
            self.applied = number
            del self.durable[capture.size :]
            self.durable.extend(bytes(capture.size - len(self.durable)))
            self.durable_mtime_ns = capture.mtime_ns
        data = capture.data[: max(0, len(self.durable) - capture.lo)]
        self.durable[capture.lo : capture.lo + len(data)] = data
        return len(data)

    def cut(self) -> None:
        self.data = bytearray(self.durable)
        self.dirty_lo = self.dirty_hi = 0
        self.mtime_ns = self.durable_mtime_ns


class FileCapture(NamedTuple):
    size: int
    lo: int  # where `data` goes
    data: bytes
    mtime_ns: int


class Directory:
    """A directory: volatile entries and durable entries, name -> inode."""

    __slots__ = ("applied", "durable", "durable_mtime_ns", "entries", "ino", "mode", "mtime_ns")

    def __init__(self, ino: int, mode: int, now_ns: int) -> None:
        self.ino = ino
        self.mode = mode
        self.entries: dict[str, Node] = {}
        self.durable: dict[str, Node] = {}
        self.mtime_ns = self.durable_mtime_ns = now_ns
        self.applied = 0

    def capture(self) -> tuple[dict[str, Node], int]:
        """An fsync begins: the entries now (File.capture)."""
        return dict(self.entries), self.mtime_ns

    def apply(self, number: int, capture: tuple[dict[str, Node], int]) -> None:
        """The fsync that took capture `number` ends: those entries are durable, unless a newer
        capture is already."""
        if number > self.applied:
            self.applied = number
            self.durable, self.durable_mtime_ns = capture

    def cut(self) -> None:
        self.entries = dict(self.durable)
        self.mtime_ns = self.durable_mtime_ns


Node = File | Directory


def _walk(root: Directory) -> Iterator[Node]:
    """Every inode the volatile entries reach from `root` (once each: a strict model can leave a
    durable cycle of renamed directories, so nodes are not trusted to form a tree)."""
    seen: set[int] = set()
    stack: list[Node] = [root]
    while stack:
        node = stack.pop()
        if node.ino in seen:
            continue
        seen.add(node.ino)
        yield node
        if isinstance(node, Directory):
            stack.extend(node.entries.values())


def _entries(root: Directory) -> set[tuple[int, str, int]]:
    """(directory, name, inode) of every entry the volatile entries reach from `root`."""
    return {(d.ino, name, child.ino) for d in _walk(root) if isinstance(d, Directory)
            for name, child in d.entries.items()}


def _error(code: int) -> OSError:
    return OSError(code, os.strerror(code))


class PowerCutOperations:
    """The filesystem's operations, as mfusepy calls them (paths, and the handles open and create
    return). A handle names an inode, so a file renamed or unlinked while open keeps its data."""

    use_ns = True  # mfusepy: times in integer nanoseconds

    def __init__(self, fsync_latency: float = 0.0) -> None:
        self.fsync_latency = fsync_latency
        self._lock = threading.Lock()  # FUSE calls and the control socket's cuts
        self._next_ino = 1
        self.root = Directory(self._new_ino(), 0o755, time.time_ns())
        self.root.apply(1, self.root.capture())  # the mount point itself always exists
        self._handles: dict[int, Node] = {}
        self._next_handle = 1  # never reused: a late release after a cut names nothing
        self._fsyncs = 1  # numbers the captures (File.apply)
        self.stats = {"cuts": 0, "file_fsyncs": 0, "dir_fsyncs": 0, "bytes_written": 0,
                      "bytes_synced": 0, "fsyncs_in_progress": 0}
        # File fsyncs by the name of the file's directory (a partition's, for a broker's data):
        # how a test counts the syncs a broker makes per log.
        self.file_fsyncs_by_dir: Counter[str] = Counter()

    def _new_ino(self) -> int:
        ino = self._next_ino
        self._next_ino += 1
        return ino

    def _handle(self, node: Node) -> int:
        handle = self._next_handle
        self._next_handle += 1
        self._handles[handle] = node
        return handle

    def _lookup(self, path: str) -> Node:
        node: Node = self.root
        for part in path.split("/"):
            if not part:
                continue
            if not isinstance(node, Directory):
                raise _error(errno.ENOTDIR)
            child = node.entries.get(part)
            if child is None:
                raise _error(errno.ENOENT)
            node = child
        return node

    def _node(self, path: str | None, fh: int | None) -> Node:
        if fh:  # 0: no handle (a stat by path)
            node = self._handles.get(fh)
            if node is None:  # opened before a cut: no descriptor survives a power cut
                raise _error(errno.EBADF)
            return node
        if path is None:
            raise _error(errno.EBADF)
        return self._lookup(path)

    def _parent(self, path: str) -> tuple[Directory, str]:
        head, _, name = path.rstrip("/").rpartition("/")
        parent = self._lookup(head or "/")
        if not isinstance(parent, Directory):
            raise _error(errno.ENOTDIR)
        if not name:
            raise _error(errno.EBUSY)  # the root itself
        return parent, name

    def _child(self, path: str) -> tuple[Directory, str, Node]:
        """The parent directory, the name and the inode of an existing `path`."""
        parent, name = self._parent(path)
        node = parent.entries.get(name)
        if node is None:
            raise _error(errno.ENOENT)
        return parent, name, node

    def _file(self, path: str | None, fh: int | None) -> File:
        node = self._node(path, fh)
        if not isinstance(node, File):
            raise _error(errno.EISDIR)
        return node

    # -- attributes -----------------------------------------------------------------------------

    def getattr(self, path: str | None, fh: int | None = None) -> dict[str, Any]:
        with self._lock:
            node = self._node(path, fh)
            if isinstance(node, Directory):
                mode, size, links = stat.S_IFDIR | node.mode, _BLOCK, 2
            else:
                mode, size, links = stat.S_IFREG | node.mode, len(node.data), 1
            return {"st_mode": mode, "st_ino": node.ino, "st_nlink": links, "st_size": size,
                    "st_blocks": (size + 511) // 512, "st_blksize": _BLOCK,
                    "st_uid": os.getuid(), "st_gid": os.getgid(), "st_atime": node.mtime_ns,
                    "st_mtime": node.mtime_ns, "st_ctime": node.mtime_ns}

    def chmod(self, path: str | None, mode: int) -> int:
        with self._lock:
            self._lookup(path or "/").mode = mode & 0o7777
        return 0

    def chown(self, path: str | None, uid: int, gid: int) -> int:
        return 0  # one owner: whoever mounted it

    def utimens(self, path: str | None, times: tuple[int, int] | None = None) -> int:
        with self._lock:
            node = self._lookup(path or "/")
            node.mtime_ns = time.time_ns() if times is None else times[1]
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        with self._lock:
            used = sum(len(n.data) for n in _walk(self.root) if isinstance(n, File)) // _BLOCK
        return {"f_bsize": _BLOCK, "f_frsize": _BLOCK, "f_blocks": _FS_BLOCKS,
                "f_bfree": _FS_BLOCKS - used, "f_bavail": _FS_BLOCKS - used,
                "f_files": 1 << 20, "f_ffree": 1 << 20, "f_favail": 1 << 20, "f_namemax": 255}

    # -- files ----------------------------------------------------------------------------------

    def create(self, path: str, mode: int, flags: int = 0) -> int:
        with self._lock:
            parent, name = self._parent(path)
            node = parent.entries.get(name)
            if node is None:
                now = time.time_ns()
                node = File(self._new_ino(), mode & 0o7777, now)
                parent.entries[name] = node
                parent.mtime_ns = now
            elif not isinstance(node, File):
                raise _error(errno.EISDIR)
            elif flags & os.O_TRUNC:
                node.truncate(0, time.time_ns())
            return self._handle(node)

    def open(self, path: str, flags: int) -> int:
        with self._lock:
            node = self._lookup(path)
            if isinstance(node, File) and flags & os.O_TRUNC:
                node.truncate(0, time.time_ns())
            return self._handle(node)

    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        with self._lock:
            return bytes(self._file(path, fh).data[offset : offset + size])

    def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
        with self._lock:
            self._file(path, fh).write(offset, data, time.time_ns())
            self.stats["bytes_written"] += len(data)
            return len(data)

    def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
        with self._lock:
            self._file(path, fh).truncate(length, time.time_ns())
        return 0

    def fsync(self, path: str | None, datasync: int, fh: int) -> int:
        """Durable: what was written before the call (File.capture), once it returns."""
        with self._lock:
            node = self._node(path, fh)
            self._fsyncs += 1
            number = self._fsyncs
            capture = node.capture()
            self.stats["fsyncs_in_progress"] += 1  # a test sees what happens during an fsync
        if self.fsync_latency:  # a disk's flush takes time; other calls go on meanwhile
            time.sleep(self.fsync_latency)
        with self._lock:
            self.stats["fsyncs_in_progress"] -= 1
            if isinstance(node, File):
                assert isinstance(capture, FileCapture)
                self.stats["bytes_synced"] += node.apply(number, capture)
                self.stats["file_fsyncs"] += 1
                if path is not None:
                    self.file_fsyncs_by_dir[os.path.basename(os.path.dirname(path))] += 1
            else:
                assert not isinstance(capture, FileCapture)
                node.apply(number, capture)
                self.stats["dir_fsyncs"] += 1
        return 0

    def release(self, path: str | None, fh: int) -> int:
        with self._lock:
            self._handles.pop(fh, None)
        return 0

    # -- directories ----------------------------------------------------------------------------

    def opendir(self, path: str) -> int:
        with self._lock:
            node = self._lookup(path)
            if not isinstance(node, Directory):
                raise _error(errno.ENOTDIR)
            return self._handle(node)

    def readdir(self, path: str | None, fh: int) -> list[str]:
        with self._lock:
            node = self._node(path, fh)
            if not isinstance(node, Directory):
                raise _error(errno.ENOTDIR)
            return [".", "..", *node.entries]

    def releasedir(self, path: str | None, fh: int) -> int:
        return self.release(path, fh)

    def fsyncdir(self, path: str | None, datasync: int, fh: int) -> int:
        return self.fsync(path, datasync, fh)

    def mkdir(self, path: str, mode: int) -> int:
        with self._lock:
            parent, name = self._parent(path)
            if name in parent.entries:
                raise _error(errno.EEXIST)
            now = time.time_ns()
            parent.entries[name] = Directory(self._new_ino(), mode & 0o7777, now)
            parent.mtime_ns = now
        return 0

    def rmdir(self, path: str) -> int:
        with self._lock:
            parent, name, node = self._child(path)
            if not isinstance(node, Directory):
                raise _error(errno.ENOTDIR)
            if node.entries:
                raise _error(errno.ENOTEMPTY)
            del parent.entries[name]
            parent.mtime_ns = time.time_ns()
        return 0

    def unlink(self, path: str) -> int:
        with self._lock:
            parent, name, node = self._child(path)
            if isinstance(node, Directory):
                raise _error(errno.EISDIR)
            del parent.entries[name]
            parent.mtime_ns = time.time_ns()
        return 0

    def rename(self, old: str, new: str) -> int:
        with self._lock:
            old_parent, old_name, node = self._child(old)
            new_parent, new_name = self._parent(new)
            target = new_parent.entries.get(new_name)
            if target is node:
                return 0
            if target is not None:
                if isinstance(node, Directory) and not isinstance(target, Directory):
                    raise _error(errno.ENOTDIR)
                if isinstance(target, Directory):
                    if not isinstance(node, Directory):
                        raise _error(errno.EISDIR)
                    if target.entries:
                        raise _error(errno.ENOTEMPTY)
            del old_parent.entries[old_name]
            new_parent.entries[new_name] = node
            old_parent.mtime_ns = new_parent.mtime_ns = time.time_ns()
        return 0

    # -- the power cut --------------------------------------------------------------------------

    def cut(self) -> dict[str, int]:
        """Replace every volatile state by the durable one. Returns the counters, and what the
        cut dropped: bytes written and not fsynced (of files kept, and all of files gone),
        files gone, directory entries gone and entries back (names removed or renamed away
        since their directory's last fsync)."""
        with self._lock:
            files = {n.ino: n for n in _walk(self.root) if isinstance(n, File)}
            unsynced = {ino: max(0, min(f.dirty_hi, len(f.data)) - f.dirty_lo)
                        for ino, f in files.items()}
            entries = _entries(self.root)
            self._handles.clear()
            kept: set[int] = set()
            # Each directory is cut when the walk reaches it, before the walk reads its
            # entries: the walk follows the durable entries, and reaches what survives.
            for node in _walk(self.root):
                node.cut()
                if isinstance(node, File):
                    kept.add(node.ino)
            after = _entries(self.root)
            self.stats["cuts"] += 1
            return {**self.stats,
                    "dropped_bytes": sum(unsynced[ino] if ino in kept else len(f.data)
                                         for ino, f in files.items()),
                    "dropped_files": len(files.keys() - kept),
                    "entries_gone": len(entries - after), "entries_back": len(after - entries)}

    def snapshot_stats(self) -> dict[str, int]:
        with self._lock:
            return dict(self.stats)

    def snapshot_syncs(self) -> dict[str, int]:
        with self._lock:
            return dict(self.file_fsyncs_by_dir)


# -- the process: FUSE in the foreground, the control socket in a thread ---------------------------

def _serve_control(ops: PowerCutOperations, path: Path) -> None:
    """Answer `ping`, `stats`, `syncs`, `latency MS` (each fsync from now on takes MS) and
    `cut`, one line each, on the Unix socket at `path`."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    server.bind(str(path))
    server.listen(4)

    def serve() -> None:
        while True:
            conn, _ = server.accept()
            with conn, conn.makefile("rwb") as stream:
                for line in stream:
                    command = line.strip().decode(errors="replace")
                    if command == "ping":
                        answer: dict[str, Any] = {"ok": True}
                    elif command == "stats":
                        answer = {"ok": True, **ops.snapshot_stats()}
                    elif command == "syncs":
                        answer = {"ok": True, "by_dir": ops.snapshot_syncs()}
                    elif command.startswith("latency "):
                        try:
                            latency_ms = float(command.split()[1])
                            if not latency_ms >= 0:  # NaN too
                                raise ValueError(latency_ms)
                        except ValueError:
                            answer = {"ok": False,
                                      "error": f"not a number of ms >= 0: {command!r}"}
                        else:
                            ops.fsync_latency = latency_ms / 1000
                            answer = {"ok": True, "fsync_latency_ms": latency_ms}
                    elif command == "cut":
                        answer = {"ok": True, **ops.cut()}
                        log.warning("power cut: %s", answer)
                    else:
                        answer = {"ok": False, "error": f"unknown command {command!r}; "
                                                        "use ping, stats, syncs, latency MS "
                                                        "or cut"}
                    stream.write(json.dumps(answer).encode() + b"\n")
                    stream.flush()

    threading.Thread(target=serve, name="powercut-control", daemon=True).start()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python tests/rigs/powercut.py",
        description="Mount a filesystem that keeps unsynced writes in memory and drops them on "
                    "a power cut (a line 'cut' on the control socket).")
    parser.add_argument("mountpoint", type=Path)
    parser.add_argument("--control", type=Path, required=True,
                        help="Unix socket to create for the commands ping, stats and cut")
    parser.add_argument("--fsync-latency-ms", type=float, default=0.0,
                        help="how long each fsync takes, as a disk's flush does: the writes "
                             "that go on meanwhile are what a cut may drop (default 0)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    import mfusepy  # here: importing it needs libfuse, which only the mounting process does

    ops = PowerCutOperations(args.fsync_latency_ms / 1000)
    _serve_control(ops, args.control)
    # mfusepy registers the operations the object has; the kernel does the rest (flock).
    # Several threads, so that other calls go on during an fsync's latency (one lock keeps the
    # model consistent).
    mfusepy.FUSE(ops, str(args.mountpoint), foreground=True, fsname="powercut",
                 direct_io=True, hard_remove=True, entry_timeout=0, attr_timeout=0,
                 negative_timeout=0)


# -- the harness's side ---------------------------------------------------------------------------

class PowerCutError(RuntimeError):
    """The filesystem did not mount, or did not answer its control socket."""


class PowerCutFS:
    """A power-cut filesystem mounted at `mountpoint` by a child process, for tests.

    start() mounts it (the directory is created if missing), cut() drops every write not made
    durable, close() unmounts it (`fusermount3 -u`) and ends the process. Its log (cuts and what
    they dropped) goes to `log_path`, by default a temporary file that close() removes;
    registered (exactly.testing.logs), a failed test's report shows it."""

    def __init__(self, mountpoint: str | os.PathLike[str], *,
                 log_path: str | os.PathLike[str] | None = None,
                 fsync_latency_ms: float = 0.0, startup_timeout: float = 20.0) -> None:
        self.mountpoint = Path(mountpoint)
        self.fsync_latency_ms = fsync_latency_ms
        self._tmp = Path(tempfile.mkdtemp(prefix="exactly-powercut-"))
        self.control = self._tmp / "control.sock"
        self.log_path = Path(log_path) if log_path is not None else self._tmp / "powercut.log"
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self._log: ProcessLog | None = None

    def start(self) -> Self:
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        self._log = register_log("power-cut filesystem", self.log_path,
                                 temporary=self.log_path.is_relative_to(self._tmp))
        with open(self.log_path, "ab") as log_file:
            self.process = subprocess.Popen(
                [sys.executable, __file__, str(self.mountpoint),
                 "--control", str(self.control),
                 "--fsync-latency-ms", str(self.fsync_latency_ms)],
                stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file)
        deadline = time.monotonic() + self.startup_timeout
        while not (os.path.ismount(self.mountpoint) and self.control.exists()):
            if self.process.poll() is not None:
                raise PowerCutError(
                    f"the power-cut filesystem exited with code {self.process.returncode} before "
                    f"mounting {self.mountpoint} (needs /dev/fuse and fusermount3: apt-get install "
                    f"fuse3 libfuse3-3)\n{self.log_text()}")
            if time.monotonic() > deadline:
                self.close()
                raise PowerCutError(f"{self.mountpoint} not mounted after "
                                    f"{self.startup_timeout:g}s\n{self.log_text()}")
            time.sleep(0.05)
        self._command("ping")
        return self

    def cut(self) -> dict[str, int]:
        """The power cut: every write not fsynced is gone, every entry of a directory not
        fsynced since it changed is back as it was. Kill and wait for every process that has
        files open here first. Returns the filesystem's counters and what the cut kept."""
        return self._command("cut")

    def stats(self) -> dict[str, int]:
        return self._command("stats")

    def set_fsync_latency(self, ms: float) -> None:
        """Each fsync begun from now on takes `ms` (a broker can start quickly, then sync
        slowly for what a test watches)."""
        self._command(f"latency {ms:g}")
        self.fsync_latency_ms = ms

    def file_fsyncs_by_dir(self) -> dict[str, int]:
        """File fsyncs so far by the name of the file's directory (`__transaction_state-3`)."""
        by_dir: dict[str, int] = self._command("syncs")["by_dir"]
        return by_dir

    def make_durable_dir(self, name: str) -> Path:
        """Create the directory `name` under the mount point and make its entry durable (what an
        operator's `mkdir` and a later sync of the disk would do)."""
        path = self.mountpoint / name
        path.mkdir(exist_ok=True)
        fd = os.open(self.mountpoint, os.O_RDONLY)  # (the testing layer does not import log)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return path

    def _command(self, command: str) -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(60)
            try:
                sock.connect(str(self.control))
                sock.sendall(command.encode() + b"\n")
                with sock.makefile("rb") as stream:
                    line = stream.readline()
            except OSError as exc:
                raise PowerCutError(f"the power-cut filesystem did not answer {command!r}: "
                                    f"{exc}\n{self.log_text()}") from exc
        if not line:
            raise PowerCutError(f"the power-cut filesystem closed its control socket on "
                                f"{command!r}\n{self.log_text()}")
        answer: dict[str, Any] = json.loads(line)
        if not answer.pop("ok"):
            raise PowerCutError(answer.get("error", str(answer)))
        return answer

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-5000:]
        except FileNotFoundError:
            return ""

    def close(self) -> None:
        """Unmount and end the process (lazily unmounted if something still holds a file)."""
        proc, self.process = self.process, None
        if proc is None:
            return
        try:
            self._unmount(proc)
        finally:
            if self._log is not None:
                self._log.close()  # (a test running keeps a temporary log: logs.py)
                self._log = None
            shutil.rmtree(self._tmp, ignore_errors=True)  # the control socket, the default log

    def _unmount(self, proc: subprocess.Popen[bytes]) -> None:
        if os.path.ismount(self.mountpoint):
            done = subprocess.run(["fusermount3", "-u", str(self.mountpoint)],
                                  capture_output=True, check=False)
            if done.returncode != 0:
                subprocess.run(["fusermount3", "-uz", str(self.mountpoint)],
                               capture_output=True, check=False)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


if __name__ == "__main__":
    main()
