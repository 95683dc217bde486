"""A deleted, older or inflated checkpoint part on real Kafka and real Spark: refused, never silent loss.

Spark's checkpoint (``<checkpoint>/spark``) and the ledger (``<checkpoint>/ledger``) are separate folders.
Before the consistency check, deleting the Spark folder (or restoring an older copy of it, or a ledger
whose ``last_committed_batch`` is ahead) made Spark reuse batch ids the ledger called published: the new
batches were logged ``already_committed: true, records: 0``, Spark committed their offsets and the run
exited 0 with rows missing from the mirror. Now each case exits 2 with one ``error:`` line before Spark
starts, touching nothing, and restoring the matching Spark checkpoint (the recovery the message names)
ends in an exact mirror.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from connector.storage import LocalStorage
from tests.integration.test_stream_kafka import assert_mirror_equals, connector_args, file_digests, prepare
from tests.support.kafka import produce, run_connector

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def assert_refused(result: subprocess.CompletedProcess[str], *expected: str) -> str:
    """Exit 2, one ``error:`` line saying what disagrees and how to recover, before the JVM started."""
    assert result.returncode == 2, result.stderr[-4000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr[-4000:]
    for text in (*expected, "restore the Spark checkpoint folder that belongs with this ledger", "emptied landing"):
        assert text in errors[0], errors[0]
    assert "Traceback" not in result.stderr
    assert "SparkContext" not in result.stderr  # refused before Spark ran a batch (or even started)
    return errors[0]


def test_deleted_older_or_inflated_checkpoint_is_refused_and_the_matching_one_gives_an_exact_mirror(
    kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    prefix = "ckptconsistency"
    workload = prepare(make_topic, kafka_bootstrap, prefix, 1200)
    args = connector_args(kafka_bootstrap, prefix, tmp_path)
    args[args.index("--max-offsets-per-trigger") + 1] = "500"
    checkpoint = tmp_path / "cp"
    spark = checkpoint / "spark"
    state_file = checkpoint / "ledger" / "state.json"
    landing = LocalStorage(str(tmp_path / "lz"))

    first = run_connector(*args)
    assert first.returncode == 0, first.stderr[-4000:]
    shutil.copytree(spark, tmp_path / "spark-older")
    produce(kafka_bootstrap, workload.records(600))
    second = run_connector(*args)
    assert second.returncode == 0, second.stderr[-4000:]
    shutil.copytree(spark, tmp_path / "spark-matching")
    state = orjson.loads(state_file.read_bytes())
    last = state["last_committed_batch"]
    assert last >= 3  # several batches, so the older copy is behind
    assert state["sources"][-1]["batch_id"] == last  # the ledger records what each batch read
    # Changes the mirror does not have yet: the batches a skipped batch id would lose.
    produce(kafka_bootstrap, workload.records(600))
    published = file_digests(landing)

    # 1. The Spark checkpoint deleted (say, after a corrupt offsets file).
    shutil.rmtree(spark)
    message = assert_refused(run_connector(*args), f"no offsets log for batch {last}", "[0] offsets")
    assert str(spark) in message
    assert file_digests(landing) == published
    assert not spark.exists()  # Spark never started, so it did not begin a new checkpoint

    # 2. An older copy of the Spark checkpoint restored.
    shutil.copytree(tmp_path / "spark-older", spark)
    assert_refused(run_connector(*args), f"no offsets log for batch {last}")
    assert file_digests(landing) == published

    # 3. The matching Spark checkpoint, but the ledger's batch count inflated.
    shutil.rmtree(spark)
    shutil.copytree(tmp_path / "spark-matching", spark)
    state_file.write_bytes(orjson.dumps({**state, "last_committed_batch": last + 50}))
    assert_refused(run_connector(*args), f"last published batch is {last + 50}", "no record")
    assert file_digests(landing) == published

    # The recovery the messages name: the ledger and Spark checkpoint that belong together.
    state_file.write_bytes(orjson.dumps(state))
    recovered = run_connector(*args)
    assert recovered.returncode == 0, recovered.stderr[-4000:]
    assert_mirror_equals(landing, workload)


def test_resume_from_ledger_after_a_deleted_spark_checkpoint_gives_an_exact_mirror(
    kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    """The explicit recovery: a new Spark checkpoint from the Kafka offsets the ledger's last batch ended at."""
    prefix = "ckptresume"
    workload = prepare(make_topic, kafka_bootstrap, prefix, 900)
    args = connector_args(kafka_bootstrap, prefix, tmp_path)
    args[args.index("--max-offsets-per-trigger") + 1] = "500"
    checkpoint = tmp_path / "cp"
    landing = LocalStorage(str(tmp_path / "lz"))
    first = run_connector(*args)
    assert first.returncode == 0, first.stderr[-4000:]
    # Spark's offsets log lost (say, deleted after one file was corrupt): a plain run is refused.
    shutil.rmtree(checkpoint / "spark" / "offsets")
    produce(kafka_bootstrap, workload.records(600))
    # A topic the ledger never read: Spark wants every subscribed partition named; it starts at its beginning.
    make_topic(f"{prefix}.public.late", 1)
    assert_refused(run_connector(*args), "no offsets log for batch")

    resumed = run_connector(*args, "--resume-from-ledger")
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert len(list(checkpoint.glob("spark.moved-*"))) == 1  # moved aside, never deleted
    state = orjson.loads((checkpoint / "ledger" / "state.json").read_bytes())
    assert "resume_offsets" not in state  # cleared by the first new batch
    assert_mirror_equals(landing, workload)

    # The new Spark checkpoint and the ledger now agree: a plain run starts and publishes what is new.
    produce(kafka_bootstrap, workload.records(300))
    again = run_connector(*args)
    assert again.returncode == 0, again.stderr[-4000:]
    assert_mirror_equals(landing, workload)
