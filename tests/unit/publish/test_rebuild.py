"""Table rebuilds in the sink: the phases, their order, the wait for Fabric, crashes between phases.

The snapshot signal here is a recording function standing in for Debezium's Kafka signal channel (the
real channel and a real incremental snapshot are in tests/e2e/test_rebuild_e2e.py); Fabric's status is a
dict standing in for the status reader.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from connector.commands.tables import rebuild_command, table_lines, tables_command
from connector.config import MirrorSettings, RebuildSettings, SchemaChangeSettings
from connector.debezium_control.snapshot_signal import signal_target, signal_value
from connector.publish.ledger_state import TableState
from connector.publish.lifecycle import Lifecycle, Phase
from connector.publish.rebuild import RebuildError, TableRebuilder, pending_requests
from connector.sink import MirrorSink
from connector.storage.local import LocalStorage
from tests.support.debezium import Topic, field

DELETING, WAITING, SNAPSHOT_REQUESTED = Phase.DELETING, Phase.WAITING, Phase.SNAPSHOT_REQUESTED
COLUMNS = [field("id", "int32", optional=False), field("name", "string")]
CHANGED = [field("id", "int32", optional=False), field("name", "int64")]
CUSTOMERS = "public.customers"


class Signals:
    """Records the snapshot requests; can be told to fail (the broker unreachable)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str | None]] = []
        self.fail = False

    def __call__(self, table_id: str, table: TableState) -> str:
        if self.fail:
            msg = "signal topic unreachable"
            raise RebuildError(msg)
        self.sent.append((table_id, table.topic))
        return f"signal-{len(self.sent)}"


class Fabric:
    """Fabric's table list as a status reader would give it (``None``: unreadable)."""

    def __init__(self, tables: dict[str, Any] | None) -> None:
        self.tables = tables

    def __call__(self) -> dict[str, Any] | None:
        return self.tables


def make_sink(
    tmp_path: Path, signals: Signals, fabric: Fabric | None = None, **mirror: Any
) -> tuple[MirrorSink, LocalStorage, LocalStorage]:
    landing = LocalStorage(tmp_path / "lz")
    checkpoint = LocalStorage(tmp_path / "cp")
    mirror.setdefault("rebuild", RebuildSettings(wait_s=0))
    # These tests stop a table with a type change: left to on_table_stopped, as before type changes rebuilt.
    mirror.setdefault("schema_changes", SchemaChangeSettings(type_changed="stop"))
    sink = MirrorSink(landing, checkpoint, MirrorSettings(**mirror), snapshot_signal=signals, fabric_tables=fabric)
    return sink, landing, checkpoint


def files(landing: LocalStorage, folder: str = "public.schema/customers") -> list[str]:
    return sorted(i.path.rsplit("/", 1)[-1] for i in landing.list_dir(folder) if not i.is_dir)


def stop_customers(sink: MirrorSink, t: Topic, other: Topic) -> None:
    """Batch 0 publishes a row; batch 1 changes a column's type, which stops the table."""
    sink.process_batch(
        0, [t.record("c", None, {"id": 1, "name": "a"}), other.record("c", None, {"id": 9, "name": "o"})]
    )
    t.columns = CHANGED
    result = sink.process_batch(1, [t.record("c", None, {"id": 2, "name": 5}), other.record("c", None, {"id": 10})])
    assert "changed type" in result.stopped[CUSTOMERS]


def test_automatic_rebuild_after_a_type_change_recreates_the_table_from_file_one(tmp_path: Path) -> None:
    signals = Signals()
    sink, landing, _ = make_sink(tmp_path, signals, on_table_stopped="rebuild")
    t, other = Topic("dbserver1.public.customers", COLUMNS, ["id"]), Topic("dbserver1.public.orders", COLUMNS, ["id"])
    stop_customers(sink, t, other)
    table = sink.state.tables[CUSTOMERS]
    assert table.lifecycle.phase == DELETING and table.lifecycle.automatic_rebuilds == 1
    assert sink.stopped_tables == {} and sink.rebuilding_tables == {CUSTOMERS: DELETING}
    assert files(landing)  # deleted only at the next batch, under the same fence

    # The next batch deletes the folder, asks Debezium for a snapshot and publishes the table from file 1.
    result = sink.process_batch(2, [t.record("r", None, {"id": 2, "name": 5}), other.record("c", None, {"id": 11})])
    assert signals.sent == [(CUSTOMERS, "dbserver1.public.customers")]
    assert result.stopped == {}
    assert files(landing) == ["00000000000000000001.parquet", "_metadata.json"]
    rebuilt = sink.state.tables[CUSTOMERS]
    assert (
        rebuilt.lifecycle.phase == SNAPSHOT_REQUESTED
        and rebuilt.lifecycle.stop_reason is None
        and rebuilt.next_number == 2
    )
    assert rebuilt.arrow_schema().field("name").type.bit_width == 64  # type: ignore[union-attr]
    # The other table never stopped and kept its numbering.
    assert sink.state.tables["public.orders"].lifecycle.stop_reason is None
    assert files(landing, "public.schema/orders")[:3] == [f"0000000000000000000{i}.parquet" for i in (1, 2, 3)]


def test_a_rebuild_waits_until_fabric_no_longer_lists_the_table(tmp_path: Path) -> None:
    signals, fabric = Signals(), Fabric({CUSTOMERS: "Replicating"})
    sink, landing, _ = make_sink(tmp_path, signals, fabric, on_table_stopped="rebuild")
    t, other = Topic("dbserver1.public.customers", COLUMNS, ["id"]), Topic("dbserver1.public.orders", COLUMNS, ["id"])
    stop_customers(sink, t, other)
    sink.advance_rebuilds()
    assert sink.state.tables[CUSTOMERS].lifecycle.phase == WAITING
    assert not landing.exists("public.schema/customers/_metadata.json")
    # Events of the table are skipped while Fabric still has it.
    result = sink.process_batch(2, [t.record("c", None, {"id": 3, "name": 7})])
    assert result.skipped.by_kind.get("table_stopped") == 1 and signals.sent == []
    fabric.tables = {}
    sink.advance_rebuilds()
    assert signals.sent == [(CUSTOMERS, "dbserver1.public.customers")]
    assert sink.state.tables[CUSTOMERS].lifecycle.phase == SNAPSHOT_REQUESTED


def test_without_a_readable_fabric_status_a_rebuild_waits_the_configured_delay(tmp_path: Path) -> None:
    now = [1000.0]
    landing, checkpoint = LocalStorage(tmp_path / "lz"), LocalStorage(tmp_path / "cp")
    signals = Signals()
    mirror = MirrorSettings(rebuild=RebuildSettings(wait_s=60))
    rebuilder = TableRebuilder(
        landing, checkpoint, mirror, signal=signals, fabric_tables=Fabric(None), clock=lambda: now[0]
    )
    from connector.publish.ledger_state import LedgerState

    state = LedgerState(
        tables={
            CUSTOMERS: TableState("public.schema/customers", topic="p.public.customers", lifecycle=Lifecycle(DELETING))
        }
    )
    state = rebuilder.advance(state)
    assert state.tables[CUSTOMERS].lifecycle.phase == WAITING and state.tables[CUSTOMERS].lifecycle.since == 1000.0
    now[0] = 1059.0
    assert rebuilder.advance(state) is state and signals.sent == []
    now[0] = 1060.0
    assert rebuilder.advance(state).tables[CUSTOMERS].lifecycle.phase == SNAPSHOT_REQUESTED


def test_a_manual_rebuild_survives_restarts_between_its_phases(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    signals = Signals()
    sink, landing, checkpoint = make_sink(tmp_path, signals)
    t, other = Topic("dbserver1.public.customers", COLUMNS, ["id"]), Topic("dbserver1.public.orders", COLUMNS, ["id"])
    stop_customers(sink, t, other)
    assert sink.stopped_tables.keys() == {CUSTOMERS}  # on_table_stopped: stay

    assert rebuild_command(checkpoint, CUSTOMERS) == 0
    assert len(pending_requests(checkpoint)) == 1
    signals.fail = True  # the signal cannot be sent: the rebuild waits, the folder is gone already
    sink.advance_rebuilds()
    assert sink.state.tables[CUSTOMERS].lifecycle.phase == WAITING and not files(landing)
    assert pending_requests(checkpoint) == []

    # A restart (kill -9: a new sink on the same ledger) goes on where the rebuild stood.
    signals.fail = False
    restarted, _, _ = make_sink(tmp_path, signals)
    restarted.process_batch(2, [t.record("r", None, {"id": 1, "name": 4}), t.record("r", None, {"id": 2, "name": 5})])
    assert signals.sent == [(CUSTOMERS, "dbserver1.public.customers")]
    assert files(landing) == ["00000000000000000001.parquet", "_metadata.json"]
    assert restarted.stopped_tables == {}
    capsys.readouterr()
    assert tables_command(checkpoint, as_json=False) == 0
    out = capsys.readouterr().out
    assert "public.customers  state=running  last_file=1  files=1  rows=2" in out and "rebuilt" in out


def test_a_request_served_before_a_crash_is_not_served_twice(tmp_path: Path) -> None:
    signals = Signals()
    sink, landing, checkpoint = make_sink(tmp_path, signals, rebuild=RebuildSettings(wait_s=3600))
    t, other = Topic("dbserver1.public.customers", COLUMNS, ["id"]), Topic("dbserver1.public.orders", COLUMNS, ["id"])
    stop_customers(sink, t, other)
    rebuild_command(checkpoint, CUSTOMERS)
    path, request = pending_requests(checkpoint)[0]
    data = checkpoint.read_bytes(path)
    sink.advance_rebuilds()
    at = sink.state.tables[CUSTOMERS].lifecycle.since
    checkpoint.replace(path, data)  # the crash came after the commit, before the request file was removed
    restarted, _, _ = make_sink(tmp_path, signals, rebuild=RebuildSettings(wait_s=3600))
    restarted.advance_rebuilds()
    table = restarted.state.tables[CUSTOMERS]
    assert table.lifecycle.phase == WAITING and table.lifecycle.since == at and table.lifecycle.request == request.id


def test_automatic_rebuilds_give_up_after_the_configured_count(tmp_path: Path) -> None:
    signals = Signals()
    sink, _, _ = make_sink(
        tmp_path, signals, on_table_stopped="rebuild", rebuild=RebuildSettings(wait_s=0, max_automatic=1)
    )
    t, other = Topic("dbserver1.public.customers", COLUMNS, ["id"]), Topic("dbserver1.public.orders", COLUMNS, ["id"])
    stop_customers(sink, t, other)
    sink.process_batch(2, [t.record("r", None, {"id": 2, "name": 5})])  # rebuilt with name int64
    t.columns = COLUMNS
    result = sink.process_batch(3, [t.record("u", None, {"id": 2, "name": "x"})])
    assert CUSTOMERS in result.stopped
    assert "not rebuilt automatically" in sink.stopped_tables[CUSTOMERS]
    assert sink.rebuilding_tables == {}


def test_rebuild_of_an_unknown_table_names_the_known_ones(tmp_path: Path) -> None:
    signals = Signals()
    sink, _, checkpoint = make_sink(tmp_path, signals)
    sink.process_batch(0, [Topic("dbserver1.public.customers", COLUMNS, ["id"]).record("c", None, {"id": 1})])
    from connector.errors import ConfigError

    with pytest.raises(ConfigError, match=r"no table public\.nope .*tables: public\.customers"):
        rebuild_command(checkpoint, "public.nope")


def test_tables_lines_carry_fabric_state_when_readable(tmp_path: Path) -> None:
    signals = Signals()
    sink, _, _ = make_sink(tmp_path, signals)
    sink.process_batch(0, [Topic("dbserver1.public.customers", COLUMNS, ["id"]).record("c", None, {"id": 1})])

    class Status:
        state = "Replicating"
        processed_rows = 1

    line = table_lines(sink.state, {CUSTOMERS: Status()})[0]
    assert (line.state, line.files, line.rows, line.fabric_state, line.fabric_rows) == (
        "running",
        1,
        1,
        "Replicating",
        1,
    )
    assert table_lines(sink.state, {})[0].fabric_state == "absent"
    assert table_lines(sink.state)[0].fabric_state is None


@pytest.mark.parametrize(
    ("topic", "expected"),
    [
        ("dbserver1.public.customers", ("dbserver1-signal", "dbserver1", "public.customers")),
        ("mariadb1.shop.orders", ("mariadb1-signal", "mariadb1", "shop.orders")),
        ("sql1.testDB.dbo.customers", ("sql1-signal", "sql1", "testDB.dbo.customers")),
    ],
)
def test_signal_target_per_source(topic: str, expected: tuple[str, str, str]) -> None:
    assert signal_target(topic, RebuildSettings()) == expected


def test_signal_target_with_a_dotted_prefix_and_an_explicit_topic() -> None:
    settings = RebuildSettings(topic_prefix="prod.pg", signal_topic="signals")
    assert signal_target("prod.pg.public.t", settings) == ("signals", "prod.pg", "public.t")
    with pytest.raises(RebuildError, match="does not start with"):
        signal_target("other.public.t", settings)


def test_signal_value_is_debeziums_execute_snapshot() -> None:
    import orjson

    assert orjson.loads(signal_value("public.t")) == {
        "type": "execute-snapshot",
        "data": {"data-collections": ["public\\.t"], "type": "incremental"},
    }
    # Data collections are regular expressions to Debezium: a name is sent as exactly itself.
    import re

    (pattern,) = orjson.loads(signal_value("shop.order$items"))["data"]["data-collections"]
    assert re.fullmatch(pattern, "shop.order$items") and not re.fullmatch(pattern, "shopXorder$items")


@pytest.mark.parametrize("lane", [False, True])
def test_a_rebuilt_table_writes_creates_and_reads_as_upserts_even_without_replay_safe_inserts(
    tmp_path: Path, lane: bool
) -> None:
    """The incremental snapshot's read of a row may follow a streamed create of it: an insert would duplicate it."""
    from tests.unit.collect.test_lane import as_arrow

    signals = Signals()
    sink, landing, _ = make_sink(tmp_path, signals, on_table_stopped="rebuild", replay_safe_inserts=False)
    t, other = Topic("dbserver1.public.customers", COLUMNS, ["id"]), Topic("dbserver1.public.orders", COLUMNS, ["id"])
    stop_customers(sink, t, other)
    records = [
        t.record("c", None, {"id": 3, "name": 6}),
        t.record("r", None, {"id": 3, "name": 6}, snapshot="incremental"),
    ]
    others = [other.record("c", None, {"id": 12, "name": "x"})]
    if lane:
        sink.process_table(2, as_arrow(records + others))
    else:
        sink.process_batch(2, records + others)
    from connector.readback.landing_reader import read_data_file

    rebuilt = read_data_file(landing, "public.schema/customers/00000000000000000001.parquet")
    assert rebuilt.column("__rowMarker__").to_pylist() == [4, 4]
    orders = read_data_file(landing, "public.schema/orders/00000000000000000003.parquet")
    assert orders.column("__rowMarker__").to_pylist() == [0]


def test_a_rebuild_waits_on_fabrics_rest_status_and_falls_back_to_the_delay_when_it_fails(tmp_path: Path) -> None:
    """Through the real REST reader, against the Fabric REST API test double (Fabric cannot run here)."""
    from connector.fabric.status_rest import RestFabricStatus
    from tests.support.fabric_api_double import MIRRORED_DATABASE_ID, TOKEN, WORKSPACE_ID, FabricApiDouble

    with FabricApiDouble() as fabric:
        fabric.set_table("public", "customers", "Replicating", processed_rows=1)
        fabric.set_table("public", "orders", "Replicating", processed_rows=1)
        reader = RestFabricStatus(fabric.api_url, WORKSPACE_ID, MIRRORED_DATABASE_ID, lambda: TOKEN)
        signals = Signals()
        sink, _, checkpoint = make_sink(
            tmp_path, signals, reader.tables, on_table_stopped="rebuild", rebuild=RebuildSettings(wait_s=3600)
        )
        t = Topic("dbserver1.public.customers", COLUMNS, ["id"])
        other = Topic("dbserver1.public.orders", COLUMNS, ["id"])
        stop_customers(sink, t, other)
        sink.advance_rebuilds()
        sink.advance_rebuilds()
        assert sink.state.tables[CUSTOMERS].lifecycle.phase == WAITING and signals.sent == []
        # `tables` shows Fabric's view beside ours.
        line = next(x for x in table_lines(sink.state, reader.tables()) if x.table == CUSTOMERS)
        assert (line.state, line.fabric_state) == ("rebuilding:waiting-for-fabric", "Replicating")
        fabric.remove_table("public", "customers")  # Fabric dropped the table after its folder went
        sink.advance_rebuilds()
        assert signals.sent == [(CUSTOMERS, "dbserver1.public.customers")]

        # Unreadable status (the API fails): the rebuild waits mirror.rebuild.wait_s after the deletion instead.
        fabric.unavailable_status = 503
        sink.process_batch(3, [t.record("r", None, {"id": 2, "name": 5})])  # the rebuilt table: name is int64
        t.columns = COLUMNS
        result = sink.process_batch(4, [t.record("u", None, {"id": 2, "name": "back to text"})])
        assert "changed type" in result.stopped[CUSTOMERS]
        sink.advance_rebuilds()
        assert sink.state.tables[CUSTOMERS].lifecycle.phase == WAITING and len(signals.sent) == 1


def test_a_signal_that_keeps_failing_is_logged_once_per_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    signals = Signals()
    sink, _, _ = make_sink(tmp_path, signals, on_table_stopped="rebuild")
    t, other = Topic("dbserver1.public.customers", COLUMNS, ["id"]), Topic("dbserver1.public.orders", COLUMNS, ["id"])
    stop_customers(sink, t, other)
    signals.fail = True
    with caplog.at_level(logging.ERROR, logger="connector.publish.rebuild"):
        for _ in range(5):
            sink.advance_rebuilds()
    assert [r.getMessage() for r in caplog.records if "rebuild waits" in r.getMessage()] == [
        "table public.customers: rebuild waits: signal topic unreachable"
    ]
    signals.fail = False
    sink.advance_rebuilds()
    assert sink.state.tables[CUSTOMERS].lifecycle.phase == SNAPSHOT_REQUESTED


def test_signal_value_for_a_keyless_table_asks_for_a_blocking_snapshot() -> None:
    """An incremental snapshot reads in chunks by primary key, and Debezium skips a table without one."""
    import orjson

    assert orjson.loads(signal_value("public.t", "s1", snapshot="blocking"))["data"]["type"] == "blocking"


def keyless_records(t: Topic, *rows: tuple[str, dict[str, Any]], snapshot: str | None = None) -> list[Any]:
    from connector.events import KafkaRecord

    made = [t.record(op, row if op == "u" else None, row, snapshot=snapshot) for op, row in rows]
    return [KafkaRecord(r.topic, r.partition, r.offset, None, r.value) for r in made]


def test_an_update_of_a_keyless_table_rebuilds_it_by_a_blocking_snapshot_and_no_other_table_pauses(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[bool] = []

    class KeylessSignals(Signals):
        def __call__(self, table_id: str, table: TableState) -> str:
            seen.append(table.keyless)
            return super().__call__(table_id, table)

    sink, landing, _ = make_sink(tmp_path, KeylessSignals())
    logs, other = Topic("dbserver1.public.logs", COLUMNS, []), Topic("dbserver1.public.orders", COLUMNS, ["id"])
    row = {"id": 1, "name": "a"}
    sink.process_batch(0, keyless_records(logs, ("c", row), ("c", row)))
    assert sink.state.tables["public.logs"].keyless
    with caplog.at_level("WARNING"):
        result = sink.process_batch(
            1, [*keyless_records(logs, ("u", {"id": 1, "name": "b"})), other.record("c", None, {"id": 9, "name": "o"})]
        )
    assert result.resets == {"public.logs": "keyless_change"} and result.stopped == {}
    lines = [r.getMessage() for r in caplog.records if "public.logs" in r.getMessage()]
    assert len(lines) == 1 and "dbserver1.public.logs[0]@2: an update of table public.logs" in lines[0], lines
    assert files(landing, "public.schema/orders") == ["00000000000000000001.parquet", "_metadata.json"]

    sink.advance_rebuilds()  # folder deleted, Fabric waited for (wait_s 0), the blocking snapshot asked for
    sink.advance_rebuilds()
    assert seen == [True]
    rebuilt = sink.state.tables["public.logs"]
    assert rebuilt.keyless and rebuilt.snapshot_expected and not rebuilt.initial_load_ended
    # Changes streamed before Debezium paused for the snapshot: its reads hold what they did. Skipped, not a second
    # rebuild (the update) nor a row twice (the insert).
    stale = keyless_records(logs, ("u", {"id": 1, "name": "b"}), ("c", row))
    result = sink.process_batch(2, stale)
    assert result.resets == {} and result.stopped == {} and result.skipped.by_kind == {"before_snapshot": 2}
    assert sink.state.tables["public.logs"].snapshot_expected
    # Skipping its events, the table does not read as running.
    assert next(x for x in table_lines(sink.state) if x.table == "public.logs").state == "rebuilding:blocking-snapshot"
    # More of them, then the snapshot's reads, then a change streamed after it: the reads and that change.
    batch = keyless_records(logs, ("c", row))
    batch += keyless_records(logs, ("r", row), ("r", {"id": 1, "name": "b"}), snapshot="first")
    batch += keyless_records(logs, ("c", {"id": 2, "name": "after"}))
    result = sink.process_batch(3, batch)
    assert result.resets == {} and result.stopped == {} and result.skipped.by_kind == {"before_snapshot": 1}
    assert not sink.state.tables["public.logs"].snapshot_expected
    assert next(x for x in table_lines(sink.state) if x.table == "public.logs").state == "running"
    from connector.readback.landing_reader import read_data_file

    published = read_data_file(landing, "public.schema/logs/00000000000000000001.parquet")
    assert "__rowMarker__" not in published.column_names
    assert published.column("name").to_pylist() == ["a", "b", "after"]
    assert landing.read_bytes("public.schema/logs/_metadata.json").strip() == b"{}"


def test_a_keyless_table_empty_at_its_blocking_snapshot_keeps_what_debezium_streamed_after_it_was_asked(
    tmp_path: Path,
) -> None:
    """A blocking snapshot of an empty table has no read: events Debezium processed after the snapshot was asked
    for are published, never left waiting for a read that does not come; those processed before are skipped."""
    from connector.events import KafkaRecord
    from connector.readback.landing_reader import read_data_file

    sink, landing, _ = make_sink(tmp_path, Signals())
    logs = Topic("dbserver1.public.logs", COLUMNS, [])

    def records(*rows: tuple[str, dict[str, Any]], ts_ms: int) -> list[KafkaRecord]:
        made = [
            logs.record(op, row if op == "d" else None, None if op == "d" else row, ts_ms=ts_ms) for op, row in rows
        ]
        return [KafkaRecord(r.topic, r.partition, r.offset, None, r.value) for r in made]

    sink.process_batch(0, records(("c", {"id": 1, "name": "a"}), ts_ms=1_700_000_000_000))
    sink.process_batch(1, records(("d", {"id": 1, "name": "a"}), ts_ms=1_700_000_000_001))  # the table is empty
    sink.advance_rebuilds()
    sink.advance_rebuilds()
    rebuilt = sink.state.tables["public.logs"]
    assert rebuilt.snapshot_expected and rebuilt.lifecycle.phase is Phase.SNAPSHOT_REQUESTED
    asked_ms = int((rebuilt.lifecycle.since or 0) * 1000)
    # An insert Debezium streamed before the snapshot was asked for: skipped. One streamed after: published.
    batch = records(("c", {"id": 1, "name": "a"}), ts_ms=asked_ms - 1)
    batch += records(("c", {"id": 2, "name": "later"}), ts_ms=asked_ms + 1_000)
    result = sink.process_batch(2, batch)
    assert result.resets == {} and result.skipped.by_kind == {"before_snapshot": 1}
    published = read_data_file(landing, "public.schema/logs/00000000000000000001.parquet")
    assert published.column("name").to_pylist() == ["later"]
    assert next(x for x in table_lines(sink.state) if x.table == "public.logs").state == "running"


def test_a_keyless_table_is_rebuilt_where_a_keyed_one_is_refreshed(tmp_path: Path) -> None:
    """A refresh re-reads rows into the folder: without a key to upsert by, they would be there twice."""
    sink, _, _ = make_sink(tmp_path, Signals())
    logs = Topic("dbserver1.public.logs", COLUMNS, [])
    sink.process_batch(0, keyless_records(logs, ("c", {"id": 1, "name": "a"})))
    table = sink.state.tables["public.logs"]
    refreshing = table.lifecycle.begin_refresh("a column added with a default", now=1.0)
    rebuilder = TableRebuilder(sink.landing, sink.ledger.storage, sink.mirror, signal=Signals())
    state = rebuilder.advance(replace(sink.state, tables={"public.logs": replace(table, lifecycle=refreshing)}))
    assert state.tables["public.logs"].lifecycle.phase in (WAITING, SNAPSHOT_REQUESTED)
    assert "a keyless table is rebuilt, not refreshed" in (state.tables["public.logs"].lifecycle.reason or "")
