"""What ``verify`` reports for one table, whichever source database it compared."""

from __future__ import annotations

from dataclasses import dataclass, field


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
