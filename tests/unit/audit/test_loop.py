"""The audit never judges a table being rebuilt or refreshed (issue 55), and rounds never run back to back.

A real ``MirrorSink`` over local folders holds the ledger, the rebuild requests and the rebuilder; ``Debezium`` below
stands in for the signal channel and its notifications (as in ``tests/unit/publish/test_rebuild_snapshot_tracking``);
``Source`` and ``Mirror`` stand in for Postgres and Fabric's Delta table, with hooks that act while the audit reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from connector.audit.compare import AuditPacing, AuditRound, TableAudit
from connector.audit.finding import AuditFinding, AuditTarget, TableWithdrawn
from connector.audit.loop import AuditLoop, SinkRepairs, audit_targets, pause_after
from connector.audit.status import read_audit_status
from connector.config import ConnectorSettings, MirrorSettings, RebuildSettings, load_settings
from connector.config.audit import AuditSettings
from connector.landing_zone.layout import TableRef
from connector.operate import metrics
from connector.publish.batch_plan import BatchInput
from connector.publish.ledger_state import TableState
from connector.publish.lifecycle import Phase, SnapshotNotice
from connector.publish.rebuild import request_rebuild
from connector.sink import MirrorSink
from connector.storage.local import LocalStorage
from connector.storage.location import StorageLocation
from tests.support.debezium import Topic, field

TID = "public.items"
COLUMNS = [field("id", "int32", optional=False), field("name", "string")]
CHANGED = [field("id", "int32", optional=False), field("name", "int64")]
ROWS = {i: f"n{i}" for i in range(1, 21)}


class Debezium:
    """The snapshot signal with its notification channel: records signals, hands back queued notifications."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.queued: list[SnapshotNotice] = []

    def __call__(self, table_id: str, table: TableState) -> str:
        self.sent.append(f"s{len(self.sent) + 1}")
        return self.sent[-1]

    def stop(self, table_id: str, table: TableState) -> None:
        """No snapshot is in flight when these tests ask for one."""

    def collection(self, table: TableState) -> str:
        return TID

    def notices(self, table: TableState, since: float | None) -> list[SnapshotNotice] | None:
        out, self.queued = self.queued, []
        return out

    def complete(self, snapshot_id: str) -> None:
        self.queued += [
            SnapshotNotice(snapshot_id, "STARTED", collections=(TID,)),
            SnapshotNotice(snapshot_id, "TABLE_SCAN_COMPLETED", scanned=TID, status="SUCCEEDED"),
            SnapshotNotice(snapshot_id, "COMPLETED"),
        ]


class Source:
    """The source table; ``on_row(n)`` runs before the n-th row a key range read yields (1-based, per read)."""

    def __init__(self, rows: dict[int, str]) -> None:
        self.rows = dict(rows)
        self.yielded = 0
        self.on_row: Callable[[int], None] = lambda n: None

    def current_position(self) -> str:
        return "0"

    def captured_through(self, position: str) -> bool:
        return True

    def ranged_rows(
        self, table: TableRef, key_columns: list[str], after: Any, through: Any
    ) -> Iterator[dict[str, Any]]:
        keys = [
            k for k in sorted(self.rows) if (after is None or (k,) > after) and (through is None or (k,) <= through)
        ]
        for n, key in enumerate(keys, 1):
            self.on_row(n)
            self.yielded += 1
            yield {"id": key, "name": self.rows[key]}

    def columns(self, table: TableRef) -> list[str]:
        return ["id", "name"]

    def rows_by_keys(self, table: TableRef, key_columns: list[str], keys: Sequence[tuple[Any, ...]]) -> list[Any]:
        return [{"id": k[0], "name": self.rows[k[0]]} for k in keys if k[0] in self.rows]


class Mirror:
    def __init__(self, rows: dict[int, str]) -> None:
        self.rows = dict(rows)

    def read(self, table: TableRef, key_columns: Sequence[str]) -> pa.Table:
        return pa.table({"id": pa.array(list(self.rows), pa.int32()), "name": list(self.rows.values())})


class Rereads:
    """The keyed re-read signal (``KeyedSnapshotSignal``): records what the audit asked Debezium to read again."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, list[Any]]] = []

    def reread(self, topic: str, key_columns: Sequence[str], keys: Sequence[Any]) -> list[str]:
        self.asked.append((topic, list(keys)))
        return ["r1"]


class Stack:
    """The sink with ``public.items`` published, and an audit round over it as ``AuditLoop.round`` builds one."""

    def __init__(self, tmp_path: Path) -> None:
        self.debezium = Debezium()
        self.landing, self.checkpoint = LocalStorage(tmp_path / "lz"), LocalStorage(tmp_path / "cp")
        mirror = MirrorSettings(rebuild=RebuildSettings(wait_s=0))
        self.sink = MirrorSink(self.landing, self.checkpoint, mirror, snapshot_signal=self.debezium)
        self.topic = Topic("dbserver1.public.items", COLUMNS, ["id"])
        self.batch = 0
        self.publish([self.topic.record("c", None, {"id": k, "name": v}) for k, v in ROWS.items()])
        self.source, self.mirror = Source(ROWS), Mirror({})
        self.rereads = Rereads()
        self.repairs = SinkRepairs(self.sink, self.rereads)  # type: ignore[arg-type]
        self.settings = AuditSettings(max_rows_per_s=1e9, repair_threshold=5)
        self.on_settle: Callable[[], None] = lambda: None

    def publish(self, records: list[Any]) -> None:
        self.sink.process_batch(self.batch, records)
        self.batch += 1

    def round(self) -> list[AuditFinding]:
        audit = TableAudit(
            self.settings,
            self.source,  # type: ignore[arg-type]
            self.mirror,
            self.sink.landing,
            self._settle_for,
            pacing=AuditPacing(chunk_rows=4, pause=lambda s: None),
            withdrawn=self.sink.healing,
        )
        rounds = AuditRound(
            self.settings, audit.audit, self.repairs, checkpoint=self.checkpoint, withdrawn=self.sink.healing
        )
        return rounds.run(audit_targets(self.sink.state, [TID]))

    def _settle_for(self, reader: Any, target: AuditTarget) -> Callable[[str], bool]:
        def settle(position: str) -> bool:
            self.on_settle()
            return True

        return settle

    def differences_counted(self) -> float:
        return float(metrics.AUDIT_DIFFERENCES.labels(table=TID)._value.get())

    def requests(self) -> list[str]:
        return [i.path for i in self.checkpoint.list_dir("ledger/requests")]


def test_a_rebuild_the_audit_asked_for_keeps_the_table_out_until_it_completed(tmp_path: Path) -> None:
    """The observed fault: the next round, at once, still saw the table running and counted its deletion."""
    stack = Stack(tmp_path)
    first = stack.round()
    assert [f.repair for f in first] == ["rebuild"] and len(stack.requests()) == 1
    counted, status = stack.differences_counted(), read_audit_status(stack.checkpoint)[TID]

    # The next round before the sink took the request between batches: chosen as running, left out at its turn.
    assert [t.id for t in audit_targets(stack.sink.state, [TID])] == [TID]
    assert stack.sink.healing(TID) == "rebuild requested"
    assert stack.round() == []
    # The sink takes it: the folder is deleted, Fabric waited for, Debezium asked; each step is out of the audit.
    stack.sink.advance_rebuilds()
    assert stack.sink.state.tables[TID].lifecycle.phase is Phase.SNAPSHOT_REQUESTED and stack.requests() == []
    assert stack.sink.healing(TID) == "snapshot-requested, snapshot requested"
    stack.publish([stack.topic.record("r", None, {"id": k, "name": v}) for k, v in ROWS.items()])
    assert [t.id for t in audit_targets(stack.sink.state, [TID])] == []  # chosen no more at a round's start
    assert stack.round() == []
    assert stack.differences_counted() == counted and stack.rereads.asked == []
    assert read_audit_status(stack.checkpoint)[TID] == status  # no finding recorded meanwhile

    # Its snapshot completed: audited again, normally (clean once Fabric holds the rows).
    stack.debezium.complete(stack.debezium.sent[-1])
    stack.sink.advance_rebuilds()
    assert stack.sink.healing(TID) is None
    stack.mirror.rows = dict(ROWS)
    findings = stack.round()
    assert [f.clean for f in findings] == [True]
    assert read_audit_status(stack.checkpoint)[TID].last_clean_at is not None


def test_a_rebuild_command_during_the_comparison_stops_it_between_its_chunks(tmp_path: Path) -> None:
    """``rebuild``'s request lands while the first look reads the table: the read stops, nothing is judged."""
    stack = Stack(tmp_path)
    stack.mirror.rows = {**ROWS, 3: "tampered"}
    before = stack.differences_counted()

    def operator(n: int) -> None:  # ``python -m connector rebuild`` writes this request
        if n == 6:
            request_rebuild(stack.checkpoint, TID)

    stack.source.on_row = operator
    assert stack.round() == []
    assert stack.source.yielded < len(ROWS)  # asked again within the next chunk of 4 rows, not at the table's end
    assert stack.differences_counted() == before and stack.rereads.asked == [] and len(stack.requests()) == 1
    assert TID not in read_audit_status(stack.checkpoint)


def test_a_schema_change_rebuild_while_the_mirror_settles_leaves_the_table_out(tmp_path: Path) -> None:
    """A type change begins the table's rebuild in a batch published while the audit waits for the mirror."""
    stack = Stack(tmp_path)
    stack.mirror.rows = {**ROWS, 3: "tampered"}
    before = stack.differences_counted()

    def type_change() -> None:
        stack.topic.columns = CHANGED
        stack.publish([stack.topic.record("u", None, {"id": 3, "name": 7})])

    stack.on_settle = type_change
    assert stack.round() == []
    assert stack.sink.state.tables[TID].lifecycle.is_rebuilding
    assert stack.differences_counted() == before and stack.rereads.asked == [] and stack.requests() == []


def test_the_plan_being_published_counts_before_its_commit(tmp_path: Path) -> None:
    """Between a batch's written plan and its commit (published behind), its rebuild is already seen."""
    stack = Stack(tmp_path)
    stack.topic.columns = CHANGED
    other = Topic("dbserver1.public.orders", COLUMNS, ["id"])  # a file to publish: the plan is published behind
    records = [stack.topic.record("u", None, {"id": 3, "name": 7}), other.record("c", None, {"id": 1, "name": "o"})]
    with stack.sink.begin(stack.batch) as batch:
        assert stack.sink.healing(TID) is None
        batch.plan(BatchInput(records=records))
        batch.finish_later()
    assert stack.sink.state.tables[TID].lifecycle.phase is Phase.RUNNING  # committed: not yet
    assert stack.sink.healing(TID) == "deleting"
    with batch:
        batch.finish()
    assert stack.sink.healing(TID) == "deleting"


def test_a_withdrawn_table_raises_from_the_comparison_and_the_round_goes_on(tmp_path: Path) -> None:
    stack = Stack(tmp_path)
    audit = TableAudit(
        stack.settings,
        stack.source,  # type: ignore[arg-type]
        stack.mirror,
        stack.landing,
        lambda r, t: lambda p: True,
        withdrawn=lambda table: "refresh-pending",
    )
    target = audit_targets(stack.sink.state, [])[0]
    with pytest.raises(TableWithdrawn, match="refresh-pending"):
        audit.audit(target)
    assert stack.source.yielded == 0


def test_each_round_names_the_tables_it_leaves_out_while_they_are_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """No target at all (the table is being rebuilt): the round reads nothing and says why, every time."""
    stack = Stack(tmp_path)
    monkeypatch.setenv("AUDIT_TEST_SOURCE", "postgresql://nowhere.invalid/db")
    config = tmp_path / "c.yaml"
    config.write_text(
        "source:\n  bootstrap_servers: 127.0.0.1:9\n"
        f"landing_zone:\n  url: {tmp_path / 'lz'}\ncheckpoint: {tmp_path / 'cp'}\nmirror:\n  audit:\n"
        f"    enabled: true\n    source_url: ${{env:AUDIT_TEST_SOURCE}}\n    tables_path: {tmp_path / 'tables'}\n"
    )
    settings: ConnectorSettings = load_settings(str(config))
    loop = AuditLoop(settings, stack.sink, StorageLocation(str(tmp_path / "lz")))
    request_rebuild(stack.checkpoint, TID)
    stack.sink.advance_rebuilds()  # folder deleted, Debezium asked: not steady, no keys until its first read
    assert audit_targets(stack.sink.state, []) == []
    with caplog.at_level("INFO", logger="connector.audit.compare"):
        loop.round()
        loop.round()
    left_out = [r.getMessage() for r in caplog.records if "not judged" in r.getMessage()]
    assert left_out == [f"audit {TID}: not judged while its rebuild or refresh is requested or under way "
                        "(snapshot-requested, snapshot requested)"] * 2  # fmt: skip


@pytest.mark.parametrize(
    ("elapsed", "interval", "pause"),
    [(3.0, 10.0, 7.0), (0.0, 10.0, 10.0), (10.0, 10.0, 10.0), (25.0, 10.0, 10.0), (9.5, 2.0, 2.0)],
)
def test_a_round_that_overran_its_interval_is_followed_by_a_whole_interval(
    elapsed: float, interval: float, pause: float
) -> None:
    assert pause_after(elapsed, interval) == pytest.approx(pause)
