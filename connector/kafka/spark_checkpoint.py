"""Reads Spark's streaming checkpoint (``<checkpoint>/spark``): which offsets each batch id reads.

Spark writes ``offsets/<id>`` before it runs batch ``<id>`` (``v1``, a metadata line, then one line of
offsets per source) and ``commits/<id>`` after the batch's ``foreachBatch`` returned. The connector only
reads them, to check them against its ledger (``connector.publish.source_offsets``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from connector.errors import LandingZoneCorrupt
from connector.publish.ledger_state import LedgerState
from connector.publish.source_offsets import check_offsets_log, check_start, kafka_offsets

if TYPE_CHECKING:
    from connector.config import SourceSettings


GARBLED_RECOVERY = (
    "To recover, restore the Spark checkpoint folder that belongs with the ledger from a backup, or (Kafka source) "
    "run once with `run --resume-from-ledger`, which moves the Spark checkpoint aside and starts a new one from the "
    "Kafka offsets the ledger's last published batch ended at"
)


class SparkCheckpoint:
    """One query's checkpoint folder, read-only."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def offsets(self, batch_id: int) -> tuple[str, ...] | None:
        """The source offsets lines Spark logged for ``batch_id``; ``None`` when it has no such log."""
        path = self.folder / "offsets" / str(batch_id)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            msg = f"Spark's offsets log {path} is unreadable ({exc}). {GARBLED_RECOVERY}"
            raise LandingZoneCorrupt(msg) from None
        lines = text.split("\n")
        if len(lines) < 3 or not lines[0].startswith("v"):
            msg = (
                f"Spark's offsets log {path} is not one Spark wrote (expected a version line, a metadata line "
                f"and the source offsets). {GARBLED_RECOVERY}"
            )
            raise LandingZoneCorrupt(msg)
        return tuple(line for line in lines[2:] if line)

    def verify_ledger(self, state: LedgerState) -> None:
        """Refuse to start when this checkpoint is missing, behind, ahead of, or different from the ledger.

        Raises:
            LandingZoneCorrupt: they disagree; the message says how and how to recover.
        """
        last = state.last_committed_batch
        offsets = self.offsets(last) if last >= 0 else None
        check_start(state, offsets, self.last_committed(), str(self.folder))

    def verify_source(self, source: SourceSettings) -> None:
        """Refuse to start when Spark's latest offsets entry comes from another source than ``source``.

        Raises:
            ConfigError: written by the other kind of source (files, Kafka), or for none of the topics
                ``source.topics`` matches; the message says which and what to do.
        """
        batch_id = max((int(p.name) for p in _entries(self.folder / "offsets")), default=None)
        if batch_id is None:
            return
        offsets = self.offsets(batch_id)
        if offsets is not None:
            check_offsets_log(offsets, batch_id, source.kind, source.topics, str(self.folder))

    def newest_committed_offsets(self) -> tuple[int, dict[str, dict[str, int]]] | None:
        """The Kafka end offsets of the newest batch Spark committed, and its id; ``None`` when unknown.

        Spark commits a batch only after ``foreachBatch`` returned, so everything up to these offsets was published.
        A missing or damaged log, or the file source's, gives ``None``: ``--resume-from-ledger`` then falls back to
        the ledger's own record.
        """
        for batch_id in sorted((int(p.name) for p in _entries(self.folder / "commits")), reverse=True):
            try:
                lines = self.offsets(batch_id)
            except LandingZoneCorrupt:
                continue
            ends = kafka_offsets(lines) if lines is not None else None
            if ends:
                return batch_id, ends
        return None

    def last_committed(self) -> int | None:
        """The highest batch id in Spark's commit log, ``None`` when it has none."""
        ids = [int(p.name) for p in _entries(self.folder / "commits")]
        return max(ids, default=None)


def _entries(folder: Path) -> list[Path]:
    """A log folder's batch files (Hadoop also writes hidden ``.<id>.crc`` checksums and temporary files)."""
    if not folder.is_dir():
        return []
    return [p for p in folder.iterdir() if p.name.isdigit() and p.is_file()]
