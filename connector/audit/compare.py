"""The continuous audit's rounds: each table compared with what Fabric holds, each lasting difference repaired.

A round compares every audited table as ``verify`` against Fabric's tables does (``mirror_compare.compare_table``:
key-range digests, suspect chunks looked at again once the mirror is past the first look's source position), then
confirms each differing key in a last look of its own, so a row written while the round ran is never reported:

1. the source rows of the differing keys are read, then the source position (the values read are all below it);
2. once the mirror is past that position (``settle``), the mirror and the same source rows are read again;
3. a key is confirmed when its source row did not change between 1 and 2 and the mirror still differs from it
   (a row the source changed meanwhile is left to the next round).

Each confirmed difference is repaired the cheapest way that is exact (``Repairs``, the stream's side effects):
keys the mirror holds that the source lacks (or holds twice) get delete rows, then every differing key is re-read
through Debezium (an incremental snapshot filtered to those keys), so a row the source wrote again after the look
comes back after the delete. A table with more differing keys than ``repair_threshold``, a column set that differs,
or a file missing from the landing zone before Fabric took it (the table's later files wait for it forever) is
rebuilt instead.

A table whose rebuild or refresh is requested or under way (``Withdrawn``: asked at its turn, at each key range of its
comparison and before its finding counts) is not judged: its folder is deleted or its rows are being read again, so
it differs from the source until that is through, and a repair would only re-read what the snapshot reads anyway.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from connector.audit.finding import (
    AuditFinding,
    AuditTarget,
    TableWithdrawn,
    Withdrawn,
    never_withdrawn,
    unique_keys,
)
from connector.audit.landing_gap import missing_files
from connector.audit.repair import Repairs, repair
from connector.audit.status import TableAuditStatus, write_audit_status
from connector.config.audit import AuditSettings
from connector.errors import first_line
from connector.landing_zone.layout import TableRef
from connector.operate import metrics
from connector.readback.chunk_compare import Key
from connector.readback.database_reader import Row
from connector.readback.mirror_compare import (
    DEFAULT_CHUNK_ROWS,
    AuditSource,
    CompareRules,
    RangedSource,
    Settle,
    compare_table,
    rules_of,
)
from connector.storage.base import Storage

log = logging.getLogger(__name__)

GAP_RECHECK_S = 5.0
"""A gap in a table's files is looked at again after this long: one seen twice is no move under way."""


class MirrorSide(Protocol):
    """Fabric's tables as the audit reads them (``mirrored_tables.MirroredTables``)."""

    def read(self, table: TableRef, key_columns: Sequence[str]) -> pa.Table | None:
        """The table as Fabric holds it; ``None`` when there is none."""


SettleFor = Callable[[AuditSource, AuditTarget], Settle]
"""The lag gate of one table: waits until the mirror is past a source position (``mirror_compare.fabric_settle``)."""


@dataclass(frozen=True)
class AuditPacing:
    """How a table's audit paces itself: rows per key range it reads, and how it waits to look at a gap again."""

    chunk_rows: int = DEFAULT_CHUNK_ROWS
    pause: Callable[[float], object] = time.sleep


class _WithdrawableSource:
    """The source as ``compare_table`` reads it, asking whether the table was withdrawn between key ranges.

    Asked at each range read and every ``every`` rows of one: the first look reads the whole table as one range.
    """

    def __init__(self, reader: RangedSource, check: Callable[[], None], every: int) -> None:
        self._reader = reader
        self._check = check
        self._every = max(1, every)

    def current_position(self) -> str:
        return self._reader.current_position()

    def captured_through(self, position: str) -> bool:
        return self._reader.captured_through(position)

    def columns(self, table: TableRef) -> list[str]:
        return self._reader.columns(table)

    def compare_rules(self, table: TableRef) -> CompareRules:
        return rules_of(self._reader, table)

    def ranged_rows(
        self, table: TableRef, key_columns: list[str], after: Key | None, through: Key | None
    ) -> Iterator[Row]:
        self._check()
        rows = self._reader.ranged_rows(table, key_columns, after, through)
        try:
            for count, row in enumerate(rows, 1):
                if count % self._every == 0:
                    self._check()
                yield row
        finally:
            close = getattr(rows, "close", None)
            if close is not None:
                close()  # the server-side cursor ends with its transaction, also when the table was withdrawn


class TableAudit:
    """Audits tables one at a time against one source connection and Fabric's tables (see the module docstring)."""

    def __init__(
        self,
        settings: AuditSettings,
        reader: AuditSource,
        mirror: MirrorSide,
        landing: Storage,
        settle_for: SettleFor,
        *,
        pacing: AuditPacing = AuditPacing(),
        withdrawn: Withdrawn = never_withdrawn,
    ) -> None:
        self._settings = settings
        self._withdrawn = withdrawn
        self._pause = pacing.pause
        self._reader = reader
        self._mirror = mirror
        self._landing = landing
        self._settle_for = settle_for
        self._chunk_rows = pacing.chunk_rows

    def audit(self, target: AuditTarget) -> AuditFinding:
        """Compare one table, confirm its differences, and choose the repair (not carried out here).

        Raises:
            TableWithdrawn: the table's rebuild or refresh was requested meanwhile (asked at each step).
        """
        keys = list(target.key_columns)
        finding = AuditFinding(target.id)

        def check() -> None:
            why = self._withdrawn(target.id)
            if why is not None:
                raise TableWithdrawn(target.id, why)

        check()
        finding.missing_files = self._gap(target.ref)
        check()  # a rebuild deletes the folder: files gone meanwhile are no gap
        if finding.missing_files:
            finding.repair = self._choose(finding)
            return finding
        caught_up = True
        wait = self._settle_for(self._reader, target)

        def settle(position: str) -> bool:
            reached = wait(position)
            check()  # the wait may be long: what the mirror holds after a rebuild began says nothing
            return reached

        def gated(position: str) -> bool:
            nonlocal caught_up
            caught_up = settle(position)
            return caught_up

        report = compare_table(
            _WithdrawableSource(self._reader, check, self._chunk_rows),
            target.ref,
            keys,
            lambda: self._mirror.read(target.ref, keys),
            settle=gated,
            chunk_rows=self._chunk_rows,
        )
        finding.rows_checked = report.source_rows + report.mirror_rows
        if not caught_up:
            finding.lagging = True
        elif not report.ok:
            finding.column_notes = [n for n in report.column_notes() if "no difference" not in n]
            suspects = unique_keys([*report.missing_keys, *report.differing_keys, *report.extra_keys])
            check()
            confirmed = self._confirm(target, keys, suspects, settle)
            if confirmed is None:
                finding.lagging, finding.column_notes = True, []  # judged next round, never clean
            else:
                finding.rereads, finding.deletes = confirmed
            if finding.deletes:
                finding.nudge = self._any_key(target, keys)
        finding.repair = self._choose(finding)
        finding.finished_at = time.time()
        return finding

    def _gap(self, table: TableRef) -> list[int]:
        """Files missing before the first one Fabric waits for, still missing a little later (no move under way)."""
        gap = missing_files(self._landing, table)
        if gap:
            self._pause(min(self._settings.settle_s, GAP_RECHECK_S))
            again = missing_files(self._landing, table)
            gap = [n for n in gap if n in again]
        return gap

    def _confirm(
        self, target: AuditTarget, keys: list[str], suspects: list[Key], settle: Settle
    ) -> tuple[list[Key], list[Key]] | None:
        """The suspects that still differ in a last look at rows the source did not change meanwhile.

        ``None`` when the mirror did not get past the last look's source position within ``settle_s``: nothing
        can be judged (a table Fabric has not created yet, or is far behind), and the round must not call it clean.
        """
        if not suspects:
            return [], []
        rules = rules_of(self._reader, target.ref)
        before = _by_key(self._reader.rows_by_keys(target.ref, keys, suspects), keys, rules)
        position = self._reader.current_position()
        if not settle(position):
            return None
        mirror = self._mirror.read(target.ref, keys) or pa.table({})
        after = _by_key(self._reader.rows_by_keys(target.ref, keys, suspects), keys, rules)
        steady = [k for k in suspects if _form(before.get(k), rules) == _form(after.get(k), rules)]
        wanted = set(steady)
        rows = mirror.to_pylist() if mirror.num_columns else []
        held = [row for row in rows if _plain_key(row, keys, rules, source=False) in wanted]
        held_table = pa.Table.from_pylist(held, mirror.schema) if mirror.num_columns else pa.table({})
        source_rows = [after[k] for k in steady if k in after]
        check = rules.compare_rows(target.id, keys, source_rows, held_table)
        rereads = unique_keys([*check.missing_keys, *check.differing_keys, *check.extra_keys])
        return rereads, unique_keys(check.extra_keys)

    def _any_key(self, target: AuditTarget, keys: list[str]) -> Key | None:
        rows = self._reader.ranged_rows(target.ref, keys, None, None)
        try:
            first = next(iter(rows), None)
        finally:
            close = getattr(rows, "close", None)
            if close is not None:
                close()
        return None if first is None else tuple(first[k] for k in keys)

    def _choose(self, finding: AuditFinding) -> str:
        if finding.lagging:
            return "lagging"
        if finding.clean:
            return "none"
        if finding.missing_files or finding.column_notes:
            return "rebuild"
        if finding.differences > self._settings.repair_threshold:
            return "rebuild"
        return "rows"


def left_out(table: str, why: str | None) -> bool:
    """Say that ``table`` is not judged now, when ``why`` (``Withdrawn``'s answer) says it is withdrawn."""
    if why is None:
        return False
    log.info("audit %s: not judged while its rebuild or refresh is requested or under way (%s)", table, why)
    return True


class AuditRound:
    """One round over the audited tables, within the row budget; records metrics and each table's last audit."""

    def __init__(
        self,
        settings: AuditSettings,
        audit: Callable[[AuditTarget], AuditFinding],
        repairs: Repairs,
        *,
        stop: threading.Event | None = None,
        clock: Callable[[], float] = time.monotonic,
        checkpoint: Storage | None = None,
        withdrawn: Withdrawn = never_withdrawn,
    ) -> None:
        self._settings = settings
        self._checkpoint = checkpoint
        self._withdrawn = withdrawn
        self._audit = audit
        self._repairs = repairs
        self._stop = stop or threading.Event()
        self._clock = clock

    def run(self, targets: Sequence[AuditTarget]) -> list[AuditFinding]:
        """Audit each target, repair what differs, and keep under ``max_rows_per_s`` by pausing between tables.

        A table withdrawn (``Withdrawn``) at its turn, while it is compared, or before its finding counts is left
        out: no finding, no difference counted, no repair. Targets are chosen at the round's start, so a rebuild
        requested during the round (by this round's own repair, ``rebuild``, or a schema change) is asked about here.
        """
        findings = []
        for target in targets:
            if self._stop.is_set():
                break
            if left_out(target.id, self._withdrawn(target.id)):
                continue
            started = self._clock()
            try:
                finding = self._audit(target)
            except TableWithdrawn as exc:
                left_out(target.id, exc.why)
                continue
            except Exception as exc:  # noqa: BLE001 - one table's failure is logged; the round goes on
                log.error("audit %s: not compared (%s)", target.id, exc)
                continue
            if left_out(target.id, self._withdrawn(target.id)):
                continue  # withdrawn after its last look: its differences may be the rebuild's deletion
            if self._stop.is_set():
                break  # stopped meanwhile: the lag gate's waits were cut short, so the finding judges a mirror behind
            self._record(finding)
            self._keep(finding)
            findings.append(finding)
            budget_s = finding.rows_checked / self._settings.max_rows_per_s
            self._stop.wait(max(0.0, budget_s - (self._clock() - started)))
        return findings

    def _keep(self, finding: AuditFinding) -> None:
        """The table's last audit, for ``tables`` (a failure to write it is only logged)."""
        if self._checkpoint is None:
            return
        status = TableAuditStatus(
            finding.finished_at,
            finding.rows_checked,
            finding.differences,
            finding.repair,
            finding.finished_at if finding.clean else None,
            finding.repair_error,
        )
        try:
            write_audit_status(self._checkpoint, finding.table, status)
        except OSError as exc:
            log.warning("audit %s: its status could not be recorded (%s)", finding.table, exc)

    def _record(self, finding: AuditFinding) -> None:
        metrics.AUDIT_ROWS_CHECKED.inc(finding.rows_checked)
        if finding.lagging:
            log.warning("%s", finding.line())
            return
        if finding.clean:
            metrics.AUDIT_LAST_CLEAN.labels(table=finding.table).set(finding.finished_at)
            log.info("%s", finding.line())
            return
        metrics.AUDIT_DIFFERENCES.labels(table=finding.table).inc(finding.differences)
        log.warning("%s", finding.line())
        try:
            repair(finding, self._repairs)
        except Exception as exc:  # noqa: BLE001 - the next round finds the difference again
            finding.repair_error = first_line(str(exc)) or type(exc).__name__
            log.error("audit %s: the repair failed (%s); tried again next round", finding.table, exc)


def _by_key(rows: Sequence[Row], keys: list[str], rules: CompareRules) -> dict[Key, Row]:
    return {_plain_key(row, keys, rules, source=True): row for row in rows}


def _plain_key(row: Row, keys: list[str], rules: CompareRules, *, source: bool) -> Key:
    return tuple(rules.form(k, row.get(k), None, source=source) for k in keys)


def _form(row: Row | None, rules: CompareRules) -> Any:
    if row is None:
        return None
    return tuple(sorted((k, repr(rules.form(k, v, None, source=True))) for k, v in row.items()))
