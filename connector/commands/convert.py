"""``convert``: kcat ``-J`` dumps → landing zone, through the same sink as the streaming job."""

from __future__ import annotations

import hashlib
import logging
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from connector.config import ConnectorSettings
from connector.errors import DecodeError, LandingZoneCorrupt
from connector.events import KafkaRecord
from connector.kcat import kcat_records_table, parse_kcat_line
from connector.mirror_writer import MirrorWriter, open_mirror_writer
from connector.publish.batch_plan import BatchInput
from connector.publish.batch_result import BatchResult
from connector.publish.ledger_format import STATE_FILE
from connector.sink import MirrorSink
from connector.storage.location import StorageLocation

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
    inputs: Iterable[str], settings: ConnectorSettings, *, checkpoint: str | None, batch_size: int = 100_000
) -> ConvertSummary:
    """Convert dumps into ``settings``' landing zone in batches of ``batch_size`` records (never two files' lines).

    Batch ids are the batches' index. The mirror's rules, the source's decoding and the dead-letter output are
    ``settings``'; ``checkpoint`` is the ledger's folder (``None``: a scratch one).

    With a ``checkpoint``, running again over the same inputs publishes nothing twice (committed batch
    ids are skipped), and inputs given again in the same order followed by new dumps publish only the new
    ones. The ledger records a digest of each batch's lines: a committed batch id whose lines differ (other
    inputs, or another order) is refused rather than skipped. Without a checkpoint, a temporary ledger is
    used and files continue after those present.

    Raises:
        LandingZoneCorrupt: a batch's lines differ from those the checkpoint published under its id.
    """
    summary = ConvertSummary()
    files = input_files(inputs)
    with (
        tempfile.TemporaryDirectory(prefix="convert-ledger-") as scratch,
        # One writer per checkpoint and landing zone, held before the sink reads the ledger or cleans up.
        open_mirror_writer(settings, checkpoint=StorageLocation(checkpoint or scratch, setting="checkpoint")) as writer,
    ):
        sink = writer.sink
        if checkpoint:
            _refuse_lost_ledger(writer, checkpoint)
        for batch_id, (lines, positions) in enumerate(_line_batches(files, batch_size)):
            identity = _input_identity(sink, batch_id, lines, positions, checkpoint or scratch)
            with sink.begin(batch_id, identity) as batch:
                table = kcat_records_table(lines)
                if table is not None:
                    batch.plan(BatchInput(table=table, columnar=settings.spark.columnar_decode))
                else:
                    batch.plan(BatchInput(records=_records(lines, positions, summary)))
                result = batch.finish()
            summary.add(result)
            log.info("%s", result.event_line())
    return summary


def _refuse_lost_ledger(writer: MirrorWriter, checkpoint: str) -> None:
    """A checkpoint without ledger state over a landing zone that has files: its ledger was lost.

    Batch ids start at 0 again, so every input would be published a second time after the files present.

    Raises:
        LandingZoneCorrupt: the landing zone holds files the (missing) ledger would have recorded.
    """
    if writer.ledger.has_state:
        return
    folder = writer.sink.first_published_file()
    if folder is None:
        return
    msg = (
        f"checkpoint {checkpoint} has no ledger state ({STATE_FILE}), but the landing zone {writer.landing_location} "
        f"already holds published files (e.g. in {folder}): converting would publish every input again after "
        "them (duplicates). Restore the checkpoint's ledger, or convert into an emptied landing zone, or convert "
        "without --checkpoint to append the inputs after the files present on purpose"
    )
    raise LandingZoneCorrupt(msg)


def _line_batches(files: list[Path], batch_size: int) -> Iterator[tuple[list[bytes], list[tuple[Path, int]]]]:
    """The dumps' non-blank lines in batches of ``batch_size``, with each line's file and line number.

    A batch never spans two files, so the batches of a file do not depend on the files after it: a later run
    over the same files plus new ones finds the same batches first.
    """
    for path in files:
        lines: list[bytes] = []
        positions: list[tuple[Path, int]] = []
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


def _input_identity(
    sink: MirrorSink, batch_id: int, lines: list[bytes], positions: list[tuple[Path, int]], checkpoint: str
) -> tuple[str, ...] | None:
    """A new batch's lines as a digest, recorded with its commit; ``None`` for a committed batch of the same lines.

    Before, a committed batch id was skipped whatever it held: a second ``convert --checkpoint`` with another
    dump published nothing and exited 0.

    Raises:
        LandingZoneCorrupt: the checkpoint published other lines under ``batch_id``.
    """
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line.rstrip(b"\r\n"))
        digest.update(b"\n")
    (first_file, first_line), (last_file, last_line) = positions[0], positions[-1]
    identity = orjson.dumps(
        {
            "sha256": digest.hexdigest(),
            "lines": len(lines),
            "from": f"{first_file.name}:{first_line}",
            "to": f"{last_file.name}:{last_line}",
        }
    ).decode()
    state = sink.state
    if batch_id > state.last_committed_batch:
        return (identity,)  # a new batch: its digest is committed with it
    recorded = state.source(batch_id)
    if recorded is None:
        return None  # published before convert recorded its inputs (or beyond the kept history): skipped as before
    published = orjson.loads(recorded.offsets[0]) if recorded.offsets else {}
    if isinstance(published, dict) and published.get("sha256") == digest.hexdigest():
        return None
    was = (
        f"{published.get('lines')} lines from {published.get('from')} to {published.get('to')}"
        if isinstance(published, dict) and "sha256" in published
        else f"source offsets {' '.join(recorded.offsets)}"
    )
    msg = (
        f"checkpoint {checkpoint} published batch {batch_id} from other input ({was}) than this run's batch "
        f"{batch_id} ({len(lines)} lines from {first_file}:{first_line} to {last_file}:{last_line}): a checkpoint "
        "follows one ordered list of dumps; give the dumps it converted again, in the same order, followed by "
        "the new ones (only those are published), or convert the new dumps without --checkpoint (appended after "
        "the files present)"
    )
    raise LandingZoneCorrupt(msg)


def _records(lines: list[bytes], positions: list[tuple[Path, int]], summary: ConvertSummary) -> Iterator[KafkaRecord]:
    """Lines one by one (a batch with a line that is not a kcat record, or with headers)."""
    for line, (path, number) in zip(lines, positions, strict=True):
        try:
            yield parse_kcat_line(line)
        except (ValueError, DecodeError) as exc:
            problem = f"{path}:{number}: not a kcat -J record: {exc}"
            summary.bad_lines.append(problem)
            log.error("%s", problem)
