"""The audit's judgement: only differences that outlast the mirror's lag and a row written meanwhile count; repairs."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from connector.audit.compare import AuditPacing, AuditRound, TableAudit
from connector.audit.finding import AuditFinding, AuditTarget
from connector.audit.landing_gap import missing_files
from connector.audit.repair import repair
from connector.audit.status import read_audit_status
from connector.config.audit import AuditSettings
from connector.landing_zone.layout import TableRef
from connector.operate import metrics
from connector.storage.local import LocalStorage

REF = TableRef("public", "items")
TARGET = AuditTarget(REF, ("id",))


class Source:
    """An in-memory source table, in key order, with a position that moves on each write."""

    def __init__(self, rows: dict[int, str]) -> None:
        self.rows = dict(rows)
        self.position = 0

    def current_position(self) -> str:
        return str(self.position)

    def captured_through(self, position: str) -> bool:
        return True

    def ranged_rows(
        self, table: TableRef, key_columns: list[str], after: Any, through: Any
    ) -> Iterator[dict[str, Any]]:
        for key in sorted(self.rows):
            if (after is None or (key,) > after) and (through is None or (key,) <= through):
                yield {"id": key, "name": self.rows[key]}

    def columns(self, table: TableRef) -> list[str]:
        return ["id", "name"]

    def rows_by_keys(self, table: TableRef, key_columns: list[str], keys: Sequence[tuple[Any, ...]]) -> list[Any]:
        return [{"id": k[0], "name": self.rows[k[0]]} for k in keys if k[0] in self.rows]


class Mirror:
    def __init__(self, rows: dict[int, str]) -> None:
        self.rows = dict(rows)

    def read(self, table: TableRef, key_columns: Sequence[str]) -> pa.Table:
        return pa.table({"id": list(self.rows), "name": list(self.rows.values())})


class Repairs:
    def __init__(self) -> None:
        self.done: list[tuple[str, Any]] = []

    def delete(self, table_id: str, keys: Sequence[Any]) -> None:
        self.done.append(("delete", list(keys)))

    def reread(self, table_id: str, keys: Sequence[Any]) -> None:
        self.done.append(("reread", list(keys)))

    def rebuild(self, table_id: str, reason: str) -> None:
        self.done.append(("rebuild", reason))


def _audit(source: Source, mirror: Mirror, tmp_path: Path, on_settle: Any = None, **settings: Any) -> TableAudit:
    def settle_for(reader: Any, target: AuditTarget) -> Any:
        def settle(position: str) -> bool:
            if on_settle is not None:
                on_settle()
            return True

        return settle

    lz = LocalStorage(str(tmp_path / "lz"))
    return TableAudit(AuditSettings(**settings), source, mirror, lz, settle_for, pacing=AuditPacing(chunk_rows=4))  # type: ignore[arg-type]


def test_a_clean_table_is_clean(tmp_path: Path) -> None:
    rows = {i: f"n{i}" for i in range(20)}
    finding = _audit(Source(rows), Mirror(rows), tmp_path).audit(TARGET)
    assert finding.clean and finding.repair == "none" and finding.rows_checked == 40


def test_differing_missing_and_extra_keys_are_repaired_by_row(tmp_path: Path) -> None:
    rows = {i: f"n{i}" for i in range(20)}
    mirror = {**rows, 5: "tampered", 30: "gone from the source"}
    del mirror[7]
    finding = _audit(Source(rows), Mirror(mirror), tmp_path).audit(TARGET)
    assert finding.repair == "rows"
    assert sorted(finding.rereads) == [(5,), (7,), (30,)]
    assert finding.deletes == [(30,)]
    assert finding.nudge == (0,)  # a key the source has: its re-read brings a batch for the deletes
    repairs = Repairs()
    repair(finding, repairs)
    assert repairs.done[0] == ("delete", [(30,)])  # deletes first, then the re-reads (the deleted key included)
    assert repairs.done[1][0] == "reread" and sorted(repairs.done[1][1]) == [(0,), (5,), (7,), (30,)]


def test_a_row_the_mirror_catches_up_with_is_no_difference(tmp_path: Path) -> None:
    rows = {i: f"n{i}" for i in range(20)}
    mirror = Mirror({**rows, 3: "old"})
    finding = _audit(Source(rows), mirror, tmp_path, on_settle=lambda: mirror.rows.update({3: "n3"})).audit(TARGET)
    assert finding.clean


def test_a_row_the_source_changes_during_the_audit_is_left_to_the_next_round(tmp_path: Path) -> None:
    source = Source({i: f"n{i}" for i in range(20)})
    mirror = Mirror({i: f"n{i}" for i in range(20)})

    def write() -> None:  # a hot row: the source writes it again at every look, the mirror is always one behind
        source.rows[3] = source.rows[3] + "+"

    mirror.rows[3] = "behind"
    finding = _audit(source, mirror, tmp_path, on_settle=write).audit(TARGET)
    assert finding.clean


def test_past_the_threshold_a_rebuild_is_asked(tmp_path: Path) -> None:
    rows = {i: f"n{i}" for i in range(20)}
    finding = _audit(Source(rows), Mirror({}), tmp_path, repair_threshold=5).audit(TARGET)
    assert finding.repair == "rebuild" and finding.differences == 20
    repairs = Repairs()
    repair(finding, repairs)
    assert repairs.done == [("rebuild", "audit: 20 differing keys (more than mirror.audit.repair_threshold)")]


def test_a_file_lost_before_fabric_took_it_is_a_gap_and_a_rebuild(tmp_path: Path) -> None:
    lz = LocalStorage(str(tmp_path / "lz"))
    lz.create(f"{REF.folder}/_ProcessedFiles/{3:020d}.parquet", b"x")
    lz.create(f"{REF.folder}/{6:020d}.parquet", b"x")
    assert missing_files(lz, REF) == [4, 5]
    lz.create(f"{REF.folder}/{4:020d}.parquet", b"x")
    lz.create(f"{REF.folder}/{5:020d}.parquet", b"x")
    assert missing_files(lz, REF) == []
    lz.delete(f"{REF.folder}/{4:020d}.parquet")
    audit = TableAudit(
        AuditSettings(),
        Source({}),  # type: ignore[arg-type]
        Mirror({}),
        lz,
        lambda r, t: lambda p: True,
        pacing=AuditPacing(pause=lambda s: None),
    )
    finding = audit.audit(TARGET)
    assert finding.missing_files == [4] and finding.repair == "rebuild"


def test_a_round_counts_checks_and_differences_and_records_the_last_audit(tmp_path: Path) -> None:
    rows = {i: f"n{i}" for i in range(20)}
    checkpoint = LocalStorage(str(tmp_path / "cp"))
    audit = _audit(Source(rows), Mirror({**rows, 1: "x"}), tmp_path)
    before = metrics.AUDIT_ROWS_CHECKED._value.get()
    repairs = Repairs()
    findings = AuditRound(AuditSettings(max_rows_per_s=1e9), audit.audit, repairs, checkpoint=checkpoint).run([TARGET])
    assert metrics.AUDIT_ROWS_CHECKED._value.get() - before == 40
    assert findings[0].differences == 1 and repairs.done[-1] == ("reread", [(1,)])
    status = read_audit_status(checkpoint)["public.items"]
    assert status.differences == 1 and status.repair == "rows" and status.last_clean_at is None
    clean = _audit(Source(rows), Mirror(rows), tmp_path)
    AuditRound(AuditSettings(max_rows_per_s=1e9), clean.audit, repairs, checkpoint=checkpoint).run([TARGET])
    status = read_audit_status(checkpoint)["public.items"]
    assert status.differences == 0 and status.last_clean_at == status.at
    assert "clean" in status.text()


def test_the_source_url_must_be_a_secret_reference() -> None:
    with pytest.raises(ValueError, match="secret reference"):
        AuditSettings(source_url="postgresql://u:p@h/db")  # type: ignore[arg-type]
    assert AuditSettings(source_url="${env:SRC}").source_url is not None  # type: ignore[arg-type]


def test_a_difference_the_mirror_never_caught_up_with_is_lagging_not_clean(tmp_path: Path) -> None:
    """Fabric never got past the last look's position (no table yet, or far behind): judged next round."""
    rows = {i: f"n{i}" for i in range(20)}

    def settle_for(reader: Any, target: AuditTarget) -> Any:
        return lambda position: False

    lz = LocalStorage(str(tmp_path / "lz"))
    audit = TableAudit(AuditSettings(), Source(rows), Mirror({}), lz, settle_for, pacing=AuditPacing(chunk_rows=4))  # type: ignore[arg-type]
    finding = audit.audit(TARGET)
    assert finding.lagging and not finding.clean and finding.repair == "lagging"
    assert finding.rereads == [] and finding.deletes == []


def test_a_finding_made_while_the_audit_was_stopped_is_neither_counted_nor_repaired(tmp_path: Path) -> None:
    """At shutdown the lag gate stops waiting (the stream has stopped): what the round then sees is no difference."""
    rows = {i: f"r{i}" for i in range(1, 21)}
    audit = _audit(Source(rows), Mirror({**rows, 1: "x"}), tmp_path)
    stop = threading.Event()

    def stopped_during(target: AuditTarget) -> AuditFinding:
        finding = audit.audit(target)
        stop.set()
        return finding

    repairs = Repairs()
    before = metrics.AUDIT_DIFFERENCES.labels(table=TARGET.id)._value.get()
    assert AuditRound(AuditSettings(), stopped_during, repairs, stop=stop).run([TARGET]) == []
    assert repairs.done == [] and metrics.AUDIT_DIFFERENCES.labels(table=TARGET.id)._value.get() == before


class RefusingRepairs(Repairs):
    def reread(self, table_id: str, keys: Sequence[Any]) -> None:
        raise OSError("the signal topic is not writable\nsecond line")


def test_a_repair_that_cannot_be_asked_for_keeps_the_chosen_repair_and_its_error_apart(tmp_path: Path) -> None:
    rows = {i: f"n{i}" for i in range(5)}
    checkpoint = LocalStorage(str(tmp_path / "cp"))
    audit = _audit(Source(rows), Mirror({**rows, 2: "x"}), tmp_path)
    findings = AuditRound(AuditSettings(max_rows_per_s=1e9), audit.audit, RefusingRepairs(), checkpoint=checkpoint).run(
        [TARGET]
    )
    assert findings[0].repair == "rows" and findings[0].repair_error == "the signal topic is not writable"
    status = read_audit_status(checkpoint)["public.items"]
    assert (status.repair, status.repair_error) == ("rows", "the signal topic is not writable")
    assert status.text().endswith(":1 differences -> rows (failed: the signal topic is not writable)")
