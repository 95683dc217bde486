"""``convert``: kcat ``-J`` dumps → landing zone, through the same sink as the streaming job."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from connector.config import CredentialKind, MirrorSettings, SourceSettings
from connector.errors import DecodeError, LandingZoneCorrupt
from connector.events import KafkaRecord
from connector.kcat import kcat_records_table, parse_kcat_line
from connector.landing.batch_result import BatchResult
from connector.landing.deadletter import DeadLetterWriter
from connector.landing.fence import WriterFence
from connector.landing.ledger import STATE_FILE
from connector.landing.sink import MirrorSink
from connector.storage import open_storage
from connector.stream.records_batch import publish_records_table

log = logging.getLogger(__name__)


@dataclass
class ConvertSummary:
    """Totals of a conversion, and every problem met (the CLI prints them and exits non-zero)."""

    records: int = 0
    rows: int = 0
    files: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    stopped: dict[str, str] = field(default_factory=dict)
    bad_lines: list[str] = field(default_factory=list)
    dead_letters: int = 0

    @property
    def ok(self) -> bool:
        """No table stopped and every line was readable."""
        return not self.stopped and not self.bad_lines

    def add(self, result: BatchResult) -> None:
        """Fold one batch's result in."""
        self.records += result.records
        self.rows += result.rows
        self.files += result.files
        for kind, count in result.skipped.by_kind.items():
            self.skipped[kind] = self.skipped.get(kind, 0) + count
        self.stopped.update(result.stopped)
        self.dead_letters += sum(result.dead_letters.values())


def input_files(inputs: Iterable[str]) -> list[Path]:
    """Files named, and the ``*.json``/``*.jsonl`` files of folders named, in name order."""
    out: list[Path] = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            out.extend(sorted(p for p in path.iterdir() if p.suffix in (".json", ".jsonl") and p.is_file()))
        elif path.is_file():
            out.append(path)
        else:
            msg = f"input {item} does not exist"
            raise FileNotFoundError(msg)
    return out


def convert(
    inputs: Iterable[str],
    landing_zone: str,
    checkpoint: str | None,
    mirror: MirrorSettings,
    batch_size: int = 100_000,
    credential: CredentialKind = "default",
    *,
    columnar: bool = True,
    source: SourceSettings | None = None,
    dead_letters: DeadLetterWriter | None = None,
) -> ConvertSummary:
    """Convert dumps in batches of ``batch_size`` records; batch ids are the batch's index.

    With a ``checkpoint``, running again over the same inputs publishes nothing twice (committed batch
    ids are skipped). Without one, a temporary ledger is used and files continue after those present.
    """
    summary = ConvertSummary()
    files = input_files(inputs)
    with (
        tempfile.TemporaryDirectory(prefix="convert-ledger-") as scratch,
        # One writer per checkpoint and landing zone, held before the sink reads the ledger or cleans up.
        WriterFence(open_storage(landing_zone, credential), open_storage(checkpoint or scratch, credential)) as fence,
    ):
        sink = MirrorSink(
            fence.landing,
            fence.checkpoint,
            mirror,
            source=source,
            dead_letters=dead_letters,
        )
        if checkpoint:
            _refuse_lost_ledger(sink, checkpoint)
        for batch_id, (lines, positions) in enumerate(_line_batches(files, batch_size)):
            table = kcat_records_table(lines)
            if table is not None:
                result = publish_records_table(sink, batch_id, table, columnar=columnar)
            else:
                result = sink.process_batch(batch_id, _records(lines, positions, summary))
            summary.add(result)
            log.info(
                "batch=%d records=%d rows=%d files=%d tables=%d",
                batch_id,
                result.records,
                result.rows,
                result.files,
                len(result.tables),
            )
    return summary


def _refuse_lost_ledger(sink: MirrorSink, checkpoint: str) -> None:
    """A checkpoint without ledger state over a landing zone that has files: its ledger was lost.

    Batch ids start at 0 again, so every input would be published a second time after the files present.

    Raises:
        LandingZoneCorrupt: the landing zone holds files the (missing) ledger would have recorded.
    """
    if sink.ledger.has_state:
        return
    folder = sink.first_published_file()
    if folder is None:
        return
    msg = (
        f"checkpoint {checkpoint} has no ledger state ({STATE_FILE}), but the landing zone {sink.landing.url} "
        f"already holds published files (e.g. in {folder}): converting would publish every input again after "
        "them (duplicates). Restore the checkpoint's ledger, or convert into an emptied landing zone, or convert "
        "without --checkpoint to append the inputs after the files present on purpose"
    )
    raise LandingZoneCorrupt(msg)


def _line_batches(files: list[Path], batch_size: int) -> Iterator[tuple[list[bytes], list[tuple[Path, int]]]]:
    """The dumps' non-blank lines in batches of ``batch_size``, with each line's file and line number."""
    lines: list[bytes] = []
    positions: list[tuple[Path, int]] = []
    for path in files:
        with path.open("rb") as stream:
            for number, line in enumerate(stream, start=1):
                if len(line) < 8 and not line.strip():  # only short lines can be blank: skip the scan of long ones
                    continue
                lines.append(line)
                positions.append((path, number))
                if len(lines) == batch_size:
                    yield lines, positions
                    lines, positions = [], []
    if lines:
        yield lines, positions


def _records(lines: list[bytes], positions: list[tuple[Path, int]], summary: ConvertSummary) -> Iterator[KafkaRecord]:
    """Lines one by one (a batch with a line that is not a kcat record, or with headers)."""
    for line, (path, number) in zip(lines, positions, strict=True):
        try:
            yield parse_kcat_line(line)
        except (ValueError, DecodeError) as exc:
            problem = f"{path}:{number}: not a kcat -J record: {exc}"
            summary.bad_lines.append(problem)
            log.error("%s", problem)
