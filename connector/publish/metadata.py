"""``_metadata.json`` (per table, written once) and ``_partnerEvents.json`` (landing-zone root)."""

from __future__ import annotations

from typing import Any

import orjson

from connector.errors import TableStopped, rebuild_hint
from connector.landing_zone import METADATA_FILE, PARTNER_EVENTS_FILE, TableRef
from connector.storage.base import Storage, join


def table_metadata(key_columns: tuple[str, ...], extra: dict[str, Any]) -> dict[str, Any]:
    """The content of a table's ``_metadata.json``."""
    return {"keyColumns": list(key_columns), **extra}


#: Keys of ``FileFormatTypeProperties`` whose absence means a value (the seed's table of defaults).
_DELIMITED_DEFAULTS: dict[str, Any] = {
    "firstrowasheader": True,
    "rowseparator": "\r\n",
    "columnseparator": ",",
    "quotecharacter": '"',
    "escapecharacter": "\\",
    "encoding": "UTF-8",
}
#: ``FileFormat`` values by their lower-case spelling (CSV is handled apart: it also implies an extension).
_FORMATS = {"parquet": "Parquet", "delimitedtext": "DelimitedText"}
_DELIMITED_KEYS = ("fileextension", "schemadefinition", "fileformattypeproperties")
_ABSENT = object()


class _Ambiguous(ValueError):
    """A JSON object spells one key twice (names differ only in case) with different values."""


def ensure_table_metadata(storage: Storage, table: TableRef, content: dict[str, Any]) -> bool:
    """Write ``_metadata.json`` once; an existing one must mean the same as ``content``.

    Every key present in either file counts, not only those ``content`` has: Parquet content omits the
    format keys, so an existing file declaring delimited text must still be refused. Key names match
    without regard to case (the seed spells both ``keyColumns`` and ``KeyColumns``), and an absent key
    means its documented default (``FileFormat``: Parquet, or CSV when delimited-text keys are present;
    ``isUpsertDefaultRowMarker``: false; the delimited-text properties' defaults), so a file that only
    spells a default out agrees.

    Returns whether it was written now.

    Raises:
        TableStopped: an existing ``_metadata.json`` differs (keyColumns can never change).
    """
    path = join(table.folder, METADATA_FILE)
    data = orjson.dumps(content, option=orjson.OPT_INDENT_2)
    try:
        storage.create(path, data)
        return True
    except FileExistsError:
        pass
    where = f"{storage.url}/{path}"
    try:
        existing = orjson.loads(storage.read_bytes(path))
    except orjson.JSONDecodeError as exc:
        raise TableStopped(table.id, f"{where} exists but is not valid JSON: {exc}") from exc
    if not isinstance(existing, dict):
        raise TableStopped(table.id, f"{where} exists but is not a JSON object")
    try:
        have, want = _effective(existing), _effective(content)
    except _Ambiguous as exc:
        msg = f"{where} {exc}; a _metadata.json must say one thing: {rebuild_hint(table.id)}"
        raise TableStopped(table.id, msg) from None
    names = {**_names(content), **_names(existing)}
    existing_keys, new_keys = have.get("keycolumns"), want.get("keycolumns")
    if existing_keys != new_keys:
        raise TableStopped(
            table.id,
            f"{where} declares {names.get('keycolumns', 'keyColumns')} {existing_keys}, but the source key is "
            f"{new_keys}; keyColumns can never change: {rebuild_hint(table.id)}",
        )
    keys = sorted(key for key in have.keys() | want.keys() if have.get(key, _ABSENT) != want.get(key, _ABSENT))
    if "fileformat" in keys:
        # The other format keys follow from it: name only those the existing file writes itself.
        written = _flat(existing)
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
    return False


def _effective(metadata: dict[str, Any]) -> dict[str, Any]:
    """``metadata`` as the mirroring service reads it: flat lower-case key names, absent keys as defaults.

    ``FileFormatTypeProperties`` (when an object) becomes one ``fileformattypeproperties.<name>`` key per
    property, so that a difference names the property.
    """
    out = _flat(metadata)
    delimited_keys = any(key == k or key.startswith(f"{k}.") for key in out for k in _DELIMITED_KEYS)
    file_format = out.get("fileformat")
    if file_format is None:
        file_format = "csv" if delimited_keys else "parquet"
    if isinstance(file_format, str):
        file_format = _FORMATS.get(file_format.lower(), file_format)
    if isinstance(file_format, str) and file_format.lower() == "csv":  # delimited text with its default extension
        file_format = _FORMATS["delimitedtext"]
        out.setdefault("fileextension", "csv")
    out["fileformat"] = file_format
    if file_format == _FORMATS["parquet"]:
        out.setdefault("fileextension", "parquet")
    extension = out.get("fileextension")
    if isinstance(extension, str):
        out["fileextension"] = extension.lstrip(".").lower()
    if out.get("isupsertdefaultrowmarker") is None:
        out["isupsertdefaultrowmarker"] = False
    if file_format == _FORMATS["delimitedtext"] and "fileformattypeproperties" not in out:  # (not a non-object value)
        for name, value in _DELIMITED_DEFAULTS.items():
            out.setdefault(f"fileformattypeproperties.{name}", value)
    return out


def _flat(metadata: dict[str, Any]) -> dict[str, Any]:
    """Lower-case key names, with the properties of an object ``FileFormatTypeProperties`` one level up.

    Raises:
        _Ambiguous: two names differ only in case and their values differ.
    """
    out = _folded(metadata)
    properties = out.get("fileformattypeproperties")
    if isinstance(properties, dict):
        del out["fileformattypeproperties"]
        out.update({f"fileformattypeproperties.{key}": value for key, value in _folded(properties).items()})
    return out


def _folded(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with lower-case key names.

    Raises:
        _Ambiguous: two names differ only in case and their values differ.
    """
    out: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for name, value in obj.items():
        key = name.lower()
        if key in out and out[key] != value:
            msg = f"declares {spelled[key]} and {name} with different values"
            raise _Ambiguous(msg)
        out[key] = value
        spelled[key] = name
    return out


def _names(obj: dict[str, Any]) -> dict[str, str]:
    """Flat lower-case key name → the name as ``obj`` spells it (for messages)."""
    names = {name.lower(): name for name in obj}
    for name, value in obj.items():
        if name.lower() == "fileformattypeproperties" and isinstance(value, dict):
            names.update({f"{name.lower()}.{key.lower()}": f"{name}.{key}" for key in value})
    return names


def _shown(key: str, raw: dict[str, Any], effective: dict[str, Any]) -> str:
    """The value of ``key`` for an error message: as written, or absent (and the default that means)."""
    written = _flat(raw).get(key, _ABSENT)
    if written is not _ABSENT:
        return _json(written)
    value = effective.get(key, _ABSENT)
    return "absent" if value is _ABSENT else f"absent (so {_json(value)})"


def _json(value: Any) -> str:
    text = orjson.dumps(value).decode()
    return text if len(text) <= 200 else f"{text[:200]}…"  # schemas can be long


def ensure_partner_events(storage: Storage, partner_name: str, source_type: str, source_version: str | None) -> None:
    """Write ``_partnerEvents.json`` at the root if absent (an existing one is left as it is)."""
    info: dict[str, Any] = {"sourceType": source_type}
    if source_version:
        info["sourceVersion"] = source_version
    content = {"partnerName": partner_name, "sourceInfo": info}
    try:
        storage.create(PARTNER_EVENTS_FILE, orjson.dumps(content, option=orjson.OPT_INDENT_2))
    except FileExistsError:
        return
