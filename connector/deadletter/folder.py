"""The folder dead-letter output: poison records as JSON lines in a folder outside the landing zone.

Separate from ``writer`` (the writer interface; the record and the policy are ``connector.collect.poison``) and
from ``kafka``, so that each output's layout, replay rule and client live on their own.
"""

from __future__ import annotations

import base64
import logging
import re
from collections.abc import Sequence

import orjson

from connector.collect.poison import DeadLetter
from connector.deadletter.writer import DeadLetterWriter
from connector.storage import Storage, join

_LOG = logging.getLogger(__name__)


class FolderDeadLetterWriter(DeadLetterWriter):
    """One JSON-lines file per batch and table: ``<table>/<batch_id:020d>.jsonl``, in Kafka order.

    Each line holds ``topic``, ``partition``, ``offset``, ``timestamp_ms``, ``table``, ``error``,
    ``batch_id``, ``key`` and ``value`` (base64, or null) and ``headers`` (``[name, base64 or null]``
    pairs). Files are created with the storage's no-overwrite create; when a replayed batch finds its
    file, letters already in it (by topic, partition, offset) are skipped and the file is rewritten
    only if some were missing, so the folder never holds a record twice.
    """

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self.location = storage.url

    def write(self, batch_id: int, letters: Sequence[DeadLetter]) -> None:
        """Store ``letters``; see the class docstring for the layout and the replay rule."""
        by_table: dict[str, list[DeadLetter]] = {}
        for letter in letters:
            by_table.setdefault(letter.table, []).append(letter)
        for table, group in sorted(by_table.items()):
            path = join(_folder_name(table), f"{batch_id:020d}.jsonl")
            group.sort(key=DeadLetter.sort_key)
            lines = [_line(batch_id, letter) for letter in group]
            try:
                self._storage.create(path, b"".join(lines))
            except FileExistsError:
                written = self._storage.read_bytes(path)
                present = {_position(line) for line in written.splitlines() if line.strip()}
                missing = [line for line in lines if _position(line) not in present]
                if not missing:
                    continue
                merged = sorted([*(ln + b"\n" for ln in written.splitlines() if ln.strip()), *missing], key=_position)
                self._storage.replace(path, b"".join(merged))
            _LOG.warning(
                "dead-lettered %d record(s) of table %s (batch %d) to %s; first %s: %s",
                len(group),
                table,
                batch_id,
                join(self.location, path),
                group[0].position,
                group[0].error,
            )


def _folder_name(table: str) -> str:
    """A table id as one safe folder name (no separators, no leading dot or underscore)."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", table).lstrip("._") or "unknown"
    return name


def _line(batch_id: int, letter: DeadLetter) -> bytes:
    entry = {
        "topic": letter.topic,
        "partition": letter.partition,
        "offset": letter.offset,
        "timestamp_ms": letter.timestamp_ms,
        "table": letter.table,
        "error": letter.error,
        "batch_id": batch_id,
        "key": _b64(letter.key),
        "value": _b64(letter.value),
        "headers": [[name, _b64(value)] for name, value in letter.headers],
    }
    return orjson.dumps(entry) + b"\n"


def _position(line: bytes) -> tuple[str, int, int]:
    entry = orjson.loads(line)
    return str(entry["topic"]), int(entry["partition"]), int(entry["offset"])


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")
