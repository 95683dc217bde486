"""The Spark driver's class archive: the JVM options that map it (``connector.spark.class_archive``)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from connector.config import ConnectorSettings, SourceSettings, SparkSettings
from connector.spark.class_archive import archive_java_options, sample_run_environment
from connector.spark.source import C1_ONLY, SERIAL_GC, jvm_options


def _settings(archive: Path | None, **source: object) -> ConnectorSettings:
    kafka = SourceSettings.model_validate({"kind": "kafka", "bootstrap_servers": "b:9092", **source})
    return ConnectorSettings(source=kafka, spark=SparkSettings(class_archive=str(archive) if archive else None))


def test_an_archive_that_exists_is_mapped_quietly(tmp_path: Path) -> None:
    archive = tmp_path / "spark.jsa"
    archive.write_bytes(b"archive")
    options = archive_java_options(str(archive)).split()
    assert f"-XX:SharedArchiveFile={archive}" in options
    # The JVM would say on stdout why it ignores an archive of another Java build or class path.
    assert {"-Xlog:cds=off", "-Xlog:cds+dynamic=off"} <= set(options)


def test_no_archive_or_a_missing_one_maps_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert archive_java_options(None) == ""
    with caplog.at_level(logging.WARNING, logger="connector.spark.class_archive"):
        assert archive_java_options(str(tmp_path / "gone.jsa")) == ""
    assert "gone.jsa does not exist" in caplog.text


def test_the_driver_maps_the_archive_beside_c1_and_spark_conf_still_wins(tmp_path: Path) -> None:
    archive = tmp_path / "spark.jsa"
    archive.write_bytes(b"archive")
    mapped = archive_java_options(str(archive))
    assert jvm_options(_settings(archive)) == {
        "spark.driver.extraJavaOptions": f"{C1_ONLY} {SERIAL_GC} {mapped}",
        "spark.executor.extraJavaOptions": C1_ONLY,  # an executor's class path is not the driver's
    }
    # Spark's own Kafka source keeps C2; the archive is the driver's all the same.
    assert jvm_options(_settings(archive, reader="spark")) == {"spark.driver.extraJavaOptions": mapped}
    assert jvm_options(_settings(tmp_path / "gone.jsa", reader="spark")) == {}
    mine = _settings(archive).model_copy(
        update={"spark": SparkSettings(class_archive=str(archive), conf={"spark.driver.extraJavaOptions": "-Xss4m"})}
    )
    assert jvm_options(mine) == {"spark.executor.extraJavaOptions": C1_ONLY}


def test_the_sample_run_is_the_embedded_default_and_dumps_its_classes(tmp_path: Path) -> None:
    partial = tmp_path / "spark.jsa.partial"
    deployment = {
        "PATH": "/usr/bin",
        "CONNECTOR_SOURCE__KIND": "kafka",  # a deployment's settings: the sample run must not read its topics
        "_CONNECTOR_CONFIG_FILE": "/etc/connector/config.yaml",
        "CONNECTOR_SPARK__CLASS_ARCHIVE": "/opt/connector/spark-classes.jsa",
        "SPARK_SUBMIT_OPTS": "-XX:TieredStopAtLevel=1 -XX:SharedArchiveFile=/old.jsa -Xlog:cds=off",
    }
    env = sample_run_environment(deployment, partial)
    assert env == {
        "PATH": "/usr/bin",
        "SPARK_SUBMIT_OPTS": f"-XX:TieredStopAtLevel=1  -Xlog:cds=off -XX:ArchiveClassesAtExit={partial}",
    }
    assert sample_run_environment({}, partial) == {"SPARK_SUBMIT_OPTS": f"-XX:ArchiveClassesAtExit={partial}"}
