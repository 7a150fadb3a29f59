"""The logs of the processes a test runs, on the test's report when it fails.

Every process of a test writes its log to a file: the embedded broker (EmbeddedBroker), an Apache
Kafka node (ApacheKafka), a Spark master, worker, executor or Connect server (SparkCluster,
SparkConnectServer), PostgreSQL (PrivatePostgres), the power-cut filesystem (PowerCutFS), and
the worker processes the tests start. Each names its file here:

    entry = register_log("broker", path, temporary=True)   # a rig, in start(); until close()
    entry.close()                                          # the rig's close(), before it rmtrees
    attach_log("worker ctp-1", path)                       # the current test only: its workers
    register_log("Spark executor", work_dir, pattern="worker-*/app-*/*/stderr")  # found late

A test that fails (in setup or call) gets, on its report, a section "NAME log (PATH)" with the
last lines of each log open while it ran: those registered during the test (by its body or by
the fixtures set up for it), and those registered earlier that are still open: of module- and
session-scoped fixtures the test uses, or of no fixture at all.

The path printed exists after the run. A log under pytest's basetemp (a test's tmp_path) is
printed where it is: pytest keeps the last three runs. Any other is copied, at the report, into
the test's directory of kept logs: $EXACTLY_TEST_LOGS/<test>, by default <basetemp>/logs/<test>.
A `temporary` log (in a directory its owner removes on close(), e.g. EmbeddedBroker's own
temporary directory) that is closed while a test runs is moved there first, so the log of a
broker started and closed in a test's own `with` block is still there when the report is
written; if the test passes, what was moved is removed, as its owner would have done.

The pytest hooks at the bottom make this module a pytest plugin: tests/conftest.py loads it
(`config.pluginmanager.register(logs, "exactly.testing.logs")` in its pytest_configure).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Self

__all__ = ["LINES", "LOGS_ENV", "ProcessLog", "attach_log", "kept_logs_dir", "register_log",
           "tail", "unique_path"]

LOGS_ENV = "EXACTLY_TEST_LOGS"  # where failed tests' logs are kept (default <basetemp>/logs)
LINES = 200  # lines of each log on a failed test's report
_MAX_TAIL_BYTES = 4 << 20


def tail(path: str | os.PathLike[str], lines: int = LINES) -> str:
    """The last `lines` lines of the file, read from its end (a log may be large)."""
    with open(path, "rb") as f:
        pos = f.seek(0, os.SEEK_END)
        data = b""
        while pos > 0 and data.count(b"\n") <= lines and len(data) < _MAX_TAIL_BYTES:
            step = min(65536, pos)
            pos -= step
            f.seek(pos)
            data = f.read(step) + data
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])


class ProcessLog:
    """A process's log file, or the files matching `pattern` under a directory (found when a
    report is written: an executor's, say, which a Spark worker creates)."""

    def __init__(self, name: str, path: str | os.PathLike[str], *, pattern: str | None = None,
                 title: Callable[[], str] | None = None, temporary: bool = False,
                 lines: int = LINES) -> None:
        self.name = name
        self.path = Path(path)
        self.pattern = pattern
        self.temporary = temporary
        self.lines = lines
        self._title = title
        self.fixture: str | None = None  # the fixture whose setup registered it
        self._kept: list[tuple[str, Path]] | None = None  # where close() moved the files
        self.serial = next(_serials)

    @property
    def key(self) -> tuple[str, str | None]:
        return str(self.path.absolute()), self.pattern

    def heading(self) -> str:
        """The section title before " (PATH)": "NAME log" unless the owner says otherwise."""
        return self._title() if self._title is not None else f"{self.name} log"

    def files(self) -> list[tuple[str, Path]]:
        """(heading, path) of each file, where it is now."""
        if self._kept is not None:
            return list(self._kept)
        if self.pattern is None:
            return [(self.heading(), self.path)]
        found = sorted(p for p in self.path.glob(self.pattern) if p.is_file())
        return [(f"{self.name} log {p.relative_to(self.path)}", p) for p in found]

    def kept_path(self, path: Path) -> Path:
        """Where the file `path` of this log is kept, in the running test's kept logs: the copy
        a report makes and the file close() moves are one, the moved one the later and whole."""
        if self.pattern is None:
            return kept_logs_dir() / f"{_safe(self.name)}.{self.serial}.{path.name}"
        return kept_logs_dir() / f"{_safe(self.name)}.{self.serial}" / path.relative_to(self.path)

    def close(self) -> None:
        """The owner is done with the log: no later test shows it. Call it before removing a
        temporary log, which is moved to the running test's kept logs first."""
        with _state.lock:
            if self in _state.active:
                _state.active.remove(self)
            keep = self.temporary and self._kept is None and _state.current is not None
        if keep:
            self._keep()

    def _keep(self) -> None:
        kept = []
        for heading, path in self.files():
            if not path.exists():
                continue
            target = self.kept_path(path)
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(path, target)
            except OSError:
                continue
            kept.append((heading, target))
            _state.moved.append(target)
        self._kept = kept

    def __enter__(self) -> Self:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        where = self.path if self.pattern is None else self.path / self.pattern
        return f"ProcessLog({self.name!r}, {str(where)!r})"


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active: list[ProcessLog] = []  # registered, not closed yet
        self.current: list[ProcessLog] | None = None  # the running test's, while one runs
        self.fixtures: list[str] = []  # the fixtures being set up, innermost last
        self.moved: list[Path] = []  # temporary logs the running test's closes kept
        self.basetemp: Path | None = None
        self.test_dir: Path | None = None


_state = _State()
_serials = itertools.count(1)


def register_log(name: str, path: str | os.PathLike[str], *, pattern: str | None = None,
                 title: Callable[[], str] | None = None, temporary: bool = False,
                 lines: int = LINES) -> ProcessLog:
    """Show the log at `path` (or the files matching `pattern` under the directory `path`) on
    the report of every test that fails while it is open, until the returned entry's close().
    `temporary`: its owner removes it after close(). Registering an open log again returns the
    same entry."""
    entry = ProcessLog(name, path, pattern=pattern, title=title, temporary=temporary,
                       lines=lines)
    with _state.lock:
        for known in _state.active:
            if known.key == entry.key:
                return known
        entry.fixture = _state.fixtures[-1] if _state.fixtures else None
        _state.active.append(entry)
        if _state.current is not None:
            _state.current.append(entry)
    return entry


def attach_log(name: str, path: str | os.PathLike[str], *, pattern: str | None = None,
               lines: int = LINES) -> ProcessLog:
    """Show the log on the current test's report if it fails, and on no other's: the log of a
    worker process the test itself starts. Outside a test it goes nowhere."""
    entry = ProcessLog(name, path, pattern=pattern, lines=lines)
    with _state.lock:
        if _state.current is not None:
            for known in _state.current:
                if known.key == entry.key:
                    return known
            _state.current.append(entry)
    return entry


def kept_logs_dir() -> Path:
    """The running test's directory of kept logs (created): $EXACTLY_TEST_LOGS/<test>, by default
    <pytest basetemp>/logs/<test>. Outside a test, a new temporary directory."""
    with _state.lock:
        if _state.test_dir is not None:
            _state.test_dir.mkdir(parents=True, exist_ok=True)
            return _state.test_dir
    return Path(tempfile.mkdtemp(prefix="exactly-logs-"))


def unique_path(directory: Path, name: str) -> Path:
    """directory/name, or directory/name-2.ext, -3, ... if that exists."""
    path = directory / name
    stem, dot, ext = name.partition(".")
    n = 1
    while path.exists():
        n += 1
        path = directory / f"{stem}-{n}{dot}{ext}"
    return path


def _safe(text: str) -> str:
    return re.sub(r"[^\w.-]+", "_", text).strip("_")[-100:] or "log"


def _kept_root(basetemp: Path | None) -> Path:
    named = os.environ.get(LOGS_ENV)
    if named:
        return Path(named)
    if basetemp is not None:
        return basetemp / "logs"
    return Path(tempfile.gettempdir()) / "exactly-test-logs"


def _is_kept(path: Path) -> bool:
    """Under a directory that outlives the run: pytest's basetemp or the kept logs."""
    roots = [_kept_root(_state.basetemp)]
    if _state.basetemp is not None:
        roots.append(_state.basetemp)
    resolved = path.resolve()
    return any(resolved.is_relative_to(root.resolve()) for root in roots)


def _sections(entries: list[ProcessLog]) -> list[tuple[str, str]]:
    """("HEADING (PATH)", last lines) of every file of `entries`, once each; a file outside the
    kept places is copied into the test's kept logs first."""
    sections: list[tuple[str, str]] = []
    seen: set[Path] = set()
    for entry in entries:
        for heading, path in entry.files():
            absolute = path.absolute()
            if absolute in seen:
                continue
            seen.add(absolute)
            if not path.exists():
                sections.append((f"{heading} ({path})", "(the file does not exist)"))
                continue
            shown = path
            if not _is_kept(path):
                with contextlib.suppress(OSError):
                    shown = entry.kept_path(path)
                    shown.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(path, shown)
            try:
                text = tail(shown, entry.lines)
            except OSError as exc:
                text = f"(not readable: {exc})"
            sections.append((f"{heading} ({shown})", text))
    return sections


# -- pytest ----------------------------------------------------------------------------------

try:
    import pytest
except ImportError:  # pytest is a test dependency; the registry works without it
    pass
else:
    _LOGS = pytest.StashKey[list[ProcessLog]]()
    _OPEN_AT_START = pytest.StashKey[int]()
    _FAILED = pytest.StashKey[bool]()

    def _used_fixtures(item: pytest.Item) -> set[str]:
        # The request's names include fixtures asked for with getfixturevalue() (a parametrized
        # `db` asking for `postgres`), which the item's static closure does not.
        request = getattr(item, "_request", None)
        names: list[str] = (getattr(request, "fixturenames", None)
                            or getattr(item, "fixturenames", []))
        return set(names)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None,
                                ) -> Iterator[None]:
        """The test's logs: those open now, and those registered until it ends."""
        factory = getattr(item.config, "_tmp_path_factory", None)
        with _state.lock:
            outer = (_state.current, _state.test_dir, _state.moved)  # a pytester run inside
            if _state.basetemp is None and factory is not None:
                with contextlib.suppress(OSError):
                    _state.basetemp = factory.getbasetemp()
            _state.current = item.stash[_LOGS] = list(_state.active)
            item.stash[_OPEN_AT_START] = len(_state.active)
            _state.test_dir = _kept_root(_state.basetemp) / _safe(item.nodeid)
            _state.moved = []
        try:
            yield
        finally:
            with _state.lock:
                moved, test_dir = _state.moved, _state.test_dir
                _state.current, _state.test_dir, _state.moved = outer
            if not item.stash.get(_FAILED, False) and test_dir is not None:
                _remove(moved, test_dir)  # passed: as the owners would have

    def _remove(moved: list[Path], test_dir: Path) -> None:
        """Remove the moved files, and the directories under test_dir (itself too) left empty."""
        for path in moved:
            with contextlib.suppress(OSError):
                path.unlink()
            for directory in path.parents:
                if not directory.is_relative_to(test_dir):
                    break
                try:
                    directory.rmdir()
                except OSError:
                    break

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(fixturedef: Any, request: Any) -> Iterator[None]:
        """Note which fixture registers a log, so that later tests show it only if they use the
        fixture."""
        _state.fixtures.append(fixturedef.argname)
        try:
            yield
        finally:
            _state.fixtures.pop()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                                  ) -> Iterator[None]:
        """On a failed test, a section with the end of each of its logs (module docstring)."""
        outcome: Any = yield
        report = outcome.get_result()
        if not report.failed:
            return
        item.stash[_FAILED] = True
        if report.when not in ("setup", "call"):
            return
        used = _used_fixtures(item)
        registered: list[ProcessLog] = item.stash.get(_LOGS, [])
        with _state.lock:
            logs = list(registered)
        opened_before = item.stash.get(_OPEN_AT_START, 0)
        # Those open before the test began: of no fixture, or of a fixture the test uses; those
        # registered since: all (by the test's body or by fixtures set up for it).
        entries = [e for i, e in enumerate(logs)
                   if i >= opened_before or e.fixture is None or e.fixture in used]
        report.sections.extend(_sections(entries))
