"""exactly.spark.ship's zip: the package's Python files only, in a temporary directory that the
process removes when it exits (Spark serves the file from it while the job runs)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from exactly.spark.ship import package_zip

CODE = """
import zipfile
from exactly.spark.ship import package_zip
path = package_zip()
assert zipfile.ZipFile(path).testzip() is None
print(path)
"""


def test_zip_holds_the_python_files_only(tmp_path: Path) -> None:
    names = zipfile.ZipFile(package_zip(tmp_path)).namelist()
    assert "exactly/spark/stream_sink.py" in names
    assert "exactly/client/fetcher.py" in names
    assert not [n for n in names if n.endswith((".so", ".pyc", ".c")) or "__pycache__" in n]


def test_the_temporary_directory_goes_when_the_process_exits() -> None:
    proc = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True,
                          timeout=120, check=True)
    path = Path(proc.stdout.strip())
    assert path.name == "exactly.zip" and path.parent.name.startswith("exactly-ship-")
    assert not path.parent.exists()
