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

import hashlib
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from connector.kafka.spark_checkpoint import SparkCheckpoint
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
    assert state["source_batches"][-1] == last  # the ledger records what each batch read
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
    # One batch a run (connector_args' 1,500 records a trigger): the resume starts from the offsets the ledger's last
    # batch ended at, whatever the batches before it; more of them cost ~1-2 s each.
    args = connector_args(kafka_bootstrap, prefix, tmp_path)
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


# --- a checkpoint another source wrote ---------------------------------------------------------------------


def tree_digests(folder: Path) -> dict[str, str]:
    """SHA-256 of every file under ``folder`` (hidden and lock files too), by relative path."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()
    }


def assert_other_source(result: subprocess.CompletedProcess[str], *expected: str) -> str:
    """Exit 2, one ``error:`` line naming both sources and what to do, before Spark started."""
    assert result.returncode == 2, result.stderr[-4000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr[-4000:]
    for text in (*expected, "belongs to another source", "its own checkpoint folder (--checkpoint)", "emptied"):
        assert text in errors[0], errors[0]
    assert "Traceback" not in result.stderr
    assert "SparkContext" not in result.stderr and "at org.apache" not in result.stderr  # Spark never started
    return errors[0]


def test_a_file_source_checkpoint_given_to_kafka_is_refused_before_spark(
    kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    """Quick start, then "Against Kafka" with the same ./checkpoint: Spark used to fail on the file source's
    offsets (``Expected e.g. {"topicA":...}, got {"logOffset":1}``) with a Python traceback and exit 1."""
    prefix = "ckptfilesthenkafka"
    prepare(make_topic, kafka_bootstrap, prefix, 50)
    args = connector_args(kafka_bootstrap, prefix, tmp_path)
    files_run = [a for a in args if a not in {"--bootstrap-servers", kafka_bootstrap}]
    del files_run[files_run.index("--topics") : files_run.index("--topics") + 2]
    first = run_connector(*files_run)  # the embedded sample
    assert first.returncode == 0, first.stderr[-4000:]
    assert '"logOffset"' in (tmp_path / "cp" / "spark" / "offsets" / "0").read_text()
    before = tree_digests(tmp_path)

    message = assert_other_source(
        run_connector(*args), "was written by the file source", "this run reads Kafka (source.kind: kafka)"
    )
    assert str(tmp_path / "cp" / "spark") in message
    assert tree_digests(tmp_path) == before  # neither the checkpoint nor the landing zone touched


def test_a_kafka_checkpoint_of_other_topics_is_refused_and_a_pattern_change_is_not(
    kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    """The Postgres section, then the MariaDB section with the same ./cp: Spark used to print ~140 lines of
    Java stack and ``Kafka data lost (HashSet(dbserver1): ...``, advice that fits a retention loss only."""
    first_source, second_source = "ckptothera", "ckptotherb"
    prepare(make_topic, kafka_bootstrap, first_source, 300)
    second = prepare(make_topic, kafka_bootstrap, second_source, 300)
    args = connector_args(kafka_bootstrap, first_source, tmp_path)
    first = run_connector(*args)
    assert first.returncode == 0, first.stderr[-4000:]
    before = tree_digests(tmp_path)

    other = list(args)
    pattern = rf"{second_source}\..*"
    other[other.index("--topics") + 1] = pattern
    message = assert_other_source(
        run_connector(*other), f"Kafka topics __debezium-heartbeat.{first_source}, {first_source}.", repr(pattern)
    )
    assert "none of which matches source.topics" in message
    assert tree_digests(tmp_path) == before  # neither the checkpoint nor the landing zone touched

    # A pattern over both sources is refused too: one landing zone mirrors one source (issue 23); it used to
    # merge the second source's tables into the first one's folders.
    both = list(args)
    both[both.index("--topics") + 1] = rf"(__debezium-heartbeat\.)?({first_source}|{second_source})(\..*)?"
    merged = run_connector(*both)
    assert merged.returncode == 2, merged.stderr[-4000:]
    assert f"{first_source}.public.customers and {second_source}.public.customers" in merged.stderr
    assert tree_digests(tmp_path) == before

    # A pattern that still matches the checkpoint's topics, and more of the same source, is a change on purpose:
    # Spark goes on and reads the new topic too. (One that drops some of them is refused: see
    # test_resume_recoveries.py.)
    late = make_topic(f"{first_source}.public.late", 1)
    produce(kafka_bootstrap, [second.customers.raw(b'{"ts_ms":1}')._replace(topic=late, partition=0)])
    widened_args = list(args)
    widened_args[widened_args.index("--topics") + 1] = rf"(__debezium-heartbeat\.)?{first_source}(\..*)?|nothing"
    widened = run_connector(*widened_args)
    assert widened.returncode == 0, widened.stderr[-4000:]
    spark = SparkCheckpoint(tmp_path / "cp" / "spark")
    last = spark.last_committed()
    assert last is not None
    read = orjson.loads((spark.offsets(last) or ("{}",))[0])
    assert read[late] and read[f"{first_source}.sales.orders"]  # the new topic joined the checkpoint
