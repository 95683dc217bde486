"""What ``verify`` reports for one table, whichever source database it compared."""

from __future__ import annotations

from collections.abc import Callable, Iterable
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

    @property
    def ok(self) -> bool:
        """The mirror equals the source."""
        return not (self.missing or self.extra or self.differing or self.refused)

    def add_example(self, text: str, limit: int = 5) -> None:
        """Keep ``text`` as an example difference, up to ``limit`` of them."""
        if len(self.examples) < limit:
            self.examples.append(text)

    def line(self) -> str:
        """The report line the CLI prints."""
        if self.refused is not None:
            return f"{self.table}: refused by Delta (Fabric would stop this table): {self.refused}"
        return (
            f"{self.table}: source={self.source_rows} mirror={self.mirror_rows} matching={self.matching} "
            f"missing={self.missing} extra={self.extra} differing={self.differing}"
        )


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
            report.add_example(f"missing key {key}")
            continue
        if len(candidates) > 1:
            report.extra += len(candidates) - 1
            report.add_example(f"key {key} appears {len(candidates)} times in the mirror")
        diffs = differences(row, candidates[0])
        if diffs:
            report.differing += 1
            report.add_example(f"key {key}: " + "; ".join(diffs), max_examples)
        else:
            report.matching += 1
    for key, rows in mirrored.items():
        if key not in seen:
            report.extra += len(rows)
            report.add_example(f"extra key {key}")
    return report
