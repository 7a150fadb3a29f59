"""The system set-up step of `make test`/`make demo`/.ci/run (scripts/system-deps.sh, issue 18
item 1), run on a PATH where the system tools are hidden or replaced by stand-ins.

The PATH is a temporary directory of symlinks to every command of the real PATH except the
ones the step looks for; stand-ins (small shell scripts) take their place where a case needs
them: `id` (root or not), `ldconfig` (the libfuse3 cache), `java` (its version), and an `apt-get`
that records its calls, so nothing is ever installed.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from tests.paths import REPO

SCRIPT = REPO / "scripts" / "system-deps.sh"
# Everything the step looks for, and what stands in for it when a case wants it present.
TOOLS = ["kcat", "kafkacat", "openssl", "fusermount3", "pg_ctl", "initdb", "java", "ldconfig",
         "id", "apt-get", "sudo", "chromium", "chromedriver", "mvn"]
ALL_TEST_PACKAGES = ["kcat", "openssl", "fuse3", "libfuse3-3", "postgresql", "chromium",
                     "chromium-driver", "maven", "openjdk-17-jre-headless"]
PRESENT = {
    "kcat": "exit 0",
    "openssl": "exit 0",
    "fusermount3": "exit 0",
    "pg_ctl": "exit 0",
    "initdb": "exit 0",
    "chromium": "exit 0",
    "chromedriver": "exit 0",
    "mvn": "exit 0",
    "java": "echo 'openjdk version \"17.0.2\" 2022-01-18' >&2",
    "ldconfig": "echo '\tlibfuse3.so.3 (libc6,x86-64) => /lib/x86_64-linux-gnu/libfuse3.so.3'",
}
# apt-get records each call (with DEBIAN_FRONTEND); `install` puts stand-ins for what it was
# asked for on PATH, as the real one would, so the step's check after installing passes.
FAKE_APT_GET = """\
echo "DEBIAN_FRONTEND=${DEBIAN_FRONTEND:-} $*" >> "$APT_LOG"
if [ "$1" = install ]; then
    for arg in "$@"; do
        case "$arg" in
            kcat) printf '#!/bin/sh\\nexit 0\\n' > "$BIN/kcat"; chmod +x "$BIN/kcat" ;;
            postgresql) for t in pg_ctl initdb; do
                    printf '#!/bin/sh\\nexit 0\\n' > "$BIN/$t"; chmod +x "$BIN/$t"; done ;;
        esac
    done
fi
"""


class Machine:
    """A PATH with the step's tools hidden; `present()` and `root()` put stand-ins back."""

    def __init__(self, tmp_path: Path) -> None:
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        self.apt_log = tmp_path / "apt-get.log"
        for directory in os.environ["PATH"].split(os.pathsep):
            if not os.path.isdir(directory):
                continue
            for name in os.listdir(directory):
                target = Path(directory, name)
                link = self.bin / name
                if (name in TOOLS or link.exists() or link.is_symlink()
                        or not os.access(target, os.X_OK) or target.is_dir()):
                    continue
                link.symlink_to(target)
        self.stub("ldconfig", "exit 0")  # an empty cache: libfuse3 missing
        self.stub("id", "echo 1000")
        self.stub("apt-get", FAKE_APT_GET)

    def stub(self, name: str, body: str) -> None:
        path = self.bin / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)

    def present(self, *names: str) -> None:
        for name in names:
            self.stub(name, PRESENT[name])

    def root(self) -> None:
        self.stub("id", "echo 0")

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "MAKEFLAGS")}
        env.update(PATH=str(self.bin), PG_BIN_GLOB=str(self.bin.parent / "no-postgresql/*/bin"),
                   APT_LOG=str(self.apt_log), BIN=str(self.bin))
        return env

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(SCRIPT), *args], check=False, env=self.env(),
                              capture_output=True, text=True, timeout=30)

    def apt_calls(self) -> list[str]:
        return self.apt_log.read_text().splitlines() if self.apt_log.exists() else []


def named_packages(stderr: str) -> list[str]:
    """The packages the step's message lists, one per `  package: no ...` line."""
    return [line.split(":")[0].strip() for line in stderr.splitlines()
            if line.startswith("  ") and ": no " in line]


def install_command(packages: list[str]) -> str:
    return ("sudo sh -c 'apt-get update && apt-get install -y --no-install-recommends "
            + " ".join(packages) + "'")


@pytest.fixture
def machine(tmp_path: Path) -> Machine:
    return Machine(tmp_path)


def test_not_root_names_every_missing_package_and_the_install_command(machine: Machine) -> None:
    done = machine.run("test")
    assert done.returncode == 1, done
    assert named_packages(done.stderr) == ALL_TEST_PACKAGES
    assert install_command(ALL_TEST_PACKAGES) in done.stderr
    assert "make test SKIP_SYSTEM_DEPS=1" in done.stderr
    assert done.stdout == ""
    assert machine.apt_calls() == []


def test_not_root_names_only_what_is_missing(machine: Machine) -> None:
    machine.present("openssl", "fusermount3", "ldconfig", "java", "chromium", "chromedriver",
                    "mvn")
    done = machine.run("test")
    assert done.returncode == 1, done
    assert named_packages(done.stderr) == ["kcat", "postgresql"]
    assert install_command(["kcat", "postgresql"]) in done.stderr
    assert machine.apt_calls() == []


def test_demo_needs_java_only(machine: Machine) -> None:
    done = machine.run("demo")
    assert done.returncode == 1, done
    assert named_packages(done.stderr) == ["openjdk-17-jre-headless"]
    assert "make demo SKIP_SYSTEM_DEPS=1" in done.stderr


def test_java_older_than_17_counts_as_missing(machine: Machine) -> None:
    machine.stub("java", "echo 'java version \"1.8.0_382\"' >&2")
    done = machine.run("demo")
    assert done.returncode == 1, done
    assert named_packages(done.stderr) == ["openjdk-17-jre-headless"]


def test_check_only_never_installs_even_as_root(machine: Machine) -> None:
    machine.root()
    done = machine.run("--check", "test")
    assert done.returncode == 1, done
    assert named_packages(done.stderr) == ALL_TEST_PACKAGES
    assert machine.apt_calls() == []


def test_everything_present_is_silent_and_calls_no_apt_get(machine: Machine) -> None:
    machine.root()
    machine.present(*PRESENT)
    for target in ("test", "demo"):
        done = machine.run(target)
        assert (done.returncode, done.stdout, done.stderr) == (0, "", ""), done
    assert machine.apt_calls() == []


def test_root_installs_what_is_missing_with_apt_get(machine: Machine) -> None:
    machine.root()
    machine.present("openssl", "fusermount3", "ldconfig", "java", "chromium", "chromedriver",
                    "mvn")
    done = machine.run("test")
    assert done.returncode == 0, done
    assert machine.apt_calls() == [
        "DEBIAN_FRONTEND=noninteractive update -q",
        "DEBIAN_FRONTEND=noninteractive install -y -q --no-install-recommends kcat postgresql",
    ]


def test_root_fails_when_apt_get_did_not_provide_it(machine: Machine) -> None:
    machine.root()
    machine.present("kcat", "fusermount3", "ldconfig", "java", "pg_ctl", "initdb", "chromium",
                    "chromedriver", "mvn")
    done = machine.run("test")  # the stand-in apt-get installs no openssl
    assert done.returncode == 1, done
    assert "still not found" in done.stderr
    assert named_packages(done.stderr) == ["openssl"]


def test_make_runs_the_step_first_and_skip_system_deps_goes_on(machine: Machine) -> None:
    make = ["make", "--no-print-directory", "-C", str(REPO)]
    planned = subprocess.run([*make, "-n", "test"], env=machine.env(), capture_output=True,
                             text=True, timeout=30, check=True).stdout.splitlines()
    assert "scripts/system-deps.sh test" in planned[0]
    stopped = subprocess.run([*make, "system-deps-test"], check=False, env=machine.env(),
                             capture_output=True, text=True, timeout=30)
    assert stopped.returncode != 0
    assert named_packages(stopped.stderr) == ALL_TEST_PACKAGES
    skipped = subprocess.run([*make, "system-deps-test", "SKIP_SYSTEM_DEPS=1"],
                             check=False, env=machine.env(), capture_output=True, text=True,
                             timeout=30)
    assert skipped.returncode == 0, skipped
    assert machine.apt_calls() == []
