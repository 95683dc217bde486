"""The ledger against Spark's checkpoint and the landing zone: a disagreement is refused, never guessed.

Before: a batch id at or below ``last_committed_batch`` counted as published whatever Spark read for it
(a deleted or older Spark checkpoint, or an inflated ledger, silently lost those records); a ledger
``next_number`` past the landing zone's files left a gap only ``validate`` noticed; a garbled plan file
raised a raw JSON error; ``convert --checkpoint`` with a vanished ``state.json`` republished everything.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from connector.commands.cli import main
from connector.config import SourceSettings
from connector.errors import ConfigError, LandingZoneCorrupt
from connector.healing.resume import resume_from_ledger
from connector.kafka.spark_checkpoint import SparkCheckpoint
from connector.kcat import kcat_line
from connector.publish.batch_plan import BatchInput
from connector.publish.ledger import BatchLedger
from connector.publish.ledger_format import state_from_json, state_to_json
from connector.publish.ledger_state import SOURCE_HISTORY, BatchSource, LedgerState, TableState
from connector.publish.source_offsets import RECOVERY, check_batch, check_start, describe
from connector.storage.local import LocalStorage
from tests.support.landing import Landing
from tests.unit.test_sink import CUSTOMERS, Zone, customers, row

SPARK = "/cp/spark"
TOPIC = "dbserver1.public.customers"


def kafka(**ends: int) -> tuple[str, ...]:
    """Spark's Kafka offsets line: end offset per partition of one topic."""
    return (orjson.dumps({TOPIC: {p.lstrip("p"): o for p, o in ends.items()}}).decode(),)


@pytest.fixture
def zone(make_landing: Callable[[], Landing], tmp_path: Path) -> Zone:
    """An empty landing zone on the test's backend (a local folder, OneLake on the DFS test double)."""
    return Zone(make_landing(), tmp_path / "checkpoint")


def ledger(last: int, *sources: BatchSource) -> LedgerState:
    return LedgerState(last_committed_batch=last, sources=sources)


# -- what a batch id may count as ------------------------------------------------------------------------


def test_a_new_batch_is_not_published_and_a_replay_with_the_same_offsets_is() -> None:
    state = ledger(4, BatchSource(3, kafka(p0=10)), BatchSource(4, kafka(p0=20)))
    assert check_batch(state, 5, kafka(p0=30), SPARK) is False
    # Spark re-runs its last batch after a crash between our commit and its own; same offsets, any spelling.
    assert check_batch(state, 4, (f'{{ "{TOPIC}" : {{"0":20}} }}',), SPARK) is True


def test_a_published_batch_id_with_other_offsets_is_refused_naming_both_sides() -> None:
    state = ledger(4, BatchSource(3, kafka(p0=10, p1=7)), BatchSource(4, kafka(p0=20, p1=9)))
    with pytest.raises(LandingZoneCorrupt) as caught:
        check_batch(state, 4, kafka(p0=12, p1=7), SPARK)
    message = str(caught.value)
    assert f"ledger says batch 4 published {TOPIC}[0] offsets 10..20, {TOPIC}[1] offsets 7..9" in message
    assert f"Spark's checkpoint {SPARK} says {TOPIC}[0] offsets 10..12" in message
    assert RECOVERY in message


def test_an_unknown_batch_id_at_or_below_the_ledgers_is_never_treated_as_published() -> None:
    # An inflated last_committed_batch: Spark's batch 7 is new, the ledger never published it.
    state = ledger(50, BatchSource(6, kafka(p0=10)))
    with pytest.raises(LandingZoneCorrupt, match="has no record of what batch 7 published"):
        check_batch(state, 7, kafka(p0=20), SPARK)


def test_spark_ahead_of_the_ledger_or_without_an_offsets_log_is_refused() -> None:
    state = ledger(4, BatchSource(4, kafka(p0=20)))
    with pytest.raises(LandingZoneCorrupt, match=r"committed batches 5..6 that were never published"):
        check_batch(state, 7, kafka(p0=40), SPARK)
    with pytest.raises(LandingZoneCorrupt, match="has no offsets log for batch 5"):
        check_batch(state, 5, None, SPARK)


def test_a_ledger_from_before_offsets_were_recorded_accepts_only_its_last_batch_again() -> None:
    legacy = ledger(4)
    assert check_batch(legacy, 4, kafka(p0=20), SPARK) is True
    with pytest.raises(LandingZoneCorrupt):
        check_batch(legacy, 3, kafka(p0=10), SPARK)


def test_file_source_offsets_are_kept_verbatim() -> None:
    assert describe(BatchSource(2, ('{"logOffset":2}',)), None) == 'source offsets {"logOffset":2}'
    state = ledger(2, BatchSource(2, ('{"logOffset":2}',)))
    assert check_batch(state, 2, ('{"logOffset":2}',), SPARK) is True
    with pytest.raises(LandingZoneCorrupt, match=r'published source offsets \{"logOffset":2\}'):
        check_batch(state, 2, ('{"logOffset":0}',), SPARK)


def test_history_is_bounded() -> None:
    state = LedgerState()
    for batch_id in range(SOURCE_HISTORY + 20):
        state = state.with_source(BatchSource(batch_id, kafka(p0=batch_id)))
    assert len(state.sources) == SOURCE_HISTORY
    assert state.sources[0].batch_id == 20
    assert state_from_json(orjson.loads(orjson.dumps(state_to_json(state)))) == state


# -- at start, before Spark runs a batch -----------------------------------------------------------------


def test_start_refuses_a_deleted_or_older_spark_checkpoint() -> None:
    state = ledger(4, BatchSource(3, kafka(p0=10)), BatchSource(4, kafka(p0=20)))
    with pytest.raises(LandingZoneCorrupt) as caught:
        check_start(state, None, 2, SPARK)
    message = str(caught.value)
    assert f"ledger says batch 4 published {TOPIC}[0] offsets 10..20" in message
    assert f"Spark's checkpoint {SPARK} has no offsets log for batch 4" in message
    assert RECOVERY in message


def test_start_refuses_other_offsets_an_inflated_ledger_and_a_spark_checkpoint_ahead() -> None:
    state = ledger(4, BatchSource(4, kafka(p0=20)))
    with pytest.raises(LandingZoneCorrupt, match="does not belong with this ledger"):
        check_start(state, kafka(p0=21), 4, SPARK)
    with pytest.raises(LandingZoneCorrupt, match="batches 5..6 would never be published"):
        check_start(state, kafka(p0=20), 6, SPARK)
    inflated = ledger(60, BatchSource(4, kafka(p0=20)))
    with pytest.raises(LandingZoneCorrupt, match="last published batch is 60, but it has no record"):
        check_start(inflated, kafka(p0=20), 4, SPARK)


def test_start_accepts_the_matching_checkpoint_and_a_new_ledger() -> None:
    check_start(ledger(4, BatchSource(4, kafka(p0=20))), kafka(p0=20), 3, SPARK)  # crashed before Spark's commit
    check_start(ledger(-1), None, None, SPARK)


def write_spark_log(folder: Path, batch_id: int, offsets: tuple[str, ...], *, committed: bool) -> None:
    """Files as Spark writes them (a version line, a metadata line, one offsets line per source)."""
    (folder / "offsets").mkdir(parents=True, exist_ok=True)
    (folder / "commits").mkdir(parents=True, exist_ok=True)
    meta = '{"batchWatermarkMs":0,"batchTimestampMs":1700000000000,"conf":{}}'
    (folder / "offsets" / str(batch_id)).write_text("\n".join(["v1", meta, *offsets]))
    (folder / "offsets" / f".{batch_id}.crc").write_bytes(b"crc")
    if committed:
        (folder / "commits" / str(batch_id)).write_text('v1\n{"nextBatchWatermarkMs":0}')
        (folder / "commits" / f".{batch_id}.crc").write_bytes(b"crc")


def test_spark_checkpoint_reader_and_start_check(tmp_path: Path) -> None:
    spark = SparkCheckpoint(tmp_path / "spark")
    assert spark.offsets(0) is None and spark.last_committed() is None
    write_spark_log(tmp_path / "spark", 0, kafka(p0=10), committed=True)
    write_spark_log(tmp_path / "spark", 1, kafka(p0=20), committed=False)
    assert spark.offsets(1) == kafka(p0=20)
    assert spark.last_committed() == 0
    spark.verify_ledger(ledger(1, BatchSource(1, kafka(p0=20))))
    with pytest.raises(LandingZoneCorrupt, match="has no offsets log for batch 2"):
        spark.verify_ledger(ledger(2, BatchSource(2, kafka(p0=30))))
    (tmp_path / "spark" / "offsets" / "1").write_text("garbage")
    with pytest.raises(LandingZoneCorrupt, match=str(tmp_path / "spark" / "offsets" / "1")):
        spark.offsets(1)


# -- which source a Spark checkpoint belongs to (before Spark starts) -------------------------------------

FILES = SourceSettings(kind="files")


def kafka_source(topics: str) -> SourceSettings:
    return SourceSettings(bootstrap_servers="127.0.0.1:9092", topics=topics)


def test_a_file_source_checkpoint_is_refused_for_kafka_and_the_other_way_round(tmp_path: Path) -> None:
    """Spark would fail on the other source's offsets (``Expected e.g. {"topicA":...}, got {"logOffset":1}``)."""
    files = SparkCheckpoint(tmp_path / "files" / "spark")
    write_spark_log(files.folder, 0, ('{"logOffset":0}',), committed=True)
    write_spark_log(files.folder, 1, ('{"logOffset":1}',), committed=True)
    files.verify_source(FILES)
    with pytest.raises(ConfigError) as caught:
        files.verify_source(kafka_source(r"dbserver1\..*"))
    message = str(caught.value)
    assert f"Spark's checkpoint {files.folder} was written by the file source" in message
    assert "this run reads Kafka (source.kind: kafka)" in message
    assert "its own checkpoint folder (--checkpoint)" in message and "emptied" in message

    topics = SparkCheckpoint(tmp_path / "kafka" / "spark")
    write_spark_log(topics.folder, 0, kafka(p0=10), committed=True)
    topics.verify_source(kafka_source(r"dbserver1\..*"))
    with pytest.raises(ConfigError, match=rf"Kafka source \(its offsets log for batch 0: topics {TOPIC}\)"):
        topics.verify_source(FILES)


def test_a_kafka_checkpoint_whose_topics_the_pattern_no_longer_matches_is_refused(tmp_path: Path) -> None:
    spark = SparkCheckpoint(tmp_path / "spark")
    write_spark_log(spark.folder, 0, kafka(p0=10), committed=True)
    both = {TOPIC: {"0": 12}, "dbserver1.public.orders": {"0": 3, "1": 4}}
    write_spark_log(spark.folder, 1, (orjson.dumps(both).decode(),), committed=False)  # the last entry counts
    with pytest.raises(ConfigError) as caught:
        spark.verify_source(kafka_source(r"mariadb1\..*"))
    message = str(caught.value)
    assert f"Kafka topics {TOPIC}, dbserver1.public.orders (its offsets log for batch 1)" in message
    assert r"none of which matches source.topics 'mariadb1\\..*'" in message
    assert "belongs to another source" in message and "its own checkpoint folder (--checkpoint)" in message
    # As Spark's subscribePattern: the whole name must match (a prefix match is no match).
    with pytest.raises(ConfigError, match="none of which matches"):
        spark.verify_source(kafka_source("dbserver1"))
    # Some topics still matching: the pattern was narrowed. Spark would stop with "Kafka data lost" for the
    # partitions that leave; refused with what was dropped and how to apply it. A wider pattern is accepted.
    with pytest.raises(ConfigError) as narrowed:
        spark.verify_source(kafka_source(r"dbserver1\.public\.orders"))
    message = str(narrowed.value)
    assert "was narrowed: it no longer matches 1 of the topics" in message
    assert f"partitions {TOPIC}[0])" in message and "--resume-from-ledger" in message
    assert "lost" not in message.replace("nothing is lost", "")
    spark.verify_source(kafka_source(".*"))


def test_an_empty_or_new_checkpoint_belongs_to_any_source(tmp_path: Path) -> None:
    spark = SparkCheckpoint(tmp_path / "spark")
    spark.verify_source(kafka_source("x"))
    spark.verify_source(FILES)
    write_spark_log(spark.folder, 0, ("{}",), committed=False)  # a Kafka query that found no partition yet
    spark.verify_source(kafka_source("x"))


# -- the sink ---------------------------------------------------------------------------------------------


def test_sink_records_each_batchs_offsets_and_refuses_a_reused_batch_id(zone: Zone) -> None:
    t = customers()
    sink = zone.sink()
    with sink.begin(0, kafka(p0=1), SPARK) as batch:
        assert batch.published is False
        batch.plan(BatchInput(records=[t.record("c", None, row(1))])).finish()
    saved = BatchLedger(LocalStorage(str(zone.checkpoint))).state  # read back from the checkpoint
    assert saved.sources == (BatchSource(0, kafka(p0=1)),)
    before = zone.snapshot()

    # A restart whose Spark checkpoint was deleted: Spark reads new records (offsets 1..3) as batch 0 again.
    restarted = zone.sink()
    with pytest.raises(LandingZoneCorrupt, match=r"ledger says batch 0 published .*\[0\] offsets up to 1"):
        restarted.begin(0, kafka(p0=3), SPARK)
    assert zone.snapshot() == before
    # The genuine replay of batch 0 is still recognised, and the next batch is recorded too.
    with restarted.begin(0, kafka(p0=1), SPARK) as replayed:
        assert replayed.published is True
        assert replayed.plan().finish().already_committed
    with restarted.begin(1, kafka(p0=3), SPARK) as batch:
        assert batch.published is False
        batch.plan(BatchInput(records=[t.record("c", None, row(2)), t.record("c", None, row(3))])).finish()
    assert [s.batch_id for s in zone.sink().state.sources] == [0, 1]


def test_a_ledger_number_ahead_of_the_landing_zone_stops_the_table(zone: Zone) -> None:
    t = customers()
    sink = zone.sink()
    sink.process_batch(0, [t.record("c", None, row(1))])
    sink.process_batch(1, [t.record("c", None, row(2))])
    # Someone deleted the table's files (mirroring itself always keeps the last one).
    for path in zone.table_files():
        zone.storage.delete(path)
    result = zone.sink().process_batch(2, [t.record("c", None, row(3))])
    reason = result.stopped["public.customers"]
    assert "published files up to number 2, but it holds no numbered file" in reason
    assert CUSTOMERS in reason
    assert zone.table_files() == []  # no file 3 after a gap


def test_a_table_folder_deleted_while_the_connector_runs_stops_the_table(zone: Zone) -> None:
    """The same sink, no restart: deleting a table's folder (Fabric then drops the table) is not written past.

    Before, the numbering was checked once per process, so the next batch recreated the folder with a fresh
    ``_metadata.json`` and file 3 alone: a table Fabric rebuilt from the later changes only, silently.
    """
    t = customers()
    sink = zone.sink()
    sink.process_batch(0, [t.record("c", None, row(1))])
    sink.process_batch(1, [t.record("c", None, row(2))])
    zone.storage.delete_tree(CUSTOMERS)
    result = sink.process_batch(2, [t.record("c", None, row(3))])
    reason = result.stopped["public.customers"]
    assert "published files up to number 2, but it holds no numbered file" in reason
    assert "rebuild" in reason
    assert zone.storage.list_dir(CUSTOMERS) == []  # neither file 3 nor a new _metadata.json
    assert "public.customers" in zone.sink().stopped_tables  # committed: a restart keeps it stopped


def test_a_deleted_metadata_file_alone_is_written_again(zone: Zone) -> None:
    """Only ``_metadata.json`` gone (the files still there): it is restored and the table goes on."""
    t = customers()
    sink = zone.sink()
    sink.process_batch(0, [t.record("c", None, row(1))])
    zone.storage.delete(f"{CUSTOMERS}/_metadata.json")
    result = sink.process_batch(1, [t.record("c", None, row(2))])
    assert not result.stopped
    assert [p.rsplit("/", 1)[-1] for p in zone.table_files()] == [
        "00000000000000000001.parquet",
        "00000000000000000002.parquet",
    ]
    assert orjson.loads(zone.read(f"{CUSTOMERS}/_metadata.json"))["keyColumns"] == ["id"]


def test_files_mirroring_processed_away_are_no_gap(zone: Zone) -> None:
    t = customers()
    sink = zone.sink()
    sink.process_batch(0, [t.record("c", None, row(1))])
    sink.process_batch(1, [t.record("c", None, row(2))])
    # The service deleted file 1 and moved file 2 (the last one, which it keeps) to _ProcessedFiles.
    files = zone.table_files()
    data = zone.read(files[1])
    zone.storage.delete(files[0])
    zone.storage.delete(files[1])
    zone.write(f"{CUSTOMERS}/_ProcessedFiles/00000000000000000002.parquet", data)
    result = zone.sink().process_batch(2, [t.record("c", None, row(3))])
    assert not result.stopped
    assert [p.rsplit("/", 1)[-1] for p in zone.table_files()] == ["00000000000000000003.parquet"]


# -- damaged ledger files and a lost ledger: one error line, exit 2 -----------------------------------------


def convert_args(tmp_path: Path, landing: Path, checkpoint: Path) -> list[str]:
    t = customers()
    dump = tmp_path / "dump.jsonl"
    dump.write_bytes(b"".join(kcat_line(r) for r in [t.record("c", None, row(1)), t.record("c", None, row(2))]))
    return ["convert", "--input", str(dump), "--landing-zone", str(landing), "--checkpoint", str(checkpoint)]


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error:")]


@pytest.mark.parametrize("damage", ["truncated", "not a mapping", "wrong type"])
def test_a_garbled_ledger_file_is_one_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    landing, checkpoint = tmp_path / "lz", tmp_path / "cp"
    args = convert_args(tmp_path, landing, checkpoint)
    assert main(args) == 0
    capsys.readouterr()
    content = {"truncated": b'{"batch_id": 3, "fil', "not a mapping": b"[1, 2]", "wrong type": b'{"batch_id": "x"}'}
    plan = checkpoint / "ledger" / "plans" / f"{3:020d}.json"
    plan.parent.mkdir(parents=True, exist_ok=True)
    plan.write_bytes(content[damage])
    assert main(args) == 2
    errors = error_lines(capsys.readouterr().err)
    assert len(errors) == 1 and str(plan) in errors[0] and "restore it" in errors[0], errors
    plan.unlink()

    state = checkpoint / "ledger" / "state.json"
    good = state.read_bytes()
    state.write_bytes(content[damage] if damage != "wrong type" else b'{"last_committed_batch": "x"}')
    assert main(args) == 2
    errors = error_lines(capsys.readouterr().err)
    assert len(errors) == 1 and str(state) in errors[0] and "emptied landing zone" in errors[0], errors
    state.write_bytes(good)
    assert main(args) == 0


def test_convert_with_a_vanished_ledger_state_refuses_to_republish(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    landing, checkpoint = tmp_path / "lz", tmp_path / "cp"
    args = convert_args(tmp_path, landing, checkpoint)
    assert main(args) == 0
    capsys.readouterr()
    published = sorted(p.name for p in (landing / CUSTOMERS).iterdir() if p.name[0].isdigit())
    (checkpoint / "ledger" / "state.json").unlink()
    assert main(args) == 2
    errors = error_lines(capsys.readouterr().err)
    assert len(errors) == 1, errors
    assert "ledger/state.json" in errors[0] and str(checkpoint) in errors[0] and CUSTOMERS in errors[0]
    assert sorted(p.name for p in (landing / CUSTOMERS).iterdir() if p.name[0].isdigit()) == published
    # A new checkpoint into an empty landing zone is still a normal first run.
    assert main(convert_args(tmp_path, tmp_path / "lz-new", tmp_path / "cp-new")) == 0
    assert LocalStorage(str(tmp_path / "lz-new")).exists(f"{CUSTOMERS}/00000000000000000001.parquet")


# -- run --resume-from-ledger ------------------------------------------------------------------------------


def test_resume_moves_spark_aside_and_starts_from_the_ledgers_last_end_offsets(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path / "cp"))
    ledger_files = BatchLedger(storage)
    ledger_files.commit_state(ledger(7, BatchSource(6, kafka(p0=10)), BatchSource(7, kafka(p0=20, p1=5))))
    write_spark_log(tmp_path / "cp" / "spark", 3, kafka(p0=4), committed=True)
    spark = SparkCheckpoint(tmp_path / "cp" / "spark")

    landing = LocalStorage(str(tmp_path / "lz"))
    resume_from_ledger(ledger_files, spark, landing)
    assert not spark.folder.exists()
    moved = list((tmp_path / "cp").glob("spark.moved-*"))
    assert len(moved) == 1 and (moved[0] / "offsets" / "3").exists()
    reopened = BatchLedger(storage).state
    assert reopened.last_committed_batch == -1 and reopened.sources == ()
    assert orjson.loads(reopened.resume_offsets or "") == {TOPIC: {"0": 20, "1": 5}}
    spark.verify_ledger(reopened)  # the new, empty Spark checkpoint agrees with the resumed ledger
    # A crash before the first new batch: resuming again keeps the same offsets.
    resume_from_ledger(BatchLedger(storage), spark, landing)
    assert BatchLedger(storage).state.resume_offsets == reopened.resume_offsets


def test_resume_after_an_inflated_batch_count_starts_from_the_newest_batch_recorded(tmp_path: Path) -> None:
    """The refusal of an inflated count sends the operator here; this used to answer "restore the matching
    Spark checkpoint" (the advice that had led here)."""
    spark = SparkCheckpoint(tmp_path / "spark")
    inflated = BatchLedger(LocalStorage(str(tmp_path / "a")))
    inflated.commit_state(ledger(9, BatchSource(3, kafka(p0=12)), BatchSource(4, kafka(p0=20))))
    resume_from_ledger(inflated, spark, LocalStorage(str(tmp_path / "lz")))
    assert orjson.loads(inflated.state.resume_offsets or "") == {TOPIC: {"0": 20}}


def test_resume_after_an_older_ledger_numbers_after_the_landing_zone_and_starts_from_sparks_newest_commit(
    tmp_path: Path,
) -> None:
    storage = LocalStorage(str(tmp_path / "cp"))
    older = BatchLedger(storage)
    tables = {"public.customers": TableState("public.schema/customers", next_number=7, files_published=6)}
    older.commit_state(LedgerState(2, tables, (BatchSource(2, kafka(p0=10)),)))
    landing = LocalStorage(str(tmp_path / "lz"))
    for number in (1, 8, 9):  # mirroring keeps the last file; the lost ledger published up to 9
        landing.create(f"public.schema/customers/{number:020d}.parquet", b"x")
    spark_folder = tmp_path / "cp" / "spark"
    write_spark_log(spark_folder, 4, kafka(p0=30), committed=True)
    write_spark_log(spark_folder, 5, kafka(p0=40), committed=False)  # never committed: maybe not published
    resume_from_ledger(older, SparkCheckpoint(spark_folder), landing)
    state = BatchLedger(storage).state
    assert state.tables["public.customers"].next_number == 10
    assert orjson.loads(state.resume_offsets or "") == {TOPIC: {"0": 30}}


def test_resume_with_a_garbled_spark_offsets_log_moves_it_aside_and_uses_the_ledger(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path / "cp"))
    ledger_files = BatchLedger(storage)
    ledger_files.commit_state(ledger(4, BatchSource(4, kafka(p0=20))))
    spark_folder = tmp_path / "cp" / "spark"
    write_spark_log(spark_folder, 4, kafka(p0=20), committed=True)
    (spark_folder / "offsets" / "4").write_bytes(b"\x00garbled")
    spark = SparkCheckpoint(spark_folder)
    with pytest.raises(LandingZoneCorrupt, match="run --resume-from-ledger"):
        spark.verify_ledger(ledger_files.state)  # the refusal names the recovery ...
    resume_from_ledger(ledger_files, spark, LocalStorage(str(tmp_path / "lz")))  # ... which works
    assert not spark_folder.exists()
    assert orjson.loads(BatchLedger(storage).state.resume_offsets or "") == {TOPIC: {"0": 20}}


def test_resume_refuses_without_recorded_offsets_or_without_kafka(tmp_path: Path) -> None:
    spark = SparkCheckpoint(tmp_path / "spark")
    landing = LocalStorage(str(tmp_path / "lz"))
    unrecorded = BatchLedger(LocalStorage(str(tmp_path / "a")))
    unrecorded.commit_state(ledger(9))
    with pytest.raises(LandingZoneCorrupt) as caught:
        resume_from_ledger(unrecorded, spark, landing)
    # No advice that leads back here: neither the flag itself nor "restore the matching Spark checkpoint".
    assert "resume-from-ledger: neither the ledger" in str(caught.value)
    assert "restore" not in str(caught.value) and "emptied landing zone" in str(caught.value)
    files = BatchLedger(LocalStorage(str(tmp_path / "b")))
    files.commit_state(ledger(2, BatchSource(2, ('{"logOffset":2}',))))
    with pytest.raises(ConfigError, match="needs the Kafka source"):
        resume_from_ledger(files, spark, landing)
    with pytest.raises(ConfigError, match="has published no batch"):
        resume_from_ledger(BatchLedger(LocalStorage(str(tmp_path / "c"))), spark, landing)


def test_a_restarted_batch_id_never_overwrites_the_committed_toast_snapshot(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path / "cp"))
    ledger_files = BatchLedger(storage)
    committed = ledger_files.write_toast_snapshot("public.t", 0, b"committed")
    ledger_files.commit_state(LedgerState(0, {"public.t": TableState("t", toast_snapshot=committed)}))
    resumed = ledger_files.write_toast_snapshot("public.t", 0, b"batch 0 after a resume")
    assert resumed != committed
    assert ledger_files.read_toast_snapshot(committed) == b"committed"
