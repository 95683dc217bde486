"""The built wheel carries what a non-editable install (the Docker image, pip install) needs at run time."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
_NOT_SOURCE = (".git", ".venv", ".cache", ".state", "build", "dist", "*.egg-info", "__pycache__", ".*_cache")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built by ``pip wheel`` from a clean copy of the source tree."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    # A clean copy: setuptools reuses a build/ folder, which could hold files an earlier build put there.
    source = tmp_path / "src"
    shutil.copytree(REPO_ROOT, source, ignore=shutil.ignore_patterns(*_NOT_SOURCE))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(source)],
        check=True,
        capture_output=True,
    )
    (built,) = (tmp_path / "dist").glob("*.whl")
    return built


def test_wheel_install_finds_the_packaged_sample_and_config_schema(wheel: Path, tmp_path: Path) -> None:
    """The embedded-default ``run`` reads ``connector/sample/*.jsonl``; it was missing from the wheel."""
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    probe = (
        "import connector, pathlib;"
        "from connector.config import SourceSettings;"
        "from connector.spark.source import source_path;"
        "from connector.commands.check_config import SCHEMA_FILE;"
        "print(pathlib.Path(connector.__file__).parent);"
        "print(sorted(p.name for p in pathlib.Path(source_path(SourceSettings())).iterdir()));"
        "print(SCHEMA_FILE.is_file())"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        env={"PYTHONPATH": str(target)},
        cwd=tmp_path,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    assert out[0] == str(target / "connector")  # the installed copy, not the source tree
    assert out[1] == "['0001-customers.jsonl', '0002-orders.jsonl']"
    assert out[2] == "True"


def test_wheel_ships_no_benchmark_or_test_code(wheel: Path) -> None:
    """Benchmarks and their event generators live in ``benchmarks/``, run from a checkout, not installed."""
    with zipfile.ZipFile(wheel) as archive:
        top_level = {name.split("/", 1)[0] for name in archive.namelist() if ".dist-info/" not in name}
        bench_modules = [name for name in archive.namelist() if "/bench" in name]
    assert top_level == {"connector"}
    assert bench_modules == []


def test_the_quick_start_runs_from_the_installed_wheel(wheel: Path, tmp_path: Path) -> None:
    """The quick start's ``run``, ``validate`` and ``replay`` succeed with the connector installed from the wheel.

    A fresh venv gets the wheel; its dependencies (pyspark, pyarrow, …) come from the test venv's
    site-packages as a plain path entry, so that venv's editable install of the source tree is not seen.
    """
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
    )
    dependencies = next(Path(p) for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
    (site / "test-dependencies.pth").write_text(f"{dependencies}\n")
    work = tmp_path / "work"
    work.mkdir()

    def connector(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(python), "-m", "connector", *args],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=600,
            # No metrics endpoint: port 9464 may be another process's on a shared machine (a run failed on it).
            env={**os.environ, "CONNECTOR_METRICS__PORT": "0"},
        )

    where = subprocess.run(
        [str(python), "-c", "import connector; print(connector.__file__)"],
        cwd=work,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert where == str(site / "connector" / "__init__.py")  # the wheel's copy, not the source tree
    ran = connector("run", "--trigger", "available-now")
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert sorted(p.name for p in (work / "landing-zone").iterdir() if not p.name.startswith("_")), ran.stderr
    validated = connector("validate", "landing-zone")
    assert validated.returncode == 0, validated.stdout + validated.stderr
    replayed = connector("replay", "landing-zone", "--output", "mirror", "--show", "5")
    assert replayed.returncode == 0, replayed.stderr[-3000:]
    assert any((work / "mirror").rglob("*.parquet")), replayed.stdout
