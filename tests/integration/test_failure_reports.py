"""Failure reports that explain themselves (exactly.testing.logs): a failed test's report shows the
end of the log of every process it ran, with the path of a copy that outlives the run, however
the process was started: a broker opened and closed in the test's own `with` block (its log in a
temporary directory close() removes), a worker process through the tests' launcher
(tests/system/test_eos_pipeline.py's Worker), a broker of a module-scoped fixture. The tests run
pytest on small generated test files, in a process of its own, with tests/conftest.py's hooks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.paths import REPO

pytest_plugins = ["pytester"]


IN_THE_TEST = '''
import time

from exactly.testing import EmbeddedBroker
from tests.system.test_eos_pipeline import Worker


def test_a_broker_of_its_own_and_a_pass():
    with EmbeddedBroker():
        pass


def test_a_broker_and_a_worker_then_a_failure(tmp_path):
    with EmbeddedBroker() as broker:
        worker = Worker(broker, "reported", "reported-in", "reported-out", batch=5,
                        log_dir=tmp_path)
        try:
            worker.ensure_running()
            deadline = time.monotonic() + 120
            while b"ready" not in (tmp_path / "worker-reported.log").read_bytes():
                assert worker.proc.poll() is None, "the worker ended"
                assert time.monotonic() < deadline, "the worker never got ready"
                time.sleep(0.1)
        finally:
            worker.kill()
        print("BROKER DIR", broker.log_path.parent)
        raise AssertionError("the failure under test")
'''

IN_A_FIXTURE = '''
import pytest

from exactly.testing import EmbeddedBroker


@pytest.fixture(scope="module")
def shared():
    with EmbeddedBroker() as b:
        yield b


def test_first_uses_it_and_passes(shared):
    pass


def test_second_uses_it_and_fails(shared):
    raise AssertionError("second")


def test_third_does_not_use_it_and_fails():
    raise AssertionError("third")
'''

HEADING = re.compile(r"^-+ (?P<title>.+?) \((?P<path>/[^()]+)\) -+$")
OTHER = re.compile(r"^-+ .+ -+$")
TEST = re.compile(r"^_{3,} (?P<name>\S+) _{3,}$")


def run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, **files: str
        ) -> dict[str, list[tuple[str, Path, str]]]:
    """Run the files' tests in a pytest process of its own; per failed test, its log sections
    (title, path, text)."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.delenv("EXACTLY_TEST_LOGS", raising=False)
    pytester.makeconftest("from tests.conftest import *  # noqa: F403\n")
    pytester.makepyfile(**files)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=600)
    out = result.stdout.lines
    failed: dict[str, list[tuple[str, Path, str]]] = {}
    test, section = None, None
    for line in out:
        if (m := TEST.match(line)) is not None:
            test, section = m["name"], None
            failed[test] = []
        elif line.startswith(("=", "_")):
            test, section = (None, None) if line.startswith("=") else (test, None)
        elif test is not None and (m := HEADING.match(line)) is not None:
            failed[test].append((m["title"], Path(m["path"]), ""))
            section = m["title"]
        elif test is not None and OTHER.match(line):
            section = None  # another section: captured output
        elif test is not None and section is not None:
            title, path, text = failed[test][-1]
            failed[test][-1] = (title, path, text + line + "\n")
    return failed


def last_line(path: Path) -> str:
    return path.read_text(errors="replace").rstrip("\n").splitlines()[-1]


def test_a_failed_test_shows_the_logs_of_its_broker_and_its_worker(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    failed = run(pytester, monkeypatch, test_inner=IN_THE_TEST)
    assert list(failed) == ["test_a_broker_and_a_worker_then_a_failure"]
    sections = failed["test_a_broker_and_a_worker_then_a_failure"]
    titles = [title for title, _, _ in sections]
    broker = [s for s in sections if s[0].startswith("broker log 127.0.0.1:")]
    worker = [s for s in sections if s[0] == "worker reported log"]
    assert len(broker) == 1 and len(worker) == 1, titles
    for _, path, text in (*broker, *worker):
        assert path.exists(), f"{path} is gone after the run"
        assert last_line(path) in text
    # The broker's own directory is gone (close()); its log was kept, in the run's basetemp,
    # and only the failed test's: the passing test's went with its broker.
    assert "start #1" in broker[0][2]
    kept = broker[0][1].parent
    assert [p.name for p in kept.parent.iterdir()] == [kept.name]
    assert kept.name.endswith("test_a_broker_and_a_worker_then_a_failure")
    assert worker[0][1].name == "worker-reported.log"
    assert "ready" in worker[0][2]


def test_a_module_fixtures_broker_is_shown_to_the_tests_that_use_it(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    failed = run(pytester, monkeypatch, test_shared=IN_A_FIXTURE)
    assert sorted(failed) == ["test_second_uses_it_and_fails",
                              "test_third_does_not_use_it_and_fails"]
    second = failed["test_second_uses_it_and_fails"]
    assert [title.split(":")[0] for title, _, _ in second] == ["broker log 127.0.0.1"]
    assert second[0][1].exists()
    assert failed["test_third_does_not_use_it_and_fails"] == []
