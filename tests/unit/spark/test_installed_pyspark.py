"""Which of Spark's bundled zips a Python worker drops from its path (``connector.spark.installed_pyspark``)."""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

import pytest

from connector.spark.installed_pyspark import (
    bundled_zips,
    prefer_installed_pyspark,
    remove_bundled_zips,
    without_bundled_zips,
)


def _installed_pyspark(site: Path) -> Path:
    """A site folder holding a pyspark package with Spark's two zips in it, as pip installs pyspark."""
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    for name in ("pyspark.zip", f"py4j-{metadata.version('py4j')}-src.zip", "py4j-0.10.9.1-src.zip"):
        (lib / name).write_bytes(b"")
    return lib


def test_the_zips_of_the_installed_pyspark_are_dropped_and_everything_else_kept(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    lib = _installed_pyspark(site)
    own_py4j = str(lib / f"py4j-{metadata.version('py4j')}-src.zip")
    other_py4j = str(lib / "py4j-0.10.9.1-src.zip")  # not the installed py4j's version: only the zip has it
    path = [str(lib / "pyspark.zip"), own_py4j, other_py4j, "", str(tmp_path / "app.zip"), str(site)]

    assert without_bundled_zips(path) == [other_py4j, "", str(tmp_path / "app.zip"), str(site)]


def test_a_spark_home_of_its_own_keeps_its_zips(tmp_path: Path) -> None:
    # A cluster's SPARK_HOME: its pyspark folder is not a package on the path, so its zips are the only copy.
    lib = _installed_pyspark(tmp_path / "opt" / "spark-home")
    path = [str(lib / "pyspark.zip"), str(lib / f"py4j-{metadata.version('py4j')}-src.zip"), str(tmp_path / "site")]
    assert without_bundled_zips(path) == path


def test_the_dropped_zips_leave_the_importer_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site-packages"
    zip_path = str(_installed_pyspark(site) / "pyspark.zip")
    monkeypatch.setattr(sys, "path", [zip_path, str(site)])
    monkeypatch.setattr(sys, "path_importer_cache", {zip_path: None, str(site): None})

    prefer_installed_pyspark()

    assert sys.path == [str(site)]
    assert list(sys.path_importer_cache) == [str(site)]


def test_the_install_step_removes_only_the_zips_the_installed_packages_duplicate(tmp_path: Path) -> None:
    # ``python -m connector.spark.installed_pyspark`` after pip: the planning processes Spark starts under its own
    # daemon then import the compiled package (the zips' path entries no longer exist).
    site = tmp_path / "site-packages"
    lib = _installed_pyspark(site)
    duplicated = [lib / "pyspark.zip", lib / f"py4j-{metadata.version('py4j')}-src.zip"]
    assert bundled_zips(site / "pyspark") == sorted(duplicated)
    assert bundled_zips(tmp_path / "opt" / "spark-home" / "pyspark") == []  # no such package: nothing


def test_this_environment_s_pyspark_has_no_bundled_zips_left() -> None:
    # deploy/local/setup-tests.sh runs the install step; without it every run's planning processes compile pyspark.
    import pyspark  # noqa: PLC0415 - only this test needs the real package

    assert bundled_zips(Path(pyspark.__file__).parent) == [], "run: bash deploy/local/setup-tests.sh"
    assert remove_bundled_zips() == []
