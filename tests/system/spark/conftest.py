"""One SparkSession (local[2]) and one embedded broker for the whole Spark test run."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from exactly.spark import register
from exactly.testing import EmbeddedBroker
from exactly.testing.logs import attach_log


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    # Python workers must import exactly from this interpreter's environment.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    session = (SparkSession.builder.master("local[2]").appName("exactly-tests")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _process_logs_in_tmp_path(request: pytest.FixtureRequest) -> None:
    """The driver and Connect client processes of test_cluster.py and test_connect.py write their
    output to tmp_path/*.log: on the report of a failed test (exactly.testing.logs)."""
    if "tmp_path" in request.fixturenames:
        attach_log("process", request.getfixturevalue("tmp_path"), pattern="*.log")


@pytest.fixture(scope="session")
def spark_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as broker:
        yield broker


@pytest.fixture(scope="session")
def lean_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python with exactly's dependencies and pyarrow but not exactly: a virtualenv whose
    site-packages names this interpreter's by a .pth line. Python does not read the .pth files
    of a directory a .pth line adds, so the editable install's own .pth (the one that puts src/
    on sys.path) is not run there."""
    venv = tmp_path_factory.mktemp("lean-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    paths = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (venv / "lib" / version / "site-packages" / "deps.pth").write_text("\n".join(paths) + "\n")
    python = venv / "bin" / "python"
    script = "import pyarrow, pyspark, kio, crc32c, cramjam; import exactly"
    tried = subprocess.run([str(python), "-c", script], capture_output=True, text=True,
                           check=False)
    assert "No module named 'exactly'" in tried.stderr, tried.stderr
    return python
