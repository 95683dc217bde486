"""Healing lost Kafka records (issue 32): which tables a gap rebuilds, the ledger's gap records, the move past it.

The brokers' answer is a ``DataLossCheck`` handed in as plain data (``connector.healing.data_loss`` reads it from
real brokers; tests/integration/test_preflight_kafka.py runs the whole path on a real broker and real Spark). The
ledger and Spark's checkpoint are real files in their own formats.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from connector.commands.tables import tables_command
from connector.config import MirrorSettings, RebuildSettings, TableSettings
from connector.healing.data_loss import DataLossCheck, LostRange, Partition
from connector.healing.data_loss_healing import (
    expected_offsets,
    gaps_for,
    heal_data_loss,
    stop_message,
    table_of,
    with_rebuilds,
)
from connector.healing.query_failure import SourceDataLost, explain_query_failure
from connector.kafka.spark_checkpoint import SparkCheckpoint
from connector.operate import metrics
from connector.operate.job_status import STATUS_FILE, JobStatusRecorder, read_job_status
from connector.publish.ledger import BatchLedger
from connector.publish.ledger_format import state_from_json, state_to_json
from connector.publish.ledger_state import GAP_HISTORY, BatchSource, DataGap, LedgerState, TableState
from connector.publish.lifecycle import Phase
from connector.storage.local import LocalStorage

CUSTOMERS_TOPIC = "shop.public.customers"
ORDERS_TOPIC = "shop.sales.orders"
ITEMS_TOPIC = "shop.public.items"
HEARTBEAT = "__debezium-heartbeat.shop"
NOW = 1_800_000_000.0


def ledger_state(batch_id: int = 4, ends: Mapping[str, Mapping[str, int]] | None = None) -> LedgerState:
    """A ledger that published three tables up to ``batch_id``, ending at ``ends``."""
    ends = ends or {CUSTOMERS_TOPIC: {"0": 100}, ORDERS_TOPIC: {"0": 50, "1": 60}, ITEMS_TOPIC: {"0": 70}}
    tables = {
        "public.customers": TableState("public.schema/customers", next_number=5, topic=CUSTOMERS_TOPIC),
        "sales.orders": TableState("sales.schema/orders", next_number=3, topic=ORDERS_TOPIC),
        "public.items": TableState("public.schema/items", next_number=2, topic=ITEMS_TOPIC),
    }
    sources = (BatchSource(batch_id, (orjson.dumps(ends).decode(),)),)
    return LedgerState(last_committed_batch=batch_id, tables=tables, sources=sources)


def write_spark_checkpoint(folder: Path, batch_id: int, ends: Mapping[str, Mapping[str, int]]) -> SparkCheckpoint:
    """Spark's offsets and commit logs for batches 0..``batch_id``, the last ending at ``ends``."""
    for sub in ("offsets", "commits"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    for bid in range(batch_id + 1):
        (folder / "offsets" / str(bid)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{orjson.dumps(ends).decode()}')
        (folder / "commits" / str(bid)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    return SparkCheckpoint(folder)


class Brokers:
    """The brokers' answer to ``check_offsets`` as data, recording what the mirror asked."""

    def __init__(self, *lost: LostRange, ids: Mapping[str, str] | None = None) -> None:
        self.lost = lost
        self.ids = dict(ids or {})
        self.asked: list[tuple[dict[Partition, int], list[str]]] = []
        self.recorded_ids: list[dict[str, str]] = []

    def __call__(
        self, expected: Mapping[Partition, int], subscribed: Collection[str], recorded_ids: Mapping[str, str]
    ) -> DataLossCheck:
        self.asked.append((dict(expected), sorted(subscribed)))
        self.recorded_ids.append(dict(recorded_ids))
        return DataLossCheck(self.lost, self.ids)


RETENTION = LostRange(CUSTOMERS_TOPIC, 0, 100, 949, "retention", 950)


@pytest.fixture
def setup(tmp_path: Path) -> tuple[BatchLedger, SparkCheckpoint, LocalStorage]:
    checkpoint = LocalStorage(tmp_path / "cp")
    ledger = BatchLedger(checkpoint)
    state = ledger_state()
    ledger.commit_state(state)
    spark = write_spark_checkpoint(tmp_path / "cp" / "spark", 4, orjson.loads(state.sources[-1].offsets[0]))
    return ledger, spark, LocalStorage(tmp_path / "lz")


# -- which table a gap is ------------------------------------------------------------------------------------------


def test_a_gap_names_the_table_the_ledger_recorded_for_its_topic() -> None:
    state = ledger_state()
    # A table renamed by configuration since: the ledger's record of the topic wins (it is what was published).
    mirror = MirrorSettings(tables={CUSTOMERS_TOPIC: TableSettings(table="clients")})
    assert table_of(CUSTOMERS_TOPIC, state, mirror) == "public.customers"


def test_a_topic_not_mirrored_yet_maps_as_its_events_would() -> None:
    mirror = MirrorSettings(tables={"shop.public.new": TableSettings(schema_name="sales", table="fresh")})
    assert table_of("shop.public.new", ledger_state(), mirror) == "sales.fresh"
    assert table_of("shop.public.other", ledger_state(), MirrorSettings()) == "public.other"


@pytest.mark.parametrize("topic", [HEARTBEAT, "shop.transaction", "shop"])
def test_topics_without_table_rows_carry_no_table(topic: str) -> None:
    assert table_of(topic, ledger_state(), MirrorSettings()) is None


def test_gaps_keep_each_lost_range() -> None:
    lost = [RETENTION, LostRange(HEARTBEAT, 0, 3, None, "recreated", 0)]
    gaps = gaps_for(lost, ledger_state(), MirrorSettings(), NOW)
    assert gaps == (
        DataGap("public.customers", CUSTOMERS_TOPIC, 0, 100, 949, "retention", NOW),
        DataGap(None, HEARTBEAT, 0, 3, None, "recreated", NOW),
    )
    assert gaps[0].describe() == f"{CUSTOMERS_TOPIC}[0]@100..949"


# -- the ledger's record and the rebuild ----------------------------------------------------------------------------


def test_recording_a_gap_begins_exactly_its_tables_rebuild() -> None:
    state = ledger_state()
    gaps = gaps_for([RETENTION], state, MirrorSettings(), NOW)
    healed = with_rebuilds(state, gaps, MirrorSettings(), NOW)
    customers = healed.tables["public.customers"]
    assert customers.lifecycle.phase is Phase.DELETING
    assert customers.lifecycle.reason == f"data lost at {CUSTOMERS_TOPIC}[0]@100..949"
    assert customers.lifecycle.word == "rebuilding:deleting"
    assert healed.data_gaps == gaps
    for other in ("sales.orders", "public.items"):
        assert healed.tables[other] == state.tables[other]


def test_data_loss_rebuilds_count_toward_the_automatic_limit_then_the_table_stops() -> None:
    mirror = MirrorSettings(rebuild=RebuildSettings(max_automatic=1))
    state = ledger_state()
    first = with_rebuilds(state, gaps_for([RETENTION], state, mirror, NOW), mirror, NOW)
    assert first.tables["public.customers"].lifecycle.automatic_rebuilds == 1
    # The rebuild ran (the table publishes again), then retention outran the connector a second time.
    running = replace(
        first,
        tables={**first.tables, "public.customers": replace(first.tables["public.customers"], lifecycle=replace(
            first.tables["public.customers"].lifecycle, phase=Phase.RUNNING
        ))},
    )  # fmt: skip
    again = LostRange(CUSTOMERS_TOPIC, 0, 2000, 2999, "retention", 3000)
    stopped = with_rebuilds(running, gaps_for([again], running, mirror, NOW + 60), mirror, NOW + 60)
    customers = stopped.tables["public.customers"].lifecycle
    assert customers.phase is Phase.STOPPED
    assert customers.reason == (
        f"data lost at {CUSTOMERS_TOPIC}[0]@2000..2999 (not rebuilt automatically: 1 automatic rebuild(s) already; "
        "run `rebuild`)"
    )
    assert len(stopped.data_gaps) == 2


def test_the_same_gap_found_again_after_a_crash_is_recorded_once() -> None:
    state = ledger_state()
    first = with_rebuilds(state, gaps_for([RETENTION], state, MirrorSettings(), NOW), MirrorSettings(), NOW)
    # The rebuild moved on (the folder was deleted) before the crash; the gap is found again at the next start.
    moved = replace(
        first,
        tables={
            **first.tables,
            "public.customers": replace(
                first.tables["public.customers"],
                lifecycle=first.tables["public.customers"].lifecycle.folder_deleted(now=NOW + 1),
            ),
        },
    )
    again = with_rebuilds(moved, gaps_for([RETENTION], moved, MirrorSettings(), NOW + 5), MirrorSettings(), NOW + 5)
    assert again == moved
    assert len(again.data_gaps) == 1 and again.data_gaps[0].detected_at == NOW


def test_gaps_in_two_partitions_of_one_table_are_one_rebuild_naming_both() -> None:
    state = ledger_state()
    lost = [LostRange(ORDERS_TOPIC, 0, 50, 80, "retention", 81), LostRange(ORDERS_TOPIC, 1, 60, 90, "retention", 91)]
    healed = with_rebuilds(state, gaps_for(lost, state, MirrorSettings(), NOW), MirrorSettings(), NOW)
    assert healed.tables["sales.orders"].lifecycle.reason == (
        f"data lost at {ORDERS_TOPIC}[0]@50..80, {ORDERS_TOPIC}[1]@60..90"
    )
    assert len(healed.data_gaps) == 2


def test_a_table_never_published_is_entered_rebuilding() -> None:
    state = ledger_state()
    lost = [LostRange("shop.public.fresh", 0, 0, 9, "retention", 10)]
    healed = with_rebuilds(state, gaps_for(lost, state, MirrorSettings(), NOW), MirrorSettings(), NOW)
    fresh = healed.tables["public.fresh"]
    assert (fresh.folder, fresh.topic, fresh.lifecycle.phase) == (
        "public.schema/fresh",
        "shop.public.fresh",
        Phase.DELETING,
    )


def test_a_heartbeat_gap_is_recorded_without_a_rebuild() -> None:
    state = ledger_state()
    lost = [LostRange(HEARTBEAT, 0, 3, 7, "retention", 8)]
    healed = with_rebuilds(state, gaps_for(lost, state, MirrorSettings(), NOW), MirrorSettings(), NOW)
    assert healed.tables == state.tables
    assert [g.table for g in healed.data_gaps] == [None]


def test_gap_records_survive_the_json_form_and_keep_the_last_hundred() -> None:
    gaps = tuple(
        DataGap("t", "shop.public.t", 0, i * 10, i * 10 + 9, "retention", NOW + i) for i in range(GAP_HISTORY + 5)
    )
    state = ledger_state().with_gaps(gaps)
    assert len(state.data_gaps) == GAP_HISTORY and state.data_gaps[0].first == 50
    parsed = state_from_json(orjson.loads(orjson.dumps(state_to_json(state))))
    assert parsed.data_gaps == state.data_gaps
    assert parsed.has_gap("shop.public.t", 0, 50) and not parsed.has_gap("shop.public.t", 0, 40)
    assert "data_gaps" not in state_to_json(ledger_state())  # a ledger without gaps is written as before


def test_gap_records_of_a_newer_format_are_refused() -> None:
    raw = state_to_json(ledger_state())
    raw["data_gaps"] = {"version": 2, "gaps": []}
    with pytest.raises(ValueError, match="format 2"):
        state_from_json(raw)


# -- expected offsets ----------------------------------------------------------------------------------------------


def test_expected_offsets_are_where_spark_reads_next(tmp_path: Path) -> None:
    state = ledger_state(ends={CUSTOMERS_TOPIC: {"0": 100}, ORDERS_TOPIC: {"0": 50}})
    # Spark committed one batch less than the ledger (a crash between the two commits): it re-reads from 90.
    spark = write_spark_checkpoint(tmp_path / "spark", 3, {CUSTOMERS_TOPIC: {"0": 90}, ORDERS_TOPIC: {"0": 50}})
    assert expected_offsets(state, spark) == {Partition(CUSTOMERS_TOPIC, 0): 90, Partition(ORDERS_TOPIC, 0): 50}
    # Spark's folder gone (moved aside when the job died): the ledger's end offsets.
    gone = SparkCheckpoint(tmp_path / "none")
    assert expected_offsets(state, gone) == {Partition(CUSTOMERS_TOPIC, 0): 100, Partition(ORDERS_TOPIC, 0): 50}
    assert expected_offsets(LedgerState(), gone) is None  # a first start


def test_a_resume_under_way_expects_its_own_offsets(tmp_path: Path) -> None:
    state = replace(ledger_state(), last_committed_batch=-1, sources=(), resume_offsets='{"shop.public.items":{"0":7}}')
    assert expected_offsets(state, SparkCheckpoint(tmp_path / "none")) == {Partition(ITEMS_TOPIC, 0): 7}


# -- the whole start-up step ---------------------------------------------------------------------------------------


def test_heal_commits_the_rebuild_then_moves_spark_past_the_gap(
    setup: tuple[BatchLedger, SparkCheckpoint, LocalStorage],
) -> None:
    ledger, spark, landing = setup
    before = metrics.DATA_LOST.labels(table="public.customers")._value.get()
    brokers = Brokers(RETENTION)
    gaps = heal_data_loss(
        ledger, spark, landing, MirrorSettings(), brokers, subscribed=[CUSTOMERS_TOPIC, ORDERS_TOPIC], now=NOW
    )
    assert [g.table for g in gaps] == ["public.customers"]
    assert brokers.asked[0][0][Partition(CUSTOMERS_TOPIC, 0)] == 100
    assert brokers.asked[0][1] == [CUSTOMERS_TOPIC, ORDERS_TOPIC]
    on_disk = BatchLedger(ledger.storage).state
    assert on_disk.tables["public.customers"].lifecycle.phase is Phase.DELETING
    assert on_disk.data_gaps == gaps
    # Only the lost partition moves; the others go on exactly where they were.
    assert orjson.loads(on_disk.resume_offsets or "") == {
        CUSTOMERS_TOPIC: {"0": 950},
        ORDERS_TOPIC: {"0": 50, "1": 60},
        ITEMS_TOPIC: {"0": 70},
    }
    assert on_disk.last_committed_batch == -1 and not spark.folder.exists()
    assert [p.name.startswith("spark.moved-") for p in spark.folder.parent.iterdir() if p.is_dir()].count(True) == 1
    assert metrics.DATA_LOST.labels(table="public.customers")._value.get() == before + 1


def test_a_crash_after_the_record_redoes_only_the_move(
    setup: tuple[BatchLedger, SparkCheckpoint, LocalStorage],
) -> None:
    ledger, spark, landing = setup
    state = ledger.state
    # What the first start committed before it was killed: the gap and the rebuild, Spark not moved yet.
    ledger.commit_state(
        with_rebuilds(state, gaps_for([RETENTION], state, MirrorSettings(), NOW), MirrorSettings(), NOW)
    )
    before = metrics.DATA_LOST.labels(table="public.customers")._value.get()
    heal_data_loss(ledger, spark, landing, MirrorSettings(), Brokers(RETENTION), subscribed=(), now=NOW + 60)
    on_disk = BatchLedger(ledger.storage).state
    assert len(on_disk.data_gaps) == 1 and on_disk.data_gaps[0].detected_at == NOW
    assert on_disk.tables["public.customers"].lifecycle.since == NOW
    assert orjson.loads(on_disk.resume_offsets or "")[CUSTOMERS_TOPIC] == {"0": 950}
    assert metrics.DATA_LOST.labels(table="public.customers")._value.get() == before


def test_a_crash_while_spark_was_moved_aside_finishes_the_move(
    setup: tuple[BatchLedger, SparkCheckpoint, LocalStorage],
) -> None:
    ledger, spark, landing = setup
    state = ledger.state
    ledger.commit_state(
        with_rebuilds(state, gaps_for([RETENTION], state, MirrorSettings(), NOW), MirrorSettings(), NOW)
    )
    spark.folder.rename(spark.folder.with_name("spark.moved-earlier"))  # killed between the rename and the commit
    heal_data_loss(ledger, spark, landing, MirrorSettings(), Brokers(RETENTION), subscribed=(), now=NOW + 60)
    on_disk = BatchLedger(ledger.storage).state
    assert orjson.loads(on_disk.resume_offsets or "")[CUSTOMERS_TOPIC] == {"0": 950}
    assert on_disk.last_committed_batch == -1


def test_a_gap_under_a_resume_under_way_moves_its_offsets_and_its_new_checkpoint(tmp_path: Path) -> None:
    checkpoint = LocalStorage(tmp_path / "cp")
    ledger = BatchLedger(checkpoint)
    resume = {CUSTOMERS_TOPIC: {"0": 100}, ITEMS_TOPIC: {"0": 70}}
    ledger.commit_state(
        replace(ledger_state(), last_committed_batch=-1, sources=(), resume_offsets=orjson.dumps(resume).decode())
    )
    # The new checkpoint started (Spark fixed its first offsets in it) but committed no batch.
    spark = SparkCheckpoint(tmp_path / "cp" / "spark")
    (spark.folder / "sources" / "0").mkdir(parents=True)
    heal_data_loss(
        ledger, spark, LocalStorage(tmp_path / "lz"), MirrorSettings(), Brokers(RETENTION), subscribed=(), now=NOW
    )
    assert orjson.loads(ledger.state.resume_offsets or "") == {CUSTOMERS_TOPIC: {"0": 950}, ITEMS_TOPIC: {"0": 70}}
    assert not spark.folder.exists()


def test_a_partition_gone_is_left_out_of_the_start(setup: tuple[BatchLedger, SparkCheckpoint, LocalStorage]) -> None:
    ledger, spark, landing = setup
    gone = LostRange(ORDERS_TOPIC, 1, 60, None, "partition-gone", None)
    heal_data_loss(ledger, spark, landing, MirrorSettings(), Brokers(gone), subscribed=(), now=NOW)
    assert orjson.loads(ledger.state.resume_offsets or "")[ORDERS_TOPIC] == {"0": 50}
    assert ledger.state.tables["sales.orders"].lifecycle.phase is Phase.DELETING


def test_no_gap_changes_nothing(setup: tuple[BatchLedger, SparkCheckpoint, LocalStorage]) -> None:
    ledger, spark, landing = setup
    before = ledger.storage.read_bytes("ledger/state.json")
    assert heal_data_loss(ledger, spark, landing, MirrorSettings(), Brokers(), subscribed=(), now=NOW) == ()
    assert ledger.storage.read_bytes("ledger/state.json") == before and spark.folder.exists()


def test_stop_is_one_line_naming_every_gap_and_changes_nothing(
    setup: tuple[BatchLedger, SparkCheckpoint, LocalStorage],
) -> None:
    ledger, spark, landing = setup
    before = ledger.storage.read_bytes("ledger/state.json")
    heartbeat = LostRange(HEARTBEAT, 0, 3, 7, "retention", 8)
    with pytest.raises(SourceDataLost) as raised:
        heal_data_loss(
            ledger,
            spark,
            landing,
            MirrorSettings(on_data_lost="stop"),
            Brokers(RETENTION, heartbeat),
            subscribed=(),
            now=NOW,
        )
    message = str(raised.value)
    assert "\n" not in message
    assert f"{CUSTOMERS_TOPIC}[0]@100..949 (retention, table public.customers)" in message
    assert f"{HEARTBEAT}[0]@3..7 (retention)" in message
    assert "on_data_lost: rebuild" in message and "retention.ms" in message
    assert ledger.storage.read_bytes("ledger/state.json") == before and spark.folder.exists()


def test_stop_message_matches_the_gap_description() -> None:
    gap = DataGap("public.items", ITEMS_TOPIC, 0, 5, None, "recreated", NOW)
    assert stop_message([gap]).startswith(f"Kafka data lost at {ITEMS_TOPIC}[0]@5.. (recreated, table public.items):")


def test_a_loss_found_while_running_says_what_the_next_start_does() -> None:
    text = (
        "KAFKA_DATA_LOSS Cannot fetch offset 1865 (GroupId: spark-kafka-source-x, TopicPartition: shop.public.items-0)"
    )
    rebuild = explain_query_failure(text, "rebuild")
    stop = explain_query_failure(text, "stop")
    assert isinstance(rebuild, SourceDataLost) and isinstance(stop, SourceDataLost)
    assert f"{ITEMS_TOPIC}[0]@1865" in str(rebuild) and "rebuilt at the next start" in str(rebuild)
    assert "set mirror.on_data_lost: rebuild" in str(stop)


# -- the job's status, shown first by ``tables`` ------------------------------------------------------------------


def test_a_job_stop_is_recorded_only_by_the_fence_holder_and_shown_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = LocalStorage(tmp_path / "cp")
    BatchLedger(checkpoint).commit_state(ledger_state())
    refused = JobStatusRecorder()
    refused.stopped("another instance holds the writer fence")  # never armed: a second instance writes nothing
    assert not (tmp_path / "cp" / STATUS_FILE).exists()
    holder = JobStatusRecorder()
    holder.arm(checkpoint)
    holder.stopped("Kafka data lost at shop.public.customers[0]@100..949 (retention)")
    status = read_job_status(checkpoint)
    assert status is not None and status.state == "stopped"
    assert tables_command(checkpoint, as_json=False) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("job: stopped ") and lines[0].endswith(
        ": Kafka data lost at shop.public.customers[0]@100..949 (retention)"
    )
    assert len(lines) == 4
    assert tables_command(checkpoint, as_json=True) == 0
    first = orjson.loads(capsys.readouterr().out.splitlines()[0])
    assert first["job"]["state"] == "stopped"


def test_a_rebuilding_table_shows_the_gap_as_its_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = LocalStorage(tmp_path / "cp")
    state = ledger_state()
    BatchLedger(checkpoint).commit_state(
        with_rebuilds(state, gaps_for([RETENTION], state, MirrorSettings(), NOW), MirrorSettings(), NOW)
    )
    tables_command(checkpoint, as_json=False)
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("public.customers"))
    assert "state=rebuilding:deleting" in line and f"reason=data lost at {CUSTOMERS_TOPIC}[0]@100..949" in line


def test_records_the_ledger_published_before_spark_committed_are_no_gap(tmp_path: Path) -> None:
    """Killed between the ledger's commit of batch 5 and Spark's: Spark would re-read 100..119, now gone."""
    checkpoint = LocalStorage(tmp_path / "cp")
    ledger = BatchLedger(checkpoint)
    ledger.commit_state(ledger_state(batch_id=5, ends={CUSTOMERS_TOPIC: {"0": 120}, ITEMS_TOPIC: {"0": 70}}))
    spark = write_spark_checkpoint(tmp_path / "cp" / "spark", 4, {CUSTOMERS_TOPIC: {"0": 100}, ITEMS_TOPIC: {"0": 70}})
    (spark.folder / "offsets" / "5").write_text(
        'v1\n{}\n{"shop.public.customers":{"0":120},"shop.public.items":{"0":70}}'
    )
    published = LostRange(CUSTOMERS_TOPIC, 0, 100, 114, "retention", 115)
    assert (
        heal_data_loss(
            ledger, spark, LocalStorage(tmp_path / "lz"), MirrorSettings(), Brokers(published), subscribed=(), now=NOW
        )
        == ()
    )
    assert ledger.state.tables["public.customers"].lifecycle.phase is Phase.RUNNING
    assert orjson.loads(ledger.state.resume_offsets or "") == {CUSTOMERS_TOPIC: {"0": 120}, ITEMS_TOPIC: {"0": 70}}
    # Lost beyond what the ledger published: only that part is a gap.
    partly = LostRange(ITEMS_TOPIC, 0, 60, 79, "retention", 80)
    ledger.commit_state(ledger_state(batch_id=5, ends={ITEMS_TOPIC: {"0": 70}}))
    gaps = heal_data_loss(
        ledger,
        SparkCheckpoint(tmp_path / "none"),
        LocalStorage(tmp_path / "lz"),
        MirrorSettings(),
        Brokers(partly),
        subscribed=(),
        now=NOW,
    )
    assert [g.describe() for g in gaps] == [f"{ITEMS_TOPIC}[0]@70..79"]
