"""The table lifecycle: its transitions, the ones it refuses, and the ledger formats it is read from."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import orjson
import pytest

from connector.commands.tables import table_lines
from connector.config import MirrorSettings, RebuildSettings
from connector.publish.ledger import BatchLedger
from connector.publish.ledger_format import state_from_json
from connector.publish.lifecycle import (
    AUTOMATIC_COUNT_RESET_S,
    Lifecycle,
    LifecycleError,
    Phase,
    SnapshotState,
    SnapshotTrack,
)
from connector.storage.local import LocalStorage

LEDGER_V1 = Path(__file__).parents[2] / "data" / "ledger_v1"
STAY = MirrorSettings()
REBUILD = MirrorSettings(on_table_stopped="rebuild", rebuild=RebuildSettings(max_automatic=2))


def test_a_stop_stays_stopped_unless_automatic_rebuilds_are_on() -> None:
    stopped = Lifecycle().stop("poison at t[0]@3", STAY, now=10.0)
    assert (stopped.phase, stopped.reason, stopped.since) == (Phase.STOPPED, "poison at t[0]@3", 10.0)
    assert stopped.skips_events and not stopped.is_rebuilding and stopped.word == "stopped"
    rebuilding = Lifecycle().stop("poison at t[0]@3", REBUILD, now=10.0)
    assert rebuilding.phase is Phase.DELETING and rebuilding.automatic_rebuilds == 1
    assert rebuilding.word == "rebuilding:deleting" and rebuilding.stop_reason == "poison at t[0]@3"


def test_automatic_rebuilds_give_up_at_the_limit_and_count_afresh_after_a_day() -> None:
    spent = Lifecycle(Phase.SNAPSHOT_REQUESTED, automatic_rebuilds=2, last_rebuild_at=100.0)
    gave_up = spent.stop("again", REBUILD, now=200.0)
    assert gave_up.phase is Phase.STOPPED and "2 automatic rebuild(s) already" in (gave_up.reason or "")
    later = spent.stop("again", REBUILD, now=100.0 + AUTOMATIC_COUNT_RESET_S + 1)
    assert later.phase is Phase.DELETING and later.automatic_rebuilds == 1


def test_a_rebuild_walks_deleting_waiting_snapshot_and_runs_again_upserting() -> None:
    table = Lifecycle().begin_rebuild("operator", now=1.0, request="r1")
    assert table.phase is Phase.DELETING and table.request == "r1" and table.skips_events
    table = table.folder_deleted(now=2.0)
    assert table.phase is Phase.WAITING and table.since == 2.0 and table.is_rebuilding
    table = table.snapshot_requested(now=3.0)
    assert table.phase is Phase.SNAPSHOT_REQUESTED and table.upserts and not table.skips_events
    assert table.request == "r1" and table.reason == "operator" and table.word == "running" and not table.refreshed


def test_a_refresh_keeps_publishing_and_upserts_from_the_start() -> None:
    table = Lifecycle().begin_refresh("column region added with a default", now=5.0)
    assert table.phase is Phase.REFRESH_PENDING and table.upserts and not table.skips_events
    assert table.word == "refreshing"
    requested = table.snapshot_requested(now=6.0)
    assert requested.phase is Phase.SNAPSHOT_REQUESTED and requested.refreshed
    # A stopped or rebuilding table is re-read whole by its rebuild: a refresh changes nothing there.
    stopped = Lifecycle(Phase.STOPPED, "poison")
    assert stopped.begin_refresh("column added", now=7.0) is stopped


@pytest.mark.parametrize(
    ("table", "move"),
    [
        (Lifecycle(), lambda t: t.folder_deleted(now=1.0)),
        (Lifecycle(Phase.STOPPED, "x"), lambda t: t.snapshot_requested(now=1.0)),
        (Lifecycle(Phase.DELETING, "x"), lambda t: t.snapshot_requested(now=1.0)),
    ],
)
def test_transitions_out_of_order_are_refused(table: Lifecycle, move: object) -> None:
    with pytest.raises(LifecycleError, match="expected"):
        move(table)  # type: ignore[operator]


def test_the_json_form_round_trips_every_phase() -> None:
    for phase in Phase:
        table = Lifecycle(phase, "why", 1.5, "req", 2, 1.0, refreshed=True)
        assert Lifecycle.from_json(orjson.loads(orjson.dumps(table.to_json()))) == table


def test_a_ledger_written_by_the_previous_release_is_read(tmp_path: Path) -> None:
    """Version 1 kept the lifecycle as flat fields; the tables go on exactly where they stood."""
    shutil.copytree(LEDGER_V1, tmp_path, dirs_exist_ok=True)
    ledger = BatchLedger(LocalStorage(str(tmp_path)))
    tables = ledger.state.tables
    assert ledger.state.last_committed_batch == 12
    assert tables["public.running"].lifecycle == Lifecycle()
    assert tables["public.running"].next_number == 5 and tables["public.running"].key_columns == ("id",)
    stopped = tables["public.stopped"].lifecycle
    assert stopped.phase is Phase.STOPPED and "changed type" in (stopped.reason or "")
    deleting = tables["public.deleting"].lifecycle
    assert (deleting.phase, deleting.reason, deleting.request, deleting.since) == (
        Phase.DELETING,
        "truncated",
        "req1",
        1764000000.0,
    )
    waiting = tables["public.waiting"].lifecycle
    assert (waiting.phase, waiting.automatic_rebuilds, waiting.since) == (Phase.WAITING, 1, 1764000100.0)
    rebuilt = tables["public.rebuilt"].lifecycle
    assert (rebuilt.phase, rebuilt.reason, rebuilt.automatic_rebuilds) == (Phase.SNAPSHOT_REQUESTED, "changed type", 2)
    words = {line.table: line.state for line in table_lines(ledger.state)}
    assert words == {
        "public.deleting": "rebuilding:deleting",
        "public.rebuilt": "running",
        "public.running": "running",
        "public.stopped": "stopped",
        "public.waiting": "rebuilding:waiting-for-fabric",
    }
    # The next commit writes the current format (the tables in a base segment), which reads back the same.
    ledger.commit_state(ledger.state)
    written = orjson.loads((tmp_path / "ledger" / "state.json").read_bytes())
    base = orjson.loads((tmp_path / "ledger" / "segments" / written["segments"][0]["file"]).read_bytes())
    assert written["version"] == 3 and "stopped" not in base["tables"]["public.stopped"]
    assert BatchLedger(LocalStorage(str(tmp_path))).state == ledger.state


def test_a_ledger_of_a_newer_release_is_refused_with_its_version() -> None:
    with pytest.raises(ValueError, match="ledger format 3 was written by a newer release"):
        state_from_json({"version": 3, "last_committed_batch": 0})


def test_only_the_lifecycle_and_the_rebuilder_name_phases() -> None:
    """Every other module asks ``Lifecycle``'s questions, so a new phase is taught in two modules, not nine."""
    package = Path(__file__).resolve().parents[3] / "connector"
    allowed = {package / "publish" / "lifecycle.py", package / "publish" / "rebuild.py"}
    naming = [
        str(path.relative_to(package.parent))
        for path in sorted(package.rglob("*.py"))
        if path not in allowed and re.search(r"\bPhase\b", path.read_text())
    ]
    assert naming == []


def test_the_questions_other_modules_ask_match_the_phases() -> None:
    tracked = SnapshotTrack("sig-1", "db.public.items", SnapshotState.COMPLETED)
    for phase in Phase:
        lifecycle = Lifecycle(phase=phase)
        assert lifecycle.stopped == (phase is Phase.STOPPED)
        assert lifecycle.re_read == (phase is Phase.SNAPSHOT_REQUESTED)
        assert lifecycle.progress == phase.value
    running_after_snapshot = Lifecycle(snapshot=tracked)
    assert running_after_snapshot.re_read
    assert running_after_snapshot.progress == "running, snapshot completed"
