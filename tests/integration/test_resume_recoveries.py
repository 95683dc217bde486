"""Every recovery a start-up refusal names works, on real Kafka and real Spark (issue 23).

Before: ``--resume-from-ledger`` after a ledger restored from an older copy exited 1 with every table stopped
("holds file number 9, but the ledger's next number is 7"); after an inflated batch count it exited 2 with circular
advice ("restore the matching Spark checkpoint"); with a garbled ``spark/offsets/N`` it failed before moving
anything aside. Narrowing ``source.topics`` ended in "Kafka data lost" after a Java stack. Now each refusal is one
``error:`` line that names ``--resume-from-ledger``, and that run ends in an exact mirror.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from connector.readback.replay import replay_landing_zone
from connector.readback.validate import validate_landing_zone
from connector.storage import LocalStorage
from tests.integration.test_stream_kafka import assert_mirror_equals, connector_args, file_digests, prepare
from tests.support.kafka import produce, run_connector
from tests.support.model import replayed_rows

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

RESUME = "run --resume-from-ledger"


def assert_refused_naming_resume(result: subprocess.CompletedProcess[str], *expected: str) -> str:
    """Exit 2, one ``error:`` line that names the resume, before Spark started, and no data-loss wording."""
    assert result.returncode == 2, result.stderr[-4000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr[-4000:]
    for text in (*expected, RESUME):
        assert text in errors[0], errors[0]
    assert "data lost" not in result.stderr
    assert "Traceback" not in result.stderr and "at org.apache" not in result.stderr
    return errors[0]


def resumed(args: list[str]) -> None:
    result = run_connector(*args, "--resume-from-ledger")
    assert result.returncode == 0, result.stderr[-4000:]
    assert "table stopped" not in result.stderr, result.stderr[-4000:]


def test_resume_from_ledger_recovers_an_older_ledger_an_inflated_count_and_a_garbled_offsets_log(
    kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    prefix = "resumecases"
    workload = prepare(make_topic, kafka_bootstrap, prefix, 1200)
    # One batch a run (connector_args' 1,500 records a trigger): each refusal compares the ledger with what the landing
    # zone and Spark's checkpoint hold, whatever the batches; more of them only cost ~2 s each.
    args = connector_args(kafka_bootstrap, prefix, tmp_path)
    checkpoint = tmp_path / "cp"
    state_file = checkpoint / "ledger" / "state.json"
    landing = LocalStorage(str(tmp_path / "lz"))
    first = run_connector(*args)
    assert first.returncode == 0, first.stderr[-4000:]
    older_ledger = tmp_path / "ledger-older"
    shutil.copytree(checkpoint / "ledger", older_ledger)
    produce(kafka_bootstrap, workload.records(900))
    second = run_connector(*args)
    assert second.returncode == 0, second.stderr[-4000:]

    # 1. The ledger restored from an older copy: the landing zone holds numbers it does not know.
    shutil.rmtree(checkpoint / "ledger")
    shutil.copytree(older_ledger, checkpoint / "ledger")
    produce(kafka_bootstrap, workload.records(300))
    published = file_digests(landing)
    assert_refused_naming_resume(run_connector(*args), "the ledger was restored from an older copy")
    assert file_digests(landing) == published
    resumed(args)
    assert_mirror_equals(landing, workload)
    final = file_digests(landing)
    assert {k: final[k] for k in published} == published  # nothing published was rewritten

    # 2. The ledger's batch count inflated.
    produce(kafka_bootstrap, workload.records(300))
    state = orjson.loads(state_file.read_bytes())
    last = state["last_committed_batch"]
    state_file.write_bytes(orjson.dumps({**state, "last_committed_batch": last + 50}))
    assert_refused_naming_resume(run_connector(*args), f"last published batch is {last + 50}")
    resumed(args)
    assert_mirror_equals(landing, workload)

    # 3. Spark's offsets log of the last batch garbled.
    produce(kafka_bootstrap, workload.records(300))
    last = orjson.loads(state_file.read_bytes())["last_committed_batch"]
    (checkpoint / "spark" / "offsets" / str(last)).write_bytes(b"\x00\x01 not an offsets log")
    assert_refused_naming_resume(run_connector(*args), "is not one Spark wrote")
    resumed(args)
    assert_mirror_equals(landing, workload)

    # Each recovery left a checkpoint a plain run goes on with.
    produce(kafka_bootstrap, workload.records(200))
    again = run_connector(*args)
    assert again.returncode == 0, again.stderr[-4000:]
    assert_mirror_equals(landing, workload)


def test_narrowing_the_topics_is_refused_before_spark_and_applied_by_the_resume(
    kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    prefix = "narrowing"
    workload = prepare(make_topic, kafka_bootstrap, prefix, 600)
    args = connector_args(kafka_bootstrap, prefix, tmp_path)
    landing = LocalStorage(str(tmp_path / "lz"))
    first = run_connector(*args)
    assert first.returncode == 0, first.stderr[-4000:]
    assert_mirror_equals(landing, workload)
    orders_before = file_digests(landing, "sales.schema")
    produce(kafka_bootstrap, workload.records(600))

    narrowed = list(args)
    narrowed[narrowed.index("--topics") + 1] = rf"{prefix}\.public\.customers"
    spark_before = sorted(str(p) for p in (tmp_path / "cp" / "spark").rglob("*"))
    message = assert_refused_naming_resume(
        run_connector(*narrowed), "was narrowed", f"{prefix}.sales.orders", f"{prefix}.sales.orders[2]"
    )
    assert "nothing is lost" in message
    assert sorted(str(p) for p in (tmp_path / "cp" / "spark").rglob("*")) == spark_before

    resumed(narrowed)
    assert [str(p) for p in validate_landing_zone(landing)] == []
    replayed = replayed_rows(replay_landing_zone(landing))
    assert replayed["public.customers"] == workload.expected()["public.customers"]  # exact, with the new changes
    assert file_digests(landing, "sales.schema") == orders_before  # the dropped table keeps what it had
    produce(kafka_bootstrap, workload.records(200))
    again = run_connector(*narrowed)
    assert again.returncode == 0, again.stderr[-4000:]
    assert replayed_rows(replay_landing_zone(landing))["public.customers"] == workload.expected()["public.customers"]
