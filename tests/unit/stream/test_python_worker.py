"""The once-per-worker measures of ``connector.stream.python_worker``, each in a fresh interpreter.

They change the import system and the garbage collector of the process they run in, so every test runs them in
a subprocess of its own, as a Spark Python worker would, and never in pytest's process.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    """A zip with two modules, as Spark's pyspark.zip is a zip of packages."""
    path = tmp_path / "lib.zip"
    with zipfile.ZipFile(path, "w") as zipped:
        zipped.writestr("zipped_pkg/__init__.py", "")
        zipped.writestr("zipped_pkg/first.py", "VALUE = 1\n")
        zipped.writestr("zipped_pkg/second.py", "VALUE = 2\n")
    return path


def run_python(code: str, archive: Path) -> str:
    """Run ``code`` in a fresh interpreter with ``archive`` first on its path; its standard output."""
    script = f"import sys\nsys.path.insert(0, {str(archive)!r})\n" + textwrap.dedent(code)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


# Counts the archive reads zipimport makes (its module-level reader, which every zipimporter calls).
COUNT_READS = """
import zipimport
reads = []
_read = zipimport._read_directory
def counting(path):
    reads.append(path)
    return _read(path)
zipimport._read_directory = counting
"""


def test_invalidate_caches_reads_a_zip_again_without_the_measure(archive: Path) -> None:
    """The cost the measure removes: every ``importlib.invalidate_caches()`` reads each archive on the path again."""
    out = run_python(
        COUNT_READS
        + """
import importlib
import zipped_pkg.first
before = len(reads)
for _ in range(3):
    importlib.invalidate_caches()
print(len(reads) - before)
""",
        archive,
    )
    # One importer for the archive, one for its package folder: both read the archive on every call.
    assert int(out) >= 3


def test_archive_importers_read_nothing_on_invalidate_and_still_import(archive: Path) -> None:
    out = run_python(
        COUNT_READS
        + """
import importlib
import zipped_pkg.first
from connector.stream.python_worker import ArchiveImporter, keep_archive_directories
keep_archive_directories()
zipped = [f for p, f in sys.path_importer_cache.items() if p.startswith(sys.path[0])]
print(all(type(f) is ArchiveImporter for f in zipped), len(zipped) >= 2)
before = len(reads)
for _ in range(3):
    importlib.invalidate_caches()
print(len(reads) - before)
import zipped_pkg.second  # imported after: through the replaced importers
print(zipped_pkg.second.VALUE)
""",
        archive,
    )
    assert out.split() == ["True", "True", "0", "2"]


def test_importers_made_after_the_measure_are_archive_importers(archive: Path) -> None:
    out = run_python(
        """
from connector.stream.python_worker import ArchiveImporter, keep_archive_directories
keep_archive_directories()
import zipped_pkg.first  # the archive's importers are made only now, by the path hook
zipped = [f for p, f in sys.path_importer_cache.items() if p.startswith(sys.path[0])]
print(len(zipped) >= 2, all(type(f) is ArchiveImporter for f in zipped), zipped_pkg.first.VALUE)
""",
        archive,
    )
    assert out.split() == ["True", "True", "1"]


def test_prepare_worker_freezes_what_is_alive_once_and_later_garbage_is_still_collected(archive: Path) -> None:
    out = run_python(
        """
import gc
from connector.stream.python_worker import prepare_worker
prepare_worker()
frozen = gc.get_freeze_count()
prepare_worker()
print(frozen > 1000, gc.get_freeze_count() == frozen)

class Node:
    pass
a, b = Node(), Node()
a.other, b.other = b, a  # a cycle made after the freeze: the collector still frees it
del a, b
print(gc.collect() >= 2)
""",
        archive,
    )
    assert out.split() == ["True", "True", "True"]
