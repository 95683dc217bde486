"""A landing zone belongs to one Debezium source, on real Kafka and real Spark (issue 23).

Before: a second Debezium source (its own checkpoint) run into the same landing zone exited 0 and wrote its
``public.customers`` into the first one's ``public.schema/customers``; one ``--topics`` over two prefixes merged
both databases into one set of folders. Now each is refused before Spark starts, with one ``error:`` line naming
both prefixes (or both topics) and the recovery, and nothing changes.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from connector.publish.source_identity import SOURCE_FILE
from connector.storage import LocalStorage
from tests.integration.test_checkpoint_consistency import tree_digests
from tests.integration.test_stream_kafka import assert_mirror_equals, connector_args, prepare
from tests.support.kafka import run_connector

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def assert_source_refused(result: subprocess.CompletedProcess[str], *expected: str) -> str:
    """Exit 2, one ``error:`` line with the recovery, before Spark started."""
    assert result.returncode == 2, result.stderr[-4000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr[-4000:]
    for text in (*expected, "its own landing zone (--landing-zone)"):
        assert text in errors[0], errors[0]
    assert "Traceback" not in result.stderr
    assert "SparkContext" not in result.stderr and "at org.apache" not in result.stderr
    return errors[0]


def with_topics(args: list[str], pattern: str, checkpoint: Path | None = None) -> list[str]:
    out = list(args)
    out[out.index("--topics") + 1] = pattern
    if checkpoint is not None:
        out[out.index("--checkpoint") + 1] = str(checkpoint)
    return out


def test_a_second_source_or_a_pattern_over_two_sources_is_refused_before_spark(
    kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    first, second = "srcida", "srcidb"  # two Debezium connectors, same schema and table names
    workload = prepare(make_topic, kafka_bootstrap, first, 400)
    second_workload = prepare(make_topic, kafka_bootstrap, second, 400)
    args = connector_args(kafka_bootstrap, first, tmp_path)
    landing = LocalStorage(str(tmp_path / "lz"))
    ran = run_connector(*args)
    assert ran.returncode == 0, ran.stderr[-4000:]
    assert orjson.loads((tmp_path / "lz" / SOURCE_FILE).read_bytes())["topicPrefix"] == first
    state = orjson.loads((tmp_path / "cp" / "ledger" / "state.json").read_bytes())
    assert orjson.loads(state["source_identity"])["topicPrefix"] == first
    before = tree_digests(tmp_path)  # the first source's landing zone, checkpoint and config

    # 1. The second source, one after the other, its own checkpoint, the same landing zone.
    message = assert_source_refused(
        run_connector(*with_topics(args, rf"(__debezium-heartbeat\.)?{second}(\..*)?", tmp_path / "cp-b")),
        f"topic prefix '{first}'",
        f"topic prefix '{second}'",
    )
    assert str(tmp_path / "lz") in message
    # 2. One pattern over both prefixes: two topics for one table folder, named.
    assert_source_refused(
        run_connector(*with_topics(args, rf"(__debezium-heartbeat\.)?({first}|{second})(\..*)?", tmp_path / "cp-c")),
        f"{first}.public.customers and {second}.public.customers",
        "public.schema/customers",
    )
    # 3. One pattern over both prefixes, no common table: still two sources in one landing zone.
    assert_source_refused(
        run_connector(*with_topics(args, rf"({first}\.public\.customers|{second}\.sales\.orders)", tmp_path / "cp-d")),
        "2 Debezium sources",
        f"'{first}'",
        f"'{second}'",
    )
    # 4. The same, on the first source's own checkpoint.
    assert_source_refused(
        run_connector(*with_topics(args, rf"(__debezium-heartbeat\.)?({first}|{second})(\..*)?")),
        f"{first}.public.customers and {second}.public.customers",
    )
    for other in ("cp-b", "cp-c", "cp-d"):
        assert not (tmp_path / other / "ledger").exists()
    assert {k: v for k, v in tree_digests(tmp_path).items() if not k.startswith("cp-")} == before
    assert_mirror_equals(landing, workload)

    # The recovery: the second source gets its own landing zone and checkpoint, and both mirrors are exact.
    (tmp_path / "b").mkdir()
    second_run = run_connector(*connector_args(kafka_bootstrap, second, tmp_path / "b"))
    assert second_run.returncode == 0, second_run.stderr[-4000:]
    assert orjson.loads((tmp_path / "b" / "lz" / SOURCE_FILE).read_bytes())["topicPrefix"] == second
    assert_mirror_equals(LocalStorage(str(tmp_path / "b" / "lz")), second_workload)
    assert_mirror_equals(landing, workload)
