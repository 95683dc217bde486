"""The lock files: exact, hashed, within pyproject.toml's ranges, and the set the image, CI and the quick start install.

``requirements/lock.sh`` writes them (README, "Dependencies and the lock file"); these checks catch a lock that
fell behind ``pyproject.toml`` or the Spark Kafka pom, or an installer that stopped reading it.
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.deploy.tooling import REPO

LOCKS = REPO / "requirements"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\]+)")


def locked(name: str) -> dict[str, str]:
    """Package → version of one lock file; every pin carries at least one sha256."""
    text = (LOCKS / name).read_text()
    pins: dict[str, str] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        match = PIN.match(block)
        if match:
            assert "--hash=sha256:" in block, f"{name}: {match[1]} has no hash"
            pins[canonicalize_name(match[1])] = match[2]
    assert pins, name
    return pins


def spark_version() -> str:
    pom = (REPO / "deploy" / "local" / "maven" / "spark-kafka" / "pom.xml").read_text()
    match = re.search(r"<spark\.version>([^<]+)</spark\.version>", pom)
    assert match
    return match[1]


def project() -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return project


def test_the_image_set_is_the_test_set_s_versions() -> None:
    runtime, test = locked("runtime.txt"), locked("test.txt")
    assert {name: test.get(name) for name in runtime} == runtime


def test_pyspark_is_the_spark_of_the_kafka_jars() -> None:
    spark = spark_version()
    assert locked("runtime.txt")["pyspark"] == spark
    assert locked("test.txt")["pyspark"] == spark
    assert f"pyspark=={spark}" in (LOCKS / "spark.txt").read_text()


@pytest.mark.parametrize(("lock", "groups"), [("runtime.txt", ()), ("test.txt", ("verify", "test"))])
def test_every_declared_requirement_is_locked_within_its_range(lock: str, groups: tuple[str, ...]) -> None:
    meta = project()
    declared = [Requirement(r) for r in meta["dependencies"]]
    for group in groups:
        declared += [Requirement(r) for r in meta["optional-dependencies"][group]]
    pins = locked(lock)
    for requirement in declared:
        name = canonicalize_name(requirement.name)
        if name == canonicalize_name(str(meta["name"])):
            continue  # the test extra names the verify extra through the project itself
        assert name in pins, f"{lock}: {requirement} is not locked"
        assert requirement.specifier.contains(pins[name], prereleases=True), f"{lock}: {name}=={pins[name]}"


def test_pyspark_s_range_is_the_one_minor_of_the_jars() -> None:
    (pyspark,) = [Requirement(r) for r in project()["dependencies"] if r.startswith("pyspark")]
    major, minor, _ = spark_version().split(".")
    assert pyspark.specifier.contains(spark_version())
    assert not pyspark.specifier.contains(f"{major}.{int(minor) + 1}.0")
    assert not pyspark.specifier.contains(f"{major}.{int(minor) - 1}.0")


def test_installers_read_the_lock() -> None:
    dockerfile = (REPO / "deploy" / "Dockerfile").read_text()
    assert "pip install --require-hashes --no-deps -r requirements/runtime.txt" in dockerfile
    assert "pip install --no-deps ." in dockerfile
    setup = (REPO / "deploy" / "local" / "setup-tests.sh").read_text()
    assert "pip install -q --require-hashes -r requirements/test.txt" in setup
    assert "pip install -q --no-deps -e ." in setup
    quick_start = (REPO / "README.md").read_text().split("## Quick start", 1)[1].split("```sh", 1)[1].split("```")[0]
    assert "--require-hashes -r requirements/test.txt" in quick_start and "--no-deps -e ." in quick_start
