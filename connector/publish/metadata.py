"""Writing a table's ``_metadata.json``, once: an existing one must mean the same, or the table stops.

What the file says, and what an existing file means, is the landing-zone contract (``connector.landing_zone`` (its
``layout`` and ``metadata``), which also writes the root's ``_partnerEvents.json``); this module decides what to do
when a table's file is already there.
"""

from __future__ import annotations

from typing import Any

import orjson

from connector.errors import SchemaChanged, TableStopped, rebuild_hint
from connector.landing_zone.layout import METADATA_FILE, TableRef
from connector.landing_zone.metadata import (
    AmbiguousMetadata,
    effective_metadata,
    flat_metadata,
    metadata_spellings,
)
from connector.landing_zone.metadata import table_metadata as table_metadata
from connector.storage.base import Storage, join

_ABSENT = object()


def ensure_table_metadata(storage: Storage, table: TableRef, content: dict[str, Any]) -> bool:
    """Write ``_metadata.json`` once; an existing one must mean the same as ``content``.

    Every key present in either file counts, not only those ``content`` has: Parquet content omits the
    format keys, so an existing file declaring delimited text must still be refused. Key names match
    without regard to case (the seed spells both ``keyColumns`` and ``KeyColumns``), and an absent key
    means its documented default (``FileFormat``: Parquet, or CSV when delimited-text keys are present;
    ``isUpsertDefaultRowMarker``: false; the delimited-text properties' defaults), so a file that only
    spells a default out agrees.

    The existing file is read first: a table is far more often continued (every first batch of a process) than
    created, and on OneLake a create that finds the file there costs six round trips against one read.

    Returns whether it was written now.

    Raises:
        TableStopped: an existing ``_metadata.json`` differs (keyColumns can never change).
    """
    path = join(table.folder, METADATA_FILE)
    try:
        raw = storage.read_bytes(path)
    except FileNotFoundError:
        try:
            storage.create(path, orjson.dumps(content, option=orjson.OPT_INDENT_2))
            return True
        except FileExistsError:
            raw = storage.read_bytes(path)  # written meanwhile by someone else: it must agree all the same
    where = f"{storage.url}/{path}"
    try:
        existing = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise TableStopped(table.id, f"{where} exists but is not valid JSON: {exc}") from exc
    if not isinstance(existing, dict):
        raise TableStopped(table.id, f"{where} exists but is not a JSON object")
    _refuse_differences(table, where, existing, content)
    return False


def _refuse_differences(table: TableRef, where: str, existing: dict[str, Any], content: dict[str, Any]) -> None:
    """Raise ``TableStopped`` (``SchemaChanged`` for the key) when ``existing`` does not mean ``content``."""
    try:
        have, want = effective_metadata(existing), effective_metadata(content)
    except AmbiguousMetadata as exc:
        msg = f"{where} {exc}; a _metadata.json must say one thing: {rebuild_hint(table.id)}"
        raise TableStopped(table.id, msg) from None
    names = {**metadata_spellings(content), **metadata_spellings(existing)}
    existing_keys, new_keys = have.get("keycolumns"), want.get("keycolumns")
    if existing_keys != new_keys:
        raise SchemaChanged(
            table.id,
            f"{where} declares {names.get('keycolumns', 'keyColumns')} {existing_keys}, but the source key is "
            f"{new_keys}; keyColumns can never change: {rebuild_hint(table.id)}",
            "key_changed",
        )
    keys = sorted(key for key in have.keys() | want.keys() if have.get(key, _ABSENT) != want.get(key, _ABSENT))
    if "fileformat" in keys:
        # The other format keys follow from it: name only those the existing file writes itself.
        written = flat_metadata(existing)
        keys = ["fileformat", *(key for key in keys if key != "fileformat" and key in written)]
    differences = [
        f"{names.get(key, key)} {_shown(key, existing, have)} there, {_shown(key, content, want)} needed"
        for key in keys
    ]
    if differences:
        raise TableStopped(
            table.id,
            f"{where} differs from the table this connector writes ({'; '.join(differences)}); _metadata.json is "
            f"written once and a mirrored table cannot change format, schema or settings: {rebuild_hint(table.id)}",
        )


def _shown(key: str, raw: dict[str, Any], effective: dict[str, Any]) -> str:
    """The value of ``key`` for an error message: as written, or absent (and the default that means)."""
    written = flat_metadata(raw).get(key, _ABSENT)
    if written is not _ABSENT:
        return _json(written)
    value = effective.get(key, _ABSENT)
    return "absent" if value is _ABSENT else f"absent (so {_json(value)})"


def _json(value: Any) -> str:
    text = orjson.dumps(value).decode()
    return text if len(text) <= 200 else f"{text[:200]}…"  # schemas can be long
