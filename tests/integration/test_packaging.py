"""Packaging (issue 18 item 2): the wheel builds without a C compiler, leaving out the C decoder
(exactly.client._decode) with a message saying so, and builds it given one; the compiler-less
wheel, installed into a throwaway virtualenv, runs a broker and a consumer that decode records
in Python. The extras spark/postgres/test/dualwrite carry what the connector, the dual-write
store and the tests import.

Wheels are built with this virtualenv's pip and setuptools (`--no-build-isolation`: no network),
once per variant, from a copy of the source tree without build products (as a fresh clone is).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

from tests.paths import REPO

_DECODER = "exactly/client/_decode."


def _copy_source(dest: Path) -> Path:
    """What a fresh clone holds for building: no .so, no build/, no egg-info, no caches."""
    dest.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(REPO / name, dest / name)
    shutil.copytree(REPO / "src", dest / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info"))
    return dest


def _build_wheel(root: Path, name: str, cc: str | None) -> tuple[Path, str]:
    """(the wheel, pip's verbose output) built from a fresh copy; cc None: the default compiler."""
    source = _copy_source(root / f"src-{name}")
    out = root / f"wheel-{name}"
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "PIP_REQUIRE_VIRTUALENV")}
    if cc is not None:
        env["CC"] = cc
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--no-cache-dir", "--disable-pip-version-check", "-v", "-w", str(out), str(source)],
        check=False, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"pip wheel failed:\n{done.stdout}\n{done.stderr}"
    (wheel,) = out.glob("exactly-*.whl")
    return wheel, done.stdout + done.stderr


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    root = tmp_path_factory.mktemp("wheels")
    return {"no-compiler": _build_wheel(root, "no-compiler", "false"),
            "compiler": _build_wheel(root, "compiler", None)}


def _decoders(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        return [n for n in z.namelist()
                if n.startswith(_DECODER) and not n.endswith((".c", ".pyi"))]


def test_wheel_without_a_c_compiler_builds_without_the_decoder(
        wheels: dict[str, tuple[Path, str]]) -> None:
    wheel, output = wheels["no-compiler"]
    assert _decoders(wheel) == []
    assert "building the C decoder exactly.client._decode failed" in output
    assert "pure-Python decoder" in output
    with zipfile.ZipFile(wheel) as z:
        assert "exactly/client/fetcher.py" in z.namelist()


def test_wheel_with_a_c_compiler_carries_the_decoder(wheels: dict[str, tuple[Path, str]]) -> None:
    wheel, output = wheels["compiler"]
    (decoder,) = _decoders(wheel)
    assert decoder.endswith(".so")
    assert "building the C decoder" not in output


_ROUND_TRIP = textwrap.dedent("""
    import sys
    import time
    from pathlib import Path

    import exactly
    from exactly.client import Consumer, Producer, decode
    from exactly.testing import EmbeddedBroker

    assert Path(exactly.__file__).is_relative_to(sys.prefix), exactly.__file__
    assert decode._native is None, "the C decoder is present in a wheel built without a compiler"
    with EmbeddedBroker(startup_timeout=30) as broker:
        config = {"bootstrap.servers": broker.bootstrap}
        producer = Producer(config)
        for i in range(100):
            producer.send("packaged", b"value %d" % i, key=b"k", partition=0)
        producer.flush()
        producer.close()
        consumer = Consumer({**config, "auto.offset.reset": "earliest"})
        consumer.assign([("packaged", 0)])
        values = []
        deadline = time.monotonic() + 20
        while len(values) < 100 and time.monotonic() < deadline:
            values += [r.value for r in consumer.poll(timeout_ms=1000)]
        consumer.close()
    assert values == [b"value %d" % i for i in range(100)], values
    print("decoded", len(values), "records in Python")
""")


def test_compilerless_wheel_installs_and_decodes_in_python(
        wheels: dict[str, tuple[Path, str]], tmp_path: Path) -> None:
    wheel, _ = wheels["no-compiler"]
    target = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(target)
    python = target / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                    "--no-compile", "--disable-pip-version-check", "--quiet", str(wheel)],
                   check=True, capture_output=True, timeout=120)
    # The dependencies come from this virtualenv: a path line (not a site directory, so its
    # editable install of exactly is not seen) after the throwaway venv's own site-packages.
    site = subprocess.run([str(python), "-c",
                           "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          check=True, capture_output=True, text=True).stdout.strip()
    Path(site, "deps-from-test-venv.pth").write_text(sysconfig.get_path("purelib") + "\n")
    done = subprocess.run([str(python), "-c", _ROUND_TRIP], check=False, cwd=tmp_path,
                          capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert "decoded 100 records in Python" in done.stdout


def test_extras() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    names = {k: {req.split("[")[0].split(">")[0].split("<")[0].split("=")[0].strip() for req in v}
             for k, v in extras.items()}
    assert {"pyspark", "pyarrow"} <= names["spark"]
    assert names["postgres"] == {"psycopg"}
    assert names["dualwrite"] == {"exactly"} and extras["dualwrite"] == ["exactly[postgres]"]
    assert "exactly[spark,postgres]" in extras["test"]


def test_confluent_kafka_is_needed_by_tests_only() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert not [r for r in project["dependencies"] if r.startswith("confluent-kafka")]
    assert [r for r in project["optional-dependencies"]["test"] if r.startswith("confluent-kafka")]


@pytest.mark.parametrize("command", [(), ("produce",), ("consume",)], ids=" ".join)
def test_the_cli_runs_without_confluent_kafka(command: tuple[str, ...]) -> None:
    # As after `pip install exactly` (no test extra): importing confluent_kafka fails.
    from tests.integration.cli.test_console_cli import BLOCK_CONFLUENT

    done = subprocess.run([sys.executable, "-c", BLOCK_CONFLUENT, *command, "--help"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"Usage: exactly {' '.join(command)}".rstrip() + " ")
