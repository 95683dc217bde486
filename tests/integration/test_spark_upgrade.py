"""The Spark upgrade (4.0.1 → 4.2) on real Kafka and real Spark: state written by 4.0.1 continues, and Spark 4.1's
stateless-streaming AQE stays off so a micro-batch is staged as before.

- ``tests/data/checkpoint_spark401`` is the checkpoint (Spark's and the ledger) and landing zone of a run on Spark
  4.0.1 (``spark_checkpoint_fixture.py`` wrote it). The same topics with the same records give its offsets their
  meaning again; more records are produced, and the installed Spark continues after the fixture's last batch:
  nothing is read twice or skipped, no published file is rewritten, and the mirror is exact.
- Spark 4.1 turned on AQE for stateless streaming queries (``spark.sql.adaptive.streaming.stateless.enabled``),
  which may re-plan a micro-batch's partitions. The job's session turns it off; every Kafka partition of a batch
  is then staged from one slice, by one task, starting inside that batch's offset range.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import orjson
import pyspark
import pytest

from connector.config import ConnectorSettings
from connector.spark.spark_session import spark_session
from connector.storage import LocalStorage
from tests.integration.spark_checkpoint_fixture import FIXTURE, OPERATIONS, PREFIX, WRITTEN_BY, fixture_args
from tests.integration.test_stream_kafka import assert_mirror_equals, connector_args, file_digests, prepare
from tests.support.kafka import REPO_ROOT, produce, run_connector

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

STATELESS_AQE = "spark.sql.adaptive.streaming.stateless.enabled"
AUDIT_DIR = REPO_ROOT / "tests" / "support" / "staging_audit"
# _staged_<batch>_<topic sha1[:12]>-<partition>-<first offset>_<chunk>_<attempt>.<ext>
STAGED = re.compile(r"_staged_(\d+)_([0-9a-f]{12})-(\d+)-(\d+)_(\d+)_([^.]+)\.")


def batch_lines(stderr: str) -> list[dict[str, object]]:
    """The service log's ``"event": "batch"`` objects, in order."""
    marker = '{"event":"batch"'
    return [orjson.loads(line[line.index(marker) :]) for line in stderr.splitlines() if marker in line]


def test_a_checkpoint_written_by_spark_401_continues_with_an_exact_mirror(
    kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    assert (FIXTURE / "cp" / "spark" / "offsets").is_dir(), f"no fixture in {FIXTURE}"
    shutil.copytree(FIXTURE / "cp", tmp_path / "cp")
    shutil.copytree(FIXTURE / "lz", tmp_path / "lz")
    landing = LocalStorage(str(tmp_path / "lz"))
    # The fixture's topics, with the records they held: the checkpoint's offsets name the same records again.
    workload = prepare(make_topic, kafka_bootstrap, PREFIX, OPERATIONS)
    assert_mirror_equals(landing, workload)  # the fixture is this workload's mirror so far
    published = file_digests(landing)
    before = orjson.loads((tmp_path / "cp" / "ledger" / "state.json").read_bytes())
    last = before["last_committed_batch"]
    spark_offsets = tmp_path / "cp" / "spark" / "offsets"
    assert sorted(int(p.name) for p in spark_offsets.iterdir() if p.name.isdigit())[-1] == last

    produced = produce(kafka_bootstrap, workload.records(OPERATIONS))
    result = run_connector(*fixture_args(kafka_bootstrap, tmp_path))
    assert result.returncode == 0, result.stderr[-4000:]

    batches = batch_lines(result.stderr)
    assert batches, result.stderr[-4000:]
    # Spark went on from the fixture's last batch: the next batch ids, exactly the records produced since.
    assert [b["batch_id"] for b in batches] == list(range(last + 1, last + 1 + len(batches)))
    assert not any(b["already_committed"] for b in batches)
    assert sum(int(str(b["records"])) for b in batches) == produced
    assert_mirror_equals(landing, workload)
    after = file_digests(landing)
    assert {path: after[path] for path in published} == published, "a file published under Spark 4.0.1 changed"
    assert len(after) > len(published)
    state = orjson.loads((tmp_path / "cp" / "ledger" / "state.json").read_bytes())
    assert state["last_committed_batch"] == batches[-1]["batch_id"]
    assert pyspark.__version__ != WRITTEN_BY, "the fixture is meant to come from an older Spark"


def test_the_job_session_keeps_stateless_streaming_aqe_off(tmp_path: Path) -> None:
    """Spark 4.1+ defaults it on; the job's session sets it off (and the setting reaches the running session)."""
    from pyspark.sql import SparkSession

    settings = ConnectorSettings.model_validate(
        {"source": {"kind": "files"}, "spark": {"master": "local[1]"}, "checkpoint": str(tmp_path / "cp")}
    )
    spark = spark_session(settings)
    try:
        assert spark.conf.get(STATELESS_AQE) == "false"
        fresh = SparkSession.builder.getOrCreate().newSession()  # Spark's own default, for contrast
        fresh.conf.unset(STATELESS_AQE)
        assert fresh.conf.get(STATELESS_AQE) == "true"
    finally:
        spark.stop()


def test_each_kafka_partition_of_a_batch_is_staged_from_one_slice_by_one_task(
    kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    prefix = "aqeslices"
    workload = prepare(make_topic, kafka_bootstrap, prefix, 1500)
    audit = tmp_path / "staged-by.tsv"
    args = connector_args(kafka_bootstrap, prefix, tmp_path)
    args[args.index("--max-offsets-per-trigger") + 1] = "600"
    config = tmp_path / "config.yaml"
    conf = {"spark.executorEnv.PYTHONPATH": str(AUDIT_DIR), "spark.executorEnv.STAGING_AUDIT_LOG": str(audit)}
    config.write_text(orjson.dumps({"mirror": {"max_rows_per_file": 400}, "spark": {"conf": conf}}).decode())
    result = run_connector(*args, env={"PYTHONPATH": str(AUDIT_DIR), "STAGING_AUDIT_LOG": str(audit)})
    assert result.returncode == 0, result.stderr[-4000:]
    assert_mirror_equals(LocalStorage(str(tmp_path / "lz")), workload)
    assert len(batch_lines(result.stderr)) >= 3

    # Each batch's offset range per partition, from Spark's offsets log: batch N ends at offsets/N.
    offsets = tmp_path / "cp" / "spark" / "offsets"
    ends = {int(p.name): orjson.loads(p.read_text().splitlines()[-1]) for p in offsets.iterdir() if p.name.isdigit()}
    topics = {hashlib.sha1(t.encode(), usedforsecurity=False).hexdigest()[:12]: t for t in ends[max(ends)]}
    slices: dict[tuple[int, str, int], set[int]] = defaultdict(set)
    writers: dict[tuple[int, str, int, int], set[tuple[str, str]]] = defaultdict(set)
    for line in audit.read_text().splitlines():
        pid, _, path = line.split("\t")
        match = STAGED.search(Path(path).name)
        assert match, path
        batch, digest, partition, first, _chunk, attempt = match.groups()
        key = (int(batch), topics[digest], int(partition))
        slices[key].add(int(first))
        writers[(*key, int(first))].add((pid, attempt))
    assert slices, "nothing staged by the Python workers"
    for (batch, topic, partition), firsts in slices.items():
        assert len(firsts) == 1, f"batch {batch} {topic}[{partition}] staged from several slices: {sorted(firsts)}"
        start = ends.get(batch - 1, {}).get(topic, {}).get(str(partition), 0)
        end = ends[batch][topic][str(partition)]
        assert start <= min(firsts) < end, (batch, topic, partition, firsts, start, end)
    for key, staged_by in writers.items():
        assert len(staged_by) == 1, f"{key} staged by several tasks: {staged_by}"
