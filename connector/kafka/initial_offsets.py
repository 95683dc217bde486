"""A query's initial offsets in its checkpoint, byte for byte as Spark's Kafka source keeps them.

Spark's Kafka source resolves ``startingOffsets`` once and writes the result to ``<checkpoint>/sources/0/0`` (a NUL
byte, ``v1``, a newline and the offsets JSON, no newline after): a restart before batch 0 committed starts that batch
at the same offsets, and ``connector.kafka.ranges`` reads a first batch's start there. Writing the same file
lets a checkpoint pass between Spark's source and ours in either direction.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from connector.errors import LandingZoneCorrupt

Offsets = dict[str, dict[str, int]]
_HEADER = b"\0v1\n"


def initial_offsets_path(checkpoint: Path) -> Path:
    """Where Spark's Kafka source (the query's first source) keeps its initial offsets."""
    return checkpoint / "sources" / "0" / "0"


def spark_json(offsets: Offsets) -> str:
    """``offsets`` as Spark's Kafka source writes them: compact, topics and partitions in order."""
    ordered = {topic: dict(sorted(offsets[topic].items(), key=lambda item: int(item[0]))) for topic in sorted(offsets)}
    return json.dumps(ordered, separators=(",", ":"))


def read_initial_offsets(checkpoint: Path) -> Offsets | None:
    """The initial offsets kept in ``checkpoint``; ``None`` when none were written yet."""
    path = initial_offsets_path(checkpoint)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    version, _, body = data.lstrip(b"\0").partition(b"\n")
    try:
        parsed = json.loads(body)
        offsets = {str(t): {str(p): int(o) for p, o in parts.items()} for t, parts in parsed.items()}
    except (ValueError, TypeError, AttributeError):
        offsets = None
    if not version.startswith(b"v") or offsets is None:
        msg = (
            f"{path} holds no Kafka initial offsets; restore the checkpoint folder from a backup, or run with "
            "`--resume-from-ledger`"
        )
        raise LandingZoneCorrupt(msg)
    return offsets


def write_initial_offsets(checkpoint: Path, offsets: Offsets) -> None:
    """Keep ``offsets`` as the query's initial offsets, whole or not at all (a crash leaves no half file)."""
    path = initial_offsets_path(checkpoint)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=".0.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(_HEADER + spark_json(offsets).encode())
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
