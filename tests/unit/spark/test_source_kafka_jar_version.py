"""Spark's Kafka connector jars must be the installed Spark's release line: a mismatch stops the start-up."""

from __future__ import annotations

from pathlib import Path

import pyspark
import pytest

from connector.errors import ConfigError
from connector.spark.source import check_kafka_jar_version, kafka_jars

POM = Path(__file__).resolve().parents[3] / "deploy" / "local" / "maven" / "spark-kafka" / "pom.xml"


def _jars(spark: str) -> list[str]:
    return [
        "/jars/commons-pool2-2.13.1.jar",
        "/jars/kafka-clients-3.9.2.jar",
        f"/jars/spark-sql-kafka-0-10_2.13-{spark}.jar",
        f"/jars/spark-token-provider-kafka-0-10_2.13-{spark}.jar",
    ]


def test_the_same_minor_is_accepted_patch_levels_may_differ() -> None:
    check_kafka_jar_version(_jars("4.2.0"), "4.2.0")
    check_kafka_jar_version(_jars("4.2.0"), "4.2.1")


def test_another_minor_names_both_versions() -> None:
    with pytest.raises(ConfigError) as error:
        check_kafka_jar_version(_jars("4.0.1"), "4.2.0")
    message = str(error.value)
    assert "for Spark 4.0.1 but pyspark 4.2.0 is installed" in message
    assert "fetch-jars.sh spark-kafka" in message


def test_a_folder_without_the_kafka_source_jar_is_refused() -> None:
    with pytest.raises(ConfigError, match="no spark-sql-kafka-0-10 jar"):
        check_kafka_jar_version(_jars("4.2.0")[:2], "4.2.0")


def test_kafka_jars_checks_the_configured_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for jar in _jars("3.5.1"):
        (tmp_path / Path(jar).name).write_bytes(b"")
    monkeypatch.setenv("CONNECTOR_SPARK_JARS_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match=f"for Spark 3.5.1 but pyspark {pyspark.__version__} is"):
        kafka_jars()


def test_the_pom_fetches_the_installed_spark() -> None:
    """The lock pins pyspark to the pom's spark.version (requirements/lock.sh): the two move together."""
    assert f"<spark.version>{pyspark.__version__}</spark.version>" in POM.read_text()
