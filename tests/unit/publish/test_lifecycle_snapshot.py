"""The lifecycle's tracking of the snapshot it asked for: started, chunks, completed, aborted, stopped."""

from __future__ import annotations

import orjson

from connector.publish.lifecycle import Lifecycle, Phase, SnapshotNotice, SnapshotState, SnapshotTrack

COLLECTION = "public.orders"


def requested(snapshot_id: str = "s1", *, refresh: bool = False) -> Lifecycle:
    before = Lifecycle().begin_refresh("column added", now=1.0) if refresh else _waiting()
    return before.snapshot_requested(now=2.0, track=SnapshotTrack(snapshot_id, COLLECTION, sent_at=2.0, heard_at=2.0))


def _waiting() -> Lifecycle:
    return Lifecycle().begin_rebuild("column dropped", now=0.0).folder_deleted(now=1.0)


def note(kind: str, snapshot_id: str = "s1", **data: object) -> SnapshotNotice:
    return SnapshotNotice(snapshot_id, kind, **data)  # type: ignore[arg-type]


def test_a_tracked_rebuild_runs_only_after_its_scan_and_completed() -> None:
    table = requested()
    assert table.phase is Phase.SNAPSHOT_REQUESTED and table.word == "rebuilding:snapshot" and table.awaits_snapshot
    table = table.snapshot_notified(note("STARTED", collections=(COLLECTION,)), now=3.0)
    assert table.snapshot is not None and table.snapshot.state is SnapshotState.STARTED
    for i, key in enumerate(("100", "200", "300"), start=4):
        progress = note("IN_PROGRESS", current=COLLECTION, last_key=key, maximum_key="3000")
        table = table.snapshot_notified(progress, now=float(i))
    assert table.snapshot is not None and (table.snapshot.chunks, table.snapshot.last_key) == (3, "300")
    assert table.snapshot.started_at == 3.0 and table.snapshot.heard_at == 6.0
    # A chunk of another collection in the same snapshot is no chunk of this table, but says it is alive.
    table = table.snapshot_notified(note("IN_PROGRESS", current="public.other"), now=7.0)
    assert table.snapshot is not None and table.snapshot.chunks == 3 and table.snapshot.heard_at == 7.0
    # COMPLETED before this table's scan completed (another snapshot's, renamed) does not end the rebuild.
    assert table.snapshot_notified(note("COMPLETED"), now=8.0).phase is Phase.SNAPSHOT_REQUESTED
    table = table.snapshot_notified(note("TABLE_SCAN_COMPLETED", scanned=COLLECTION, status="SUCCEEDED"), now=9.0)
    assert table.phase is Phase.SNAPSHOT_REQUESTED and table.word == "rebuilding:snapshot"
    done = table.snapshot_notified(note("COMPLETED"), now=10.0)
    assert done.phase is Phase.RUNNING and done.word == "running" and not done.awaits_snapshot
    assert done.upserts and not done.skips_events  # reads behind the notification still upsert


def test_a_failed_scan_or_an_abort_marks_the_snapshot_aborted_and_completed_no_longer_ends_it() -> None:
    failed = requested().snapshot_notified(
        note("TABLE_SCAN_COMPLETED", scanned=COLLECTION, status="SQL_EXCEPTION"), now=3.0
    )
    assert failed.snapshot is not None and failed.snapshot.state is SnapshotState.ABORTED
    assert "SQL_EXCEPTION" in (failed.snapshot.why or "")
    assert failed.snapshot_notified(note("COMPLETED"), now=4.0).phase is Phase.SNAPSHOT_REQUESTED
    aborted = requested().snapshot_notified(note("ABORTED", collections=(COLLECTION,)), now=3.0)
    assert aborted.snapshot is not None and aborted.snapshot.state is SnapshotState.ABORTED
    # An ABORTED naming only other collections (their stop) is not this table's.
    other = requested().snapshot_notified(note("ABORTED", collections=("public.x",)), now=3.0)
    assert other.snapshot is not None and other.snapshot.state is SnapshotState.REQUESTED


def test_a_paused_snapshot_is_not_in_a_stall_and_resumes() -> None:
    paused = requested().snapshot_notified(note("PAUSED"), now=3.0)
    assert paused.snapshot is not None and paused.snapshot.state is SnapshotState.PAUSED and paused.awaits_snapshot
    resumed = paused.snapshot_notified(note("RESUMED"), now=4.0)
    assert resumed.snapshot is not None and resumed.snapshot.state is SnapshotState.STARTED


def test_a_new_rebuild_stops_the_snapshot_in_flight_and_waits_for_its_abort() -> None:
    refreshing = requested(refresh=True).snapshot_notified(note("IN_PROGRESS", current=COLLECTION), now=3.0)
    assert refreshing.word == "refreshing"
    rebuilding = refreshing.begin_rebuild("column dropped", now=4.0)
    assert rebuilding.snapshot is not None and rebuilding.snapshot.in_flight  # kept: it must be stopped
    stopping = rebuilding.stop_sent(now=5.0)
    assert stopping.snapshot is not None and stopping.snapshot.state is SnapshotState.STOPPING
    assert stopping.awaits_snapshot and stopping.stop_sent(now=6.0) == stopping
    # Chunks still reported before the stop took effect change nothing; its ABORTED ends the wait.
    assert stopping.snapshot_notified(note("IN_PROGRESS", current=COLLECTION), now=6.0) == stopping
    ended = stopping.snapshot_notified(note("ABORTED", "other-id", collections=(COLLECTION,)), now=7.0)
    assert ended.snapshot is not None and ended.snapshot.state is SnapshotState.ABORTED and not ended.awaits_snapshot
    # The new request replaces the track; the table runs only when the new snapshot completes.
    again = ended.folder_deleted(now=8.0).snapshot_requested(
        now=9.0, track=SnapshotTrack("s2", COLLECTION, sent_at=9.0, heard_at=9.0)
    )
    assert again.snapshot is not None and again.snapshot.id == "s2" and again.word == "rebuilding:snapshot"


def test_a_retry_counts_its_attempts_and_giving_up_stops_the_table() -> None:
    table = requested().snapshot_notified(note("ABORTED"), now=3.0)
    retried = table.snapshot_retried(SnapshotTrack("s2", COLLECTION, sent_at=4.0, heard_at=4.0, attempts=2), now=4.0)
    assert retried.phase is Phase.SNAPSHOT_REQUESTED and retried.snapshot is not None
    assert (retried.snapshot.id, retried.snapshot.attempts, retried.snapshot.state) == (
        "s2",
        2,
        SnapshotState.REQUESTED,
    )
    stopped = retried.snapshot_given_up("no notification of it for 300 s", now=5.0)
    assert stopped.phase is Phase.STOPPED and stopped.word == "stopped"
    assert "no notification of it for 300 s; run `rebuild`" in (stopped.stop_reason or "")


def test_untracked_snapshots_keep_todays_behaviour() -> None:
    table = _waiting().snapshot_requested(now=2.0)
    assert table.snapshot is None and table.word == "running" and not table.awaits_snapshot
    assert table.snapshot_notified(note("COMPLETED"), now=3.0) is table
    assert "snapshot" not in table.to_json()  # a ledger without tracking reads as before


def test_the_json_form_round_trips_a_tracked_snapshot() -> None:
    table = requested().snapshot_notified(note("IN_PROGRESS", current=COLLECTION, last_key="7"), now=3.0)
    assert Lifecycle.from_json(orjson.loads(orjson.dumps(table.to_json()))) == table
