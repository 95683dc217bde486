"""Spark's Python workers import pyspark and py4j from the installed packages, not from the zips Spark bundles.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` and ``py4j-<version>-src.zip`` first on every worker's
``PYTHONPATH``. With pyspark installed by pip, ``SPARK_HOME`` is that package's own folder, so the zips hold the
same code as the installed package; but a zip holds no compiled bytecode and ``zipimport`` cannot write any: the
worker daemon compiled pyspark's modules from source on every run (0.6 CPU-s of a query's first batch,
``bench stream``), and each task's ``importlib.invalidate_caches`` (pyspark's worker calls it) read the zips'
directories again. A zip is dropped from the path only when it lies inside the pyspark package the interpreter
has installed (and, for py4j, names the installed py4j's version): with a ``SPARK_HOME`` of its own, a cluster's
workers keep its zips.

Spark also starts Python processes the connector's daemon does not run: each planning step of a Python data source
(the connector's Kafka source) runs under ``pyspark.daemon`` or as a worker of its own, one after another before the
first batch, and each compiled pyspark from the zip again (3.9 CPU-s of every ``run``'s start, 2.7 of them the
zips', and 1.1 s of its first batch). No setting of Spark reaches them, so the image and the test setup remove the
two zips from the installed package once it is installed: ``python -m connector.spark.installed_pyspark``
(``remove_bundled_zips``). A path entry that does not exist costs Python nothing; an install without that step is
only slower.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from importlib import metadata, util
from pathlib import Path

_PY4J_ZIP = re.compile(r"py4j-(?P<version>[0-9][0-9A-Za-z.]*)-src\.zip")


def without_bundled_zips(path: Sequence[str]) -> list[str]:
    """``path`` without pyspark's and py4j's zips that duplicate the installed packages (module docstring)."""
    folders = {os.path.realpath(entry or os.curdir) for entry in path if not entry.endswith(".zip")}
    return [entry for entry in path if not _duplicates_installed(entry, folders)]


def prefer_installed_pyspark() -> None:
    """Apply ``without_bundled_zips`` to this interpreter's path, before anything imports pyspark or py4j.

    The zips' importers are dropped from ``sys.path_importer_cache`` too: ``importlib.invalidate_caches`` would
    otherwise still re-read their directories.
    """
    kept = without_bundled_zips(sys.path)
    for entry in set(sys.path) - set(kept):
        sys.path_importer_cache.pop(entry, None)
    sys.path[:] = kept


def _duplicates_installed(entry: str, folders: set[str]) -> bool:
    zip_path = Path(entry)
    lib = zip_path.parent
    if lib.name != "lib" or lib.parent.name != "python" or lib.parent.parent.name != "pyspark":
        return False
    package = lib.parent.parent
    # The zip lies in an installed pyspark package: one on the path (its parent folder), importable without the zip.
    if not (package / "__init__.py").is_file() or os.path.realpath(package.parent) not in folders:
        return False
    if zip_path.name == "pyspark.zip":
        return True
    bundled = _PY4J_ZIP.fullmatch(zip_path.name)
    if bundled is None:
        return False
    try:
        return metadata.version("py4j") == bundled.group("version")
    except metadata.PackageNotFoundError:
        return False


def bundled_zips(package: Path) -> list[Path]:
    """The zips in the installed pyspark ``package`` that duplicate the installed packages (module docstring)."""
    lib = package / "python" / "lib"
    folders = {os.path.realpath(package.parent)}
    return sorted(zip_path for zip_path in lib.glob("*.zip") if _duplicates_installed(str(zip_path), folders))


def remove_bundled_zips() -> list[Path]:
    """Remove ``bundled_zips`` of the pyspark this interpreter imports; returns what was removed."""
    spec = util.find_spec("pyspark")  # found, not imported: nothing of pyspark need be loaded for this
    if spec is None or spec.origin is None:
        return []
    removed = bundled_zips(Path(spec.origin).parent)
    for zip_path in removed:
        zip_path.unlink()
    return removed


if __name__ == "__main__":
    for gone in remove_bundled_zips():
        print(f"removed {gone}: the installed pyspark and py4j hold the same code, compiled")
