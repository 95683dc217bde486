"""Resets of a table by its source, seen in its events: a new Debezium snapshot after the initial load, a TRUNCATE.

Each begins the table's rebuild through the lifecycle (folder deleted next, Fabric waited for, re-snapshot), with
one line and ``cdc_mirror_table_resets_total{reason}``; nothing of the batch is published for the table, and the
other tables go on. An incremental snapshot (the one the mirror asks for) stays upserts.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from connector.config import MirrorSettings
from connector.events import KafkaRecord
from connector.operate import metrics
from connector.publish.batch_result import BatchResult
from connector.publish.lifecycle import Phase
from connector.sink import MirrorSink
from connector.storage import LocalStorage
from tests.support.debezium import Topic, field

COLUMNS = [field("id", "int32", optional=False), field("v", "string")]
TABLE, OTHER = "public.items", "public.others"


def topics() -> tuple[Topic, Topic]:
    return Topic("dbserver1.public.items", COLUMNS, ["id"]), Topic("dbserver1.public.others", COLUMNS, ["id"])


def sink(tmp_path: Path, **mirror: Any) -> MirrorSink:
    landing, checkpoint = LocalStorage(tmp_path / "lz"), LocalStorage(tmp_path / "cp")
    return MirrorSink(landing, checkpoint, MirrorSettings(**mirror), snapshot_signal=lambda tid, table: "signal-1")


def reads(t: Topic, marks: list[tuple[str, int]]) -> list[KafkaRecord]:
    return [t.record("r", None, {"id": key, "v": mark}, snapshot=mark) for mark, key in marks]


def loaded(tmp_path: Path, **mirror: Any) -> tuple[MirrorSink, Topic, Topic]:
    """Both tables past their initial load: a snapshot pass of each, then a change of each."""
    t, other = topics()
    mirror_sink = sink(tmp_path, **mirror)
    first = reads(t, [("first", 1), ("true", 2), ("last_in_data_collection", 3)])
    mirror_sink.process_batch(0, [*first, *reads(other, [("last", 1)])])
    mirror_sink.process_batch(1, [t.record("u", None, {"id": 1, "v": "x"}), other.record("c", None, {"id": 2})])
    assert mirror_sink.state.tables[TABLE].initial_load_ended
    return mirror_sink, t, other


def files(tmp_path: Path, folder: str) -> list[str]:
    root = tmp_path / "lz" / "public.schema" / folder
    return sorted(p.name for p in root.iterdir() if p.name[0].isdigit()) if root.exists() else []


def phase(mirror_sink: MirrorSink, tid: str = TABLE) -> Phase:
    return mirror_sink.state.tables[tid].lifecycle.phase


@pytest.mark.parametrize(
    "marks",
    [
        [("first", 1), ("true", 2), ("last", 3)],  # the whole snapshot again
        [("first_in_data_collection", 1), ("true", 2)],  # the table's pass, not the first table
        [("last_in_data_collection", 1)],  # a one-row table's only read
        [("true", 2)],  # a pass whose first read came in a batch before (or was the only one marked)
    ],
)
def test_a_new_snapshot_after_the_initial_load_rebuilds_the_table(
    tmp_path: Path, marks: list[tuple[str, int]], caplog: pytest.LogCaptureFixture
) -> None:
    mirror_sink, t, other = loaded(tmp_path)
    before = files(tmp_path, "items")
    with caplog.at_level(logging.WARNING):
        result = mirror_sink.process_batch(2, [*reads(t, marks), other.record("c", None, {"id": 3})])
    assert phase(mirror_sink) is Phase.DELETING and phase(mirror_sink, OTHER) is Phase.RUNNING
    assert result.resets == {TABLE: "new_snapshot"} and result.stopped == {}
    assert files(tmp_path, "items") == before  # nothing of the batch published: the folder goes next
    assert len(files(tmp_path, "others")) == 3
    lines = [r.getMessage() for r in caplog.records if "new snapshot" in r.getMessage()]
    assert len(lines) == 1 and "dbserver1.public.items[0]@" in lines[0], lines
    assert mirror_sink.state.tables[TABLE].lifecycle.automatic_rebuilds == 0


def test_a_new_snapshot_after_changes_in_the_same_batch_is_seen(tmp_path: Path) -> None:
    mirror_sink, t, _ = loaded(tmp_path)
    changes = [t.record("u", None, {"id": 2, "v": "y"}), t.record("d", {"id": 3, "v": "z"}, None)]
    result = mirror_sink.process_batch(2, [*changes, *reads(t, [("true", 1), ("true", 2)])])
    assert result.resets == {TABLE: "new_snapshot"} and phase(mirror_sink) is Phase.DELETING


def test_a_new_snapshot_right_after_the_initial_load_in_one_batch_is_seen(tmp_path: Path) -> None:
    t, _ = topics()
    mirror_sink = sink(tmp_path)
    batch = [*reads(t, [("first", 1), ("last", 2)]), t.record("c", None, {"id": 3}), *reads(t, [("first", 1)])]
    result = mirror_sink.process_batch(0, batch)
    assert result.resets == {TABLE: "new_snapshot"} and phase(mirror_sink) is Phase.DELETING


@pytest.mark.parametrize("mark", ["incremental", None])
def test_incremental_snapshot_reads_stay_upserts(tmp_path: Path, mark: str | None) -> None:
    """An incremental snapshot's reads (and reads that say nothing: they may be one's) never reset the table."""
    mirror_sink, t, _ = loaded(tmp_path)
    records = [t.record("r", None, {"id": 1, "v": "again"}, snapshot=mark) for _ in range(2)]
    if mark is None:  # ``Topic.record`` writes "true" for a read without a mark: take it out of the envelope
        records = [r._replace(value=r.value.replace(b',"snapshot":"true"', b"")) for r in records if r.value]
    result = mirror_sink.process_batch(2, records)
    assert result.resets == {} and phase(mirror_sink) is Phase.RUNNING
    assert len(files(tmp_path, "items")) == 3


def test_the_rest_of_the_snapshot_that_began_a_rebuild_begins_no_other(tmp_path: Path) -> None:
    """After the rebuild's reset, the rest of that pass continues it; the next pass after a change is new again."""
    mirror_sink, t, _ = loaded(tmp_path, rebuild={"wait_s": 0})
    mirror_sink.process_batch(2, reads(t, [("first_in_data_collection", 1)]))
    mirror_sink.advance_rebuilds()
    mirror_sink.advance_rebuilds()
    assert phase(mirror_sink) is Phase.SNAPSHOT_REQUESTED
    result = mirror_sink.process_batch(3, reads(t, [("true", 2), ("last_in_data_collection", 3)]))
    assert result.resets == {} and phase(mirror_sink) is Phase.SNAPSHOT_REQUESTED
    result = mirror_sink.process_batch(4, reads(t, [("last_in_data_collection", 3)]))  # after the pass's last
    assert result.resets == {TABLE: "new_snapshot"}


def test_truncate_rebuilds_the_table_by_default_and_the_others_go_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert MirrorSettings().truncate_policy == "rebuild"
    t, other = topics()
    mirror_sink = sink(tmp_path, rebuild={"max_automatic": 0})
    mirror_sink.process_batch(0, [t.record("c", None, {"id": 1}), other.record("c", None, {"id": 1})])
    batch = [
        t.record("c", None, {"id": 2}),
        t.truncate(),
        t.record("c", None, {"id": 3}),
        other.record("c", None, {"id": 2}),
    ]
    with caplog.at_level(logging.WARNING):
        result = mirror_sink.process_batch(1, batch)
    assert result.resets == {TABLE: "truncate"} and result.stopped == {} and mirror_sink.stopped_tables == {}
    # Rebuilt even with no automatic rebuild left: the source, not a failure, asked for it.
    assert phase(mirror_sink) is Phase.DELETING and phase(mirror_sink, OTHER) is Phase.RUNNING
    assert files(tmp_path, "items") == ["00000000000000000001.parquet"] and len(files(tmp_path, "others")) == 2
    lines = [r.getMessage() for r in caplog.records if "truncated" in r.getMessage()]
    assert len(lines) == 1 and "dbserver1.public.items[0]@2" in lines[0] and "truncate_policy: rebuild" in lines[0]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_the_reset_counter_says_why(tmp_path: Path) -> None:
    result = BatchResult(0, resets={TABLE: "truncate", OTHER: "new_snapshot"})
    before = metrics.TABLE_RESETS.labels(TABLE, "truncate")._value.get()
    metrics.record_batch(result)
    assert metrics.TABLE_RESETS.labels(TABLE, "truncate")._value.get() == before + 1
    text = metrics.REGISTRY.get_sample_value(
        "cdc_mirror_table_resets_total", {"table": OTHER, "reason": "new_snapshot"}
    )
    assert text is not None and text >= 1


def test_the_blocking_snapshot_a_keyless_rebuild_asked_for_is_no_new_snapshot() -> None:
    """Its reads may follow inserts streamed before Debezium paused: expected, they begin no second rebuild."""
    import pyarrow as pa

    from connector.collect.pieces import TablePiece, initial_load, piece_facts
    from connector.landing_zone.layout import TableRef
    from connector.publish.initial_load import check_initial_load, snapshot_read_in, snapshot_reset
    from connector.publish.ledger_state import TableState

    ops, snapshots = pa.array(["c", "r", "r"]), pa.array(["false", "first", "last"])
    facts = piece_facts(ops, pa.array([1, 2, 3], pa.int64()), pa.array([None] * 3, pa.string()))
    facts = type(facts)(events=facts.events, initial=initial_load(ops, snapshots))
    pieces = [TablePiece(TableRef("public", "logs"), (), pa.table({"id": [1, 1, 2]}), ("t", 0, 7), facts)]
    rebuilt = TableState(folder="public.schema/logs", keyless=True, snapshot_expected=True)
    check = check_initial_load(pieces, rebuilt)
    assert snapshot_reset("public.logs", check) is None and check.pass_ended
    assert snapshot_read_in(pieces)
    # Once the snapshot came, a later one is Debezium's own doing again: the table is rebuilt.
    later = check_initial_load(pieces, TableState(folder="public.schema/logs", keyless=True, initial_load_ended=True))
    assert snapshot_reset("public.logs", later) is not None
