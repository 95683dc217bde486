"""The ledger on disk: a batch writes what it changed, and loading gives back the whole state.

Before: every plan and every commit serialised every table (and every kept batch's source offsets) whatever the
batch touched. Now a plan holds the batch's changes, a commit writes them as one new segment and then the head
(``state.json``), and a new base of the whole state is written only when the segments outgrow the last one.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from typing_extensions import override

from connector.errors import LandingZoneCorrupt
from connector.publish.ledger import BatchLedger
from connector.publish.ledger_format import MAX_SEGMENTS, SEGMENTS_FOLDER, STATE_FILE, state_from_json, state_to_json
from connector.publish.ledger_state import BatchPlan, BatchSource, DataGap, LedgerState, PlannedFile, TableState
from connector.publish.lifecycle import Lifecycle
from connector.storage.local import LocalStorage

#: Table ids are keys inside segments, never file names: any character is fine.
ODD_IDS = ("public.orders", "Sales.Order Lines", "dbo.a/b", "x.ünïcode", "..")


class Crash(BaseException):
    """Stands for the process dying: nothing after it runs."""


class RecordingStorage(LocalStorage):
    """A local folder that records what is written and deleted, and can die before one write."""

    def __init__(self, root: Path) -> None:
        super().__init__(str(root))
        self.replaced: list[str] = []
        self.deleted: list[str] = []
        self.crash_before: str | None = None  # the path whose next write dies
        self.on_read: dict[str, list[object]] = {}

    @override
    def replace(self, path: str, data: bytes) -> None:
        if path == self.crash_before:
            self.crash_before = None
            raise Crash(path)
        self.replaced.append(path)
        super().replace(path, data)

    @override
    def delete(self, path: str) -> None:
        self.deleted.append(path)
        super().delete(path)

    def forget(self) -> None:
        self.replaced.clear()
        self.deleted.clear()


def table(i: int, **changes: Any) -> TableState:
    state = TableState(f"folder-{i}", next_number=3, key_columns=("id",), topic=f"dbserver1.t{i}", rows_published=9)
    return replace(state, **changes)


def committed_tables(n: int) -> LedgerState:
    tables = {f"public.t{i:03d}": table(i) for i in range(n)}
    sources = tuple(BatchSource(b, ('{"batchWatermarkMs":0}', f'{{"t":{{"0":{b}}}}}')) for b in range(3))
    return LedgerState(2, tables, sources, topic_ids={f"dbserver1.t{i}": f"id{i}" for i in range(n)})


def next_batch(state: LedgerState, changed: list[str]) -> BatchPlan:
    """A plan as the planner makes one: the changed tables numbered on, the others the very same objects."""
    batch = state.last_committed_batch + 1
    tables = dict(state.tables)
    files = []
    for tid in changed:
        old = tables[tid]
        tables[tid] = replace(old, next_number=old.next_number + 1, files_published=old.files_published + 1)
        final = f"{old.folder}/{old.next_number:020d}.parquet"
        files.append(PlannedFile(tid, old.next_number, f"{old.folder}/_staged_{batch}", final, 10, "00" * 32, 2))
    after = replace(state, last_committed_batch=batch, tables=tables)
    after = after.with_source(BatchSource(batch, ('{"batchWatermarkMs":0}', f'{{"t":{{"0":{batch}}}}}')))
    return BatchPlan(batch, tuple(files), after)


def digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()
    }


def head(root: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = orjson.loads((root / STATE_FILE).read_bytes())
    return loaded


def listed_segments(root: Path) -> list[str]:
    return [f"{SEGMENTS_FOLDER}/{s['file']}" for s in head(root)["segments"]]


# -- a batch costs what it changed ----------------------------------------------------------------------------


def test_a_batch_writes_only_its_changed_tables_once_in_its_plan_and_once_in_one_new_segment(tmp_path: Path) -> None:
    storage = RecordingStorage(tmp_path)
    ledger = BatchLedger(storage)
    ledger.commit_state(committed_tables(1000))
    before = digests(tmp_path)
    storage.forget()

    changed = ["public.t007", "public.t500", "public.t999"]
    plan = next_batch(ledger.state, changed)
    ledger.write_plan(plan)
    plan_path = f"ledger/plans/{plan.batch_id:020d}.json"
    assert storage.replaced == [plan_path]
    written = orjson.loads((tmp_path / plan_path).read_bytes())
    assert sorted(written["changes"]["tables"]) == changed
    assert [s["batch_id"] for s in written["changes"]["sources"]] == [plan.batch_id]  # not the kept history
    assert "topic_ids" not in written["changes"]  # unchanged
    assert written["head"]["source_batches"] == [0, 1, 2, 3]

    storage.forget()
    ledger.commit(plan)
    segment = listed_segments(tmp_path)[-1]
    assert storage.replaced == [segment, STATE_FILE]  # one new segment, then the head: the commit
    assert storage.deleted == [plan_path]
    assert sorted(orjson.loads((tmp_path / segment).read_bytes())["tables"]) == changed
    after = digests(tmp_path)
    assert {p: d for p, d in after.items() if p in before and p != STATE_FILE} == {
        p: d for p, d in before.items() if p != STATE_FILE
    }  # no file written before was rewritten
    assert set(after) - set(before) == {segment}
    assert BatchLedger(LocalStorage(str(tmp_path))).state == plan.state


def test_a_batch_that_changes_no_table_writes_its_source_offsets_and_the_head(tmp_path: Path) -> None:
    storage = RecordingStorage(tmp_path)
    ledger = BatchLedger(storage)
    ledger.commit_state(committed_tables(20))
    storage.forget()
    plan = next_batch(ledger.state, [])
    ledger.commit_state(plan.state)
    segment = listed_segments(tmp_path)[-1]
    assert storage.replaced == [segment, STATE_FILE]
    assert set(orjson.loads((tmp_path / segment).read_bytes())) == {"sources"}
    storage.forget()
    ledger.commit_state(ledger.state)  # nothing changed at all: the head alone
    assert storage.replaced == [STATE_FILE]
    assert BatchLedger(LocalStorage(str(tmp_path))).state == plan.state


# -- loading gives back the whole state ------------------------------------------------------------------------


def test_the_loaded_state_is_the_whole_committed_state_across_many_commits_and_new_bases(tmp_path: Path) -> None:
    """Random commits (tables changed, added, removed; offsets kept and dropped; topic ids; gaps; a resume)."""
    rng = random.Random(46)
    ledger = BatchLedger(LocalStorage(str(tmp_path)))
    state = LedgerState()
    bases = 0
    for batch in range(3 * MAX_SEGMENTS):
        tables = dict(state.tables)
        for _ in range(rng.randrange(4)):
            tid = rng.choice(ODD_IDS) + str(rng.randrange(30))
            tables[tid] = table(rng.randrange(100), next_number=batch + 2, lifecycle=Lifecycle())
        if tables and rng.random() < 0.1:
            tables.pop(rng.choice(sorted(tables)))
        state = replace(state, last_committed_batch=batch, tables=tables)
        ids = {f"topic{rng.randrange(8)}": f"id{rng.randrange(3)}" for _ in range(2)}
        state = state.with_source(BatchSource(batch, (f'{{"t":{{"0":{batch}}}}}',), tuple(ids.items())))
        if rng.random() < 0.05:
            gap = DataGap(rng.choice([None, "public.orders7"]), "topic1", 0, batch, None, "retention", 1.0)
            state = state.with_gaps((gap,))
        if batch == 2 * MAX_SEGMENTS:  # ``run --resume-from-ledger``: batch ids start again, the offsets go
            state = replace(state, last_committed_batch=-1, sources=(), resume_offsets='{"t":{"0":5}}')
        ledger.commit_state(state)
        segments = listed_segments(tmp_path)
        assert len(segments) <= MAX_SEGMENTS
        bases += len(segments) == 1
        on_disk = sorted(f"{SEGMENTS_FOLDER}/{p.name}" for p in (tmp_path / SEGMENTS_FOLDER).iterdir())
        assert set(segments) <= set(on_disk)
        loaded = BatchLedger(LocalStorage(str(tmp_path))).state
        assert loaded == state
        assert list(loaded.tables) == sorted(state.tables)  # in name order, as format 2 read back
    assert bases >= 3  # new bases were written, and the loads above read across them


def test_a_new_base_removes_the_segments_it_replaces(tmp_path: Path) -> None:
    ledger = BatchLedger(LocalStorage(str(tmp_path)))
    state = committed_tables(300)  # a base the small segments after it do not outgrow: their count is the limit
    ledger.commit_state(state)
    for _ in range(MAX_SEGMENTS - 1):
        state = next_batch(state, ["public.t001"]).state
        ledger.commit_state(state)
    assert len(listed_segments(tmp_path)) == MAX_SEGMENTS
    (tmp_path / SEGMENTS_FOLDER / f"{999:020d}.json").write_bytes(b"{}")  # one a crash left unlisted
    state = next_batch(state, ["public.t002"]).state
    ledger.commit_state(state)
    assert listed_segments(tmp_path) == [f"{SEGMENTS_FOLDER}/{p.name}" for p in (tmp_path / SEGMENTS_FOLDER).iterdir()]
    assert len(listed_segments(tmp_path)) == 1
    assert BatchLedger(LocalStorage(str(tmp_path))).state == state


def test_a_reader_beside_the_job_reads_the_new_head_when_a_new_base_removed_its_segments(tmp_path: Path) -> None:
    """``tables`` reads the ledger without the writer fence: a base written mid-read is no error."""
    writer = BatchLedger(LocalStorage(str(tmp_path)))
    state = committed_tables(3)
    writer.commit_state(state)
    state = next_batch(state, ["public.t001"]).state
    writer.commit_state(state)
    grown = {**state.tables, **{f"public.new{i}": table(i) for i in range(50)}}
    newest = replace(state, tables=grown)  # more than the base holds: the commit writes a new base

    class ReaderStorage(LocalStorage):
        committed = False

        @override
        def read_bytes(self, path: str) -> bytes:
            if path.startswith(SEGMENTS_FOLDER) and not self.committed:
                self.committed = True  # the writer commits between the reader's read of the head and of a segment
                writer.commit_state(newest)
                assert len(listed_segments(tmp_path)) == 1
            return super().read_bytes(path)

    assert BatchLedger(ReaderStorage(str(tmp_path))).state == newest


# -- crash safety ------------------------------------------------------------------------------------------------


def test_a_crash_between_the_segment_and_the_head_is_completed_from_the_plan(tmp_path: Path) -> None:
    storage = RecordingStorage(tmp_path)
    ledger = BatchLedger(storage)
    committed = committed_tables(50)
    ledger.commit_state(committed)
    plan = next_batch(committed, ["public.t010", "public.t020"])
    ledger.write_plan(plan)
    storage.crash_before = STATE_FILE
    with pytest.raises(Crash):
        ledger.commit(plan)
    unlisted = storage.replaced[-1]
    assert unlisted.startswith(SEGMENTS_FOLDER) and unlisted not in listed_segments(tmp_path)

    restarted = BatchLedger(LocalStorage(str(tmp_path)))
    assert restarted.state == committed  # the segment no head lists is not part of the state
    [pending] = restarted.pending_plans()
    assert pending == plan  # its files and the whole state after it, exactly as planned
    restarted.commit(pending)
    assert listed_segments(tmp_path)[-1] == unlisted  # written again under the same name
    assert BatchLedger(LocalStorage(str(tmp_path))).state == plan.state
    # Committing it once more (a crash before the plan was removed) changes nothing.
    again = BatchLedger(LocalStorage(str(tmp_path)))
    again.commit_state(plan.state)
    assert BatchLedger(LocalStorage(str(tmp_path))).state == plan.state
    assert again.pending_plans() == []


def test_a_crash_before_a_plan_less_commit_reaches_its_head_leaves_the_previous_state(tmp_path: Path) -> None:
    """``commit_state`` (a rebuild moved on, a resume) is atomic too: its head is its commit."""
    storage = RecordingStorage(tmp_path)
    ledger = BatchLedger(storage)
    committed = committed_tables(10)
    ledger.commit_state(committed)
    stopped = replace(committed, tables={**committed.tables, "public.t003": table(3, next_number=99)})
    storage.crash_before = STATE_FILE
    with pytest.raises(Crash):
        ledger.commit_state(stopped)
    assert BatchLedger(LocalStorage(str(tmp_path))).state == committed


# -- earlier formats ---------------------------------------------------------------------------------------------

#: ``state.json`` as the previous release wrote it (format 2: the whole state, indented).
V2_STATE = b"""{
  "version": 2,
  "last_committed_batch": 4,
  "tables": {
    "public.customers": {
      "folder": "public.schema/customers", "next_number": 6, "key_columns": ["id"], "schema": null,
      "incremental": true, "initial_load_ended": true, "snapshot_pass_ended": false, "marker_free_rows": 0,
      "toast_snapshot": null, "topic": "dbserver1.public.customers", "rows_published": 12, "files_published": 5,
      "last_published_at": 1764000000.5,
      "lifecycle": {"phase": "running", "reason": null, "since": null, "request": null, "automatic_rebuilds": 0,
                    "last_rebuild_at": null, "refreshed": false, "snapshot": null},
      "source_columns": ["id", "name"], "ddl_refreshed": []
    },
    "public.orders": {
      "folder": "public.schema/orders", "next_number": 2, "key_columns": ["id"], "schema": null,
      "incremental": true, "initial_load_ended": true, "snapshot_pass_ended": false, "marker_free_rows": 0,
      "toast_snapshot": null, "topic": "dbserver1.public.orders", "rows_published": 1, "files_published": 1,
      "last_published_at": 1764000000.5,
      "lifecycle": {"phase": "stopped", "reason": "changed type", "since": 1764000000.0, "request": null,
                    "automatic_rebuilds": 0, "last_rebuild_at": null, "refreshed": false, "snapshot": null},
      "source_columns": null, "ddl_refreshed": []
    }
  },
  "sources": [
    {"batch_id": 3, "offsets": ["{\\"dbserver1.public.customers\\":{\\"0\\":10}}"]},
    {"batch_id": 4, "offsets": ["{\\"dbserver1.public.customers\\":{\\"0\\":12}}"]}
  ],
  "source_identity": "{\\"topicPrefix\\":\\"dbserver1\\"}",
  "topic_ids": {"dbserver1.public.customers": "q2Zk3XJ5Ti2pPZ0C5l5c2w"}
}"""


def v2_plan(state: LedgerState) -> bytes:
    """A plan as the previous release wrote it: batch 5 publishing file 6 of customers, the whole state after it."""
    customers = state.tables["public.customers"]
    after = replace(state, last_committed_batch=5, tables={**state.tables, "public.customers": replace(
        customers, next_number=7, rows_published=14, files_published=6)})  # fmt: skip
    after = after.with_source(BatchSource(5, ('{"dbserver1.public.customers":{"0":14}}',)))
    planned = {
        "table": "public.customers", "number": 6, "staged": "public.schema/customers/_staged_5_x",
        "final": "public.schema/customers/00000000000000000006.parquet", "size": 10, "sha256": "00" * 32, "rows": 2,
        "marker_free": False,
    }  # fmt: skip
    return orjson.dumps({"batch_id": 5, "files": [planned], "state": state_to_json(after), "recreated": []})


def test_a_format_2_ledger_and_its_pending_whole_state_plan_load_and_the_next_commit_migrates_them(
    tmp_path: Path,
) -> None:
    (tmp_path / "ledger" / "plans").mkdir(parents=True)
    (tmp_path / STATE_FILE).write_bytes(V2_STATE)
    written = state_from_json(orjson.loads(V2_STATE))
    (tmp_path / "ledger" / "plans" / f"{5:020d}.json").write_bytes(v2_plan(written))

    ledger = BatchLedger(LocalStorage(str(tmp_path)))
    assert ledger.state == written
    orders = ledger.state.tables["public.orders"].lifecycle
    assert (orders.phase.value, orders.reason) == ("stopped", "changed type")
    [plan] = ledger.pending_plans()
    assert plan.batch_id == 5 and plan.state.tables["public.customers"].next_number == 7
    assert [s.batch_id for s in plan.state.sources] == [3, 4, 5]
    assert plan.files[0].final.endswith("00000000000000000006.parquet")

    ledger.commit(plan)  # completed as the previous release planned it, written in this release's format
    assert head(tmp_path)["version"] == 3 and "tables" not in head(tmp_path)
    assert len(listed_segments(tmp_path)) == 1  # the whole state, as a base
    assert not list((tmp_path / "ledger" / "plans").iterdir())
    assert BatchLedger(LocalStorage(str(tmp_path))).state == plan.state


def test_a_format_2_ledger_with_nothing_pending_is_migrated_by_its_next_commit(tmp_path: Path) -> None:
    (tmp_path / "ledger").mkdir()
    (tmp_path / STATE_FILE).write_bytes(V2_STATE)
    ledger = BatchLedger(LocalStorage(str(tmp_path)))
    plan = next_batch(ledger.state, ["public.orders"])
    ledger.write_plan(plan)
    ledger.commit(plan)
    assert len(listed_segments(tmp_path)) == 1
    assert BatchLedger(LocalStorage(str(tmp_path))).state == plan.state


# -- damage ------------------------------------------------------------------------------------------------------


def test_a_missing_or_garbled_segment_and_a_newer_format_are_one_error_naming_the_file(tmp_path: Path) -> None:
    ledger = BatchLedger(LocalStorage(str(tmp_path)))
    ledger.commit_state(committed_tables(3))
    ledger.commit_state(next_batch(ledger.state, ["public.t001"]).state)
    segment = tmp_path / listed_segments(tmp_path)[-1]
    good = segment.read_bytes()

    segment.write_bytes(b'{"tables": {"public.t001": {"nope": 1}}}')
    with pytest.raises(LandingZoneCorrupt, match="unreadable") as garbled:
        BatchLedger(LocalStorage(str(tmp_path)))
    assert str(segment.relative_to(tmp_path)) in str(garbled.value) and "emptied landing zone" in str(garbled.value)

    segment.unlink()
    with pytest.raises(LandingZoneCorrupt, match="which ledger/state.json lists, is missing") as missing:
        BatchLedger(LocalStorage(str(tmp_path)))
    assert str(segment.relative_to(tmp_path)) in str(missing.value)
    segment.write_bytes(good)

    newer = {**head(tmp_path), "version": 4}
    (tmp_path / STATE_FILE).write_bytes(orjson.dumps(newer))
    with pytest.raises(LandingZoneCorrupt, match=r"ledger format 4 was written by a newer release .*reads 3\)"):
        BatchLedger(LocalStorage(str(tmp_path)))
