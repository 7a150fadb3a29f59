"""Shipping the connector to executors whose Python does not have `exactly` installed.

On a cluster the `exactly` data source runs in the executors' Python workers, which import
`exactly.spark` by name. `ship(spark)` packs this `exactly` package as a zip of its Python files
and adds it to the job the Spark way: `SparkContext.addPyFile` on a classic session,
`SparkSession.addArtifacts(..., pyfile=True)` on a Spark Connect session. Spark copies it to every
executor and puts it on the Python workers' `sys.path`.

The zip holds Python files only: the optional C decoder (`exactly.client._decode`) cannot be
imported from a zip, and the executors then decode fetched records with the Python fallback. The
executors' Python needs `exactly`'s dependencies (kio, crc32c, cramjam) and pyarrow, which every
PySpark Python data source needs. An executor Python that has none of them gets a whole packed
virtualenv instead (`venv-pack`, `spark.archives`; README, "Spark on a cluster"); ship() is then
not needed, and would only hide the packed copy's C decoder behind the zip's Python files.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import exactly

__all__ = ["package_zip", "ship"]

_SKIPPED_SUFFIXES = {".pyc", ".so", ".c", ".pyd"}


def package_zip(directory: str | Path | None = None) -> Path:
    """Write `exactly.zip` (the package's Python files) into `directory` (if None, a new
    temporary directory, removed when this process exits: Spark serves the file from it while
    the job runs); its path."""
    root = Path(exactly.__file__).resolve().parent
    if directory is None:
        directory = tempfile.mkdtemp(prefix="exactly-ship-")
        atexit.register(shutil.rmtree, directory, True)
    target = Path(directory) / "exactly.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(root.rglob("*")):
            if (path.is_file() and path.suffix not in _SKIPPED_SUFFIXES
                    and "__pycache__" not in path.parts):
                archive.write(path, Path("exactly") / path.relative_to(root))
    return target


def ship(spark: Any) -> Path:
    """Add this `exactly` package to the job run by `spark` (classic or Spark Connect), so that
    executors without it installed can run the `exactly` data source; the zip's path."""
    path = package_zip()
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        spark.addArtifacts(str(path), pyfile=True)
    else:
        spark.sparkContext.addPyFile(str(path))
        _copy_for_streaming_sources(path)
    return path


def _copy_for_streaming_sources(path: Path) -> None:
    """Put a copy of `path` where Spark's driver-side runner of Python streaming sources looks.

    That runner (PythonStreamingSourceRunner, Spark 4.x) runs PYSPARK_PYTHON on the driver, the
    executors' Python, with the job's Python files taken from `<SparkFiles root>/streaming_job`
    (a job artifact id it hard-codes), not from the root where addPyFile puts them: without
    this copy, a readStream of format("exactly") fails with `No module named 'exactly'` when
    PYSPARK_PYTHON lacks the package.
    """
    from pyspark import SparkFiles

    directory = Path(SparkFiles.getRootDirectory()) / "streaming_job"
    directory.mkdir(exist_ok=True)
    shutil.copy2(path, directory / path.name)
