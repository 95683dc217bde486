"""What ``verify`` reports for one table, whichever source database it compared.

A table is judged whole: its rows (``compare_by_key``; a table without a key as a multiset of rows,
``compare_as_multiset``), its column set (``TableReport.judge_columns``), and whether it is on both sides at all
(``absent``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

Row = dict[str, Any]


@dataclass
class TableReport:
    """Counts for one table, and a few example differences."""

    table: str
    source_rows: int = 0
    mirror_rows: int = 0
    matching: int = 0
    missing: int = 0
    extra: int = 0
    differing: int = 0
    examples: list[str] = field(default_factory=list)
    refused: str | None = None
    """Why Delta (so Fabric) refused the table, when it did: then nothing was compared."""
    absent: str | None = None
    """Where the table is missing (the landing zone or the source), when it is: then nothing was compared."""
    extra_columns: dict[str, int] = field(default_factory=dict)
    """Mirror columns the source table lacks (dropped or renamed there), each with the rows holding a value."""
    missing_columns: list[str] = field(default_factory=list)
    """Source columns the mirror lacks, though it holds the table."""
    missing_keys: list[tuple[Any, ...]] = field(default_factory=list)
    """Keys of the ``missing`` rows, as the source gives them (the audit re-reads them)."""
    differing_keys: list[tuple[Any, ...]] = field(default_factory=list)
    """Keys of the ``differing`` rows, as the source gives them (the audit re-reads them)."""
    extra_keys: list[tuple[Any, ...]] = field(default_factory=list)
    """Keys of the ``extra`` rows, as the mirror holds them (the audit deletes those the source lacks)."""

    @property
    def ok(self) -> bool:
        """The mirror equals the source: in rows, in column set, and the table is on both sides."""
        return not (
            self.missing
            or self.extra
            or self.differing
            or self.refused
            or self.absent
            or self.missing_columns
            or any(self.extra_columns.values())
        )

    def judge_columns(self, source_columns: Sequence[str], mirror: pa.Table) -> None:
        """Record the column set's differences between the source table and ``mirror`` (what Delta holds).

        A mirror column the source lacks is a difference when any row holds a value in it: after a
        ``DROP COLUMN`` (or the old name of a ``RENAME COLUMN``) Fabric keeps the old rows' values, so the
        mirror shows data the source no longer has. One that is NULL in every row is recorded but is no
        difference: it is what Fabric shows at worst after a column was dropped and the folder recreated,
        and no query reads a value from it that the source lacks.

        A source column the mirror lacks is a difference even where every source value is NULL: queries
        naming it fail on the mirror (a nullable ``ADD COLUMN`` on a table no change has touched since, or
        a column Debezium leaves out). A mirror without any column holds no Delta table yet (no data file):
        its rows, if the source has any, are already missing, so no column is reported on top.
        """
        source = set(source_columns)
        for name in mirror.column_names:
            if name not in source:
                self.extra_columns[name] = mirror.num_rows - mirror.column(name).null_count
        if mirror.num_columns:
            present = set(mirror.column_names)
            self.missing_columns = [name for name in source_columns if name not in present]

    def add_example(self, text: str, limit: int = 5) -> None:
        """Keep ``text`` as an example difference, up to ``limit`` of them."""
        if len(self.examples) < limit:
            self.examples.append(text)

    def line(self) -> str:
        """The report line the CLI prints."""
        if self.refused is not None:
            return f"{self.table}: refused by Delta (Fabric would stop this table): {self.refused}"
        if self.absent is not None:
            return f"{self.table}: {self.absent}"
        counts = (
            f"{self.table}: source={self.source_rows} mirror={self.mirror_rows} matching={self.matching} "
            f"missing={self.missing} extra={self.extra} differing={self.differing}"
        )
        return "; ".join([counts, *self.column_notes()])

    def column_notes(self) -> list[str]:
        """The column set's findings as the report line ends with them (``judge_columns``)."""
        notes = [
            f"extra column {name} holds values in {rows} row{'' if rows == 1 else 's'}"
            for name, rows in sorted(self.extra_columns.items())
            if rows
        ]
        notes += [f"missing column {name} (in the source, not in the mirror)" for name in self.missing_columns]
        harmless = sorted(name for name, rows in self.extra_columns.items() if not rows)
        if harmless:
            plural = "s" if len(harmless) > 1 else ""
            notes.append(f"extra column{plural} {', '.join(harmless)} NULL in every row (no difference)")
        return notes


def compare_by_key(
    table: str,
    source: Iterable[Row],
    mirror: pa.Table,
    *,
    source_key: Callable[[Row], tuple[Any, ...]],
    mirror_key: Callable[[Row], tuple[Any, ...]],
    differences: Callable[[Row, Row], list[str]],
    max_examples: int = 5,
) -> TableReport:
    """Every source row against the mirror row of its key; each source reader gives its own comparable forms.

    A key the mirror lacks is missing, one it holds twice (or one the source lacks) extra, and a row whose
    ``differences`` are not empty differing.
    """
    report = TableReport(table)
    mirrored: dict[tuple[Any, ...], list[Row]] = {}
    for row in mirror.to_pylist():
        mirrored.setdefault(mirror_key(row), []).append(row)
    report.mirror_rows = mirror.num_rows
    seen: set[tuple[Any, ...]] = set()
    for row in source:
        report.source_rows += 1
        key = source_key(row)
        seen.add(key)
        candidates = mirrored.get(key, [])
        if not candidates:
            report.missing += 1
            report.missing_keys.append(key)
            report.add_example(f"missing key {key}")
            continue
        if len(candidates) > 1:
            report.extra += len(candidates) - 1
            report.extra_keys.append(mirror_key(candidates[0]))
            report.add_example(f"key {key} appears {len(candidates)} times in the mirror")
        diffs = differences(row, candidates[0])
        if diffs:
            report.differing += 1
            report.differing_keys.append(key)
            report.add_example(f"key {key}: " + "; ".join(diffs), max_examples)
        else:
            report.matching += 1
    for key, rows in mirrored.items():
        if key not in seen:
            report.extra += len(rows)
            report.extra_keys.append(key)
            report.add_example(f"extra key {key}")
    return report


def compare_as_multiset(
    table: str,
    source: Iterable[Row],
    mirror: pa.Table,
    *,
    source_form: Callable[[Row], Hashable],
    mirror_form: Callable[[Row], Hashable],
    max_examples: int = 5,
) -> TableReport:
    """A table without a key: its rows as a multiset (a ``Counter`` of each side's comparable row forms).

    Nothing tells two identical rows apart, nor which mirror row stands for a changed source row: a row the source
    holds more often than the mirror is missing, one the mirror holds more often extra (a changed row is both), and
    no row is ``differing``. No keys are listed: the audit's repairs re-read and delete by key.
    """
    report = TableReport(table, mirror_rows=mirror.num_rows)
    mirrored = Counter(mirror_form(row) for row in mirror.to_pylist())
    wanted: Counter[Hashable] = Counter()
    for row in source:
        report.source_rows += 1
        wanted[source_form(row)] += 1
    for form, count in wanted.items():
        held = mirrored.get(form, 0)
        report.matching += min(count, held)
        if count > held:
            report.missing += count - held
            report.add_example(f"missing row {form} ({count - held} of {count})", max_examples)
    for form, held in mirrored.items():
        surplus = held - wanted.get(form, 0)
        if surplus > 0:
            report.extra += surplus
            report.add_example(f"extra row {form} ({surplus} more than the source's {held - surplus})", max_examples)
    return report
