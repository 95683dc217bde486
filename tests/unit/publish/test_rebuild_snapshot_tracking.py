"""The rebuilder follows the snapshot it asked for through Debezium's notifications (issue 42, point 3).

``Debezium`` below stands in for the signal channel and the notification topic: it records the signals sent
(execute-snapshot with their ids, stop-snapshot) and hands back the notifications a test queues, in the JSON shape
Debezium's sink channel writes (decoded by the real ``decode_notice``).
"""

from __future__ import annotations

from pathlib import Path

import orjson

from connector.config import MirrorSettings, RebuildSettings
from connector.debezium_control.snapshot_notifications import decode_notice
from connector.operate.table_status import table_lines
from connector.publish.ledger_state import LedgerState, TableState
from connector.publish.lifecycle import Lifecycle, Phase, SnapshotNotice, SnapshotState
from connector.publish.rebuild import TableRebuilder
from connector.storage import LocalStorage

TID = "public.orders"
COLLECTION = "public.orders"


class Debezium:
    def __init__(self, *, channel: bool = True) -> None:
        self.signals: list[tuple[str, str]] = []  # (kind, id)
        self.queued: list[bytes] = []
        self.channel = channel

    def __call__(self, table_id: str, table: TableState) -> str:
        signal_id = f"s{sum(kind == 'execute-snapshot' for kind, _ in self.signals) + 1}"
        self.signals.append(("execute-snapshot", signal_id))
        return signal_id

    def stop(self, table_id: str, table: TableState) -> None:
        self.signals.append(("stop-snapshot", "-"))

    def collection(self, table: TableState) -> str:
        return COLLECTION

    def notices(self, table: TableState, since: float | None) -> list[SnapshotNotice] | None:
        if not self.channel:
            return None
        out = [n for raw in self.queued if (n := decode_notice(raw, "n[0]@0")) is not None]
        self.queued.clear()
        return out

    def say(self, kind: str, snapshot_id: str, **data: str) -> None:
        """Queue a notification as Debezium's JsonConverter (schemas enabled) writes it."""
        payload = {
            "id": snapshot_id,
            "aggregate_type": "Incremental Snapshot",
            "type": kind,
            "additional_data": {"connector_name": "dbserver1", **data},
            "timestamp": 1,
        }
        self.queued.append(orjson.dumps({"schema": {"type": "struct"}, "payload": payload}))

    def complete(self, snapshot_id: str) -> None:
        self.say("STARTED", snapshot_id, data_collections=COLLECTION)
        self.say("IN_PROGRESS", snapshot_id, current_collection_in_progress=COLLECTION, last_processed_key="100")
        self.say("TABLE_SCAN_COMPLETED", snapshot_id, scanned_collection=COLLECTION, status="SUCCEEDED")
        self.say("COMPLETED", snapshot_id)


def rebuilder(tmp_path: Path, debezium: Debezium, now: list[float], **rebuild: float) -> TableRebuilder:
    mirror = MirrorSettings(rebuild=RebuildSettings(wait_s=0, snapshot_timeout_s=60, snapshot_attempts=2, **rebuild))
    landing, checkpoint = LocalStorage(tmp_path / "lz"), LocalStorage(tmp_path / "cp")
    return TableRebuilder(landing, checkpoint, mirror, signal=debezium, clock=lambda: now[0])


def ledger(lifecycle: Lifecycle) -> LedgerState:
    table = TableState("public.schema/orders", topic="dbserver1.public.orders", lifecycle=lifecycle)
    return LedgerState(tables={TID: table})


def phase(state: LedgerState) -> Lifecycle:
    return state.tables[TID].lifecycle


def test_a_rebuild_ends_when_its_own_snapshot_completed_and_tables_shows_the_progress(tmp_path: Path) -> None:
    debezium, now = Debezium(), [100.0]
    rebuilds = rebuilder(tmp_path, debezium, now)
    state = rebuilds.advance(ledger(Lifecycle().begin_rebuild("column dropped", now=99.0)))
    assert phase(state).phase is Phase.SNAPSHOT_REQUESTED and debezium.signals == [("execute-snapshot", "s1")]
    # Another snapshot's notifications (an operator's) do not touch it.
    debezium.complete("operator-1")
    state = rebuilds.advance(state)
    assert phase(state).word == "rebuilding:snapshot"
    debezium.say("STARTED", "s1", data_collections=COLLECTION)
    debezium.say(
        "IN_PROGRESS", "s1", current_collection_in_progress=COLLECTION, last_processed_key="1200", maximum_key="3000"
    )
    now[0] = 110.0
    state = rebuilds.advance(state)
    line = table_lines(state)[0]
    assert line.state == "rebuilding:snapshot" and line.snapshot is not None
    assert line.snapshot.startswith("started:") and "chunks=1,last_key=1200/3000,attempt=1" in line.snapshot
    assert "snapshot=started:" in line.text()
    debezium.say("TABLE_SCAN_COMPLETED", "s1", scanned_collection=COLLECTION, status="SUCCEEDED")
    debezium.say("COMPLETED", "s1")
    state = rebuilds.advance(state)
    assert phase(state).phase is Phase.RUNNING and table_lines(state)[0].state == "running"
    assert table_lines(state)[0].snapshot is None


def test_a_second_request_stops_the_snapshot_in_flight_then_asks_again(tmp_path: Path) -> None:
    debezium, now = Debezium(), [100.0]
    rebuilds = rebuilder(tmp_path, debezium, now)
    state = rebuilds.advance(ledger(Lifecycle().begin_refresh("column added", now=99.0)))
    debezium.say("IN_PROGRESS", "s1", current_collection_in_progress=COLLECTION)
    state = rebuilds.advance(state)
    assert phase(state).word == "refreshing"
    # A column dropped while the refresh's snapshot reads the table: the rebuild stops it first.
    begun = phase(state).begin_rebuild("column dropped", now=101.0)
    state = rebuilds.advance(
        LedgerState(tables={TID: TableState("public.schema/orders", topic="dbserver1.public.orders", lifecycle=begun)})
    )
    assert debezium.signals == [("execute-snapshot", "s1"), ("stop-snapshot", "-")]
    assert phase(state).phase is Phase.WAITING and phase(state).snapshot.state is SnapshotState.STOPPING  # type: ignore[union-attr]
    state = rebuilds.advance(state)
    assert len(debezium.signals) == 2  # no new request before the old snapshot's ABORTED
    debezium.say("ABORTED", "s1", data_collections=COLLECTION)
    state = rebuilds.advance(state)
    assert debezium.signals[-1] == ("execute-snapshot", "s2") and phase(state).phase is Phase.SNAPSHOT_REQUESTED
    # The old snapshot's COMPLETED would not end the new rebuild; the new one's does.
    debezium.say("COMPLETED", "s1")
    state = rebuilds.advance(state)
    assert phase(state).phase is Phase.SNAPSHOT_REQUESTED
    debezium.complete("s2")
    assert phase(rebuilds.advance(state)).phase is Phase.RUNNING


def test_a_snapshot_that_never_starts_is_stopped_and_asked_again_then_the_table_stops(tmp_path: Path) -> None:
    debezium, now = Debezium(), [100.0]
    rebuilds = rebuilder(tmp_path, debezium, now)
    state = rebuilds.advance(ledger(Lifecycle().begin_rebuild("column dropped", now=99.0)))
    now[0] = 160.0
    assert rebuilds.advance(state) is state  # not stalled yet: 60 s is the limit
    now[0] = 161.0
    state = rebuilds.advance(state)
    assert debezium.signals[-1] == ("stop-snapshot", "-")
    now[0] = 222.0  # no ABORTED (Debezium ignores a stop of nothing): asked again after the timeout
    state = rebuilds.advance(state)
    track = phase(state).snapshot
    assert debezium.signals[-1] == ("execute-snapshot", "s2") and track is not None and track.attempts == 2
    # An abort of the second (last allowed) attempt stops the table with one line.
    debezium.say("ABORTED", "s2")
    state = rebuilds.advance(state)
    stopped = phase(state)
    assert stopped.phase is Phase.STOPPED and table_lines(state)[0].state == "stopped"
    assert "did not complete in 2 attempt(s)" in (stopped.stop_reason or "")


def test_an_aborted_snapshot_is_asked_for_again(tmp_path: Path) -> None:
    debezium, now = Debezium(), [100.0]
    rebuilds = rebuilder(tmp_path, debezium, now)
    state = rebuilds.advance(ledger(Lifecycle().begin_rebuild("column dropped", now=99.0)))
    debezium.say("STARTED", "s1", data_collections=COLLECTION)
    debezium.say("ABORTED", "s1")
    state = rebuilds.advance(state)
    assert debezium.signals[-1] == ("execute-snapshot", "s2") and phase(state).phase is Phase.SNAPSHOT_REQUESTED
    debezium.complete("s2")
    assert phase(rebuilds.advance(state)).phase is Phase.RUNNING


def test_a_snapshot_renamed_by_a_later_request_still_ends_its_rebuild(tmp_path: Path) -> None:
    """Debezium gives a running snapshot the id of the last signal it took in (another table's, here)."""
    debezium, now = Debezium(), [100.0]
    rebuilds = rebuilder(tmp_path, debezium, now)
    state = rebuilds.advance(ledger(Lifecycle().begin_rebuild("column dropped", now=99.0)))
    later = Lifecycle().begin_refresh("column added", now=100.0)
    other = TableState("public.schema/items", topic="dbserver1.public.items", lifecycle=later)
    now[0] = 101.0
    state = rebuilds.advance(LedgerState(tables={**state.tables, "public.items": other}))
    assert debezium.signals[-1] == ("execute-snapshot", "s2")
    debezium.say("TABLE_SCAN_COMPLETED", "s2", scanned_collection=COLLECTION, status="SUCCEEDED")
    debezium.say("COMPLETED", "s2")
    assert phase(rebuilds.advance(state)).phase is Phase.RUNNING


def test_without_a_notification_channel_the_rebuild_is_untracked_as_before(tmp_path: Path) -> None:
    debezium, now = Debezium(channel=False), [100.0]
    rebuilds = rebuilder(tmp_path, debezium, now)
    state = rebuilds.advance(ledger(Lifecycle().begin_rebuild("column dropped", now=99.0)))
    assert phase(state).phase is Phase.SNAPSHOT_REQUESTED and phase(state).snapshot is None
    assert phase(state).word == "running"
    now[0] = 10_000.0
    assert rebuilds.advance(state) is state  # nothing stalls: nothing is tracked


def test_decode_notice_keeps_incremental_snapshot_notifications_only() -> None:
    initial = {"id": "x", "aggregate_type": "Initial Snapshot", "type": "COMPLETED", "additional_data": {}}
    assert decode_notice(orjson.dumps(initial)) is None
    assert decode_notice(b"not json") is None and decode_notice(None) is None
    plain = {
        "id": "s9",
        "aggregate_type": "Incremental Snapshot",
        "type": "ABORTED",
        "additional_data": {"data_collections": "public.a, public.b"},
    }
    notice = decode_notice(orjson.dumps(plain), "t[0]@5")
    assert notice is not None and notice.collections == ("public.a", "public.b") and notice.where == "t[0]@5"
