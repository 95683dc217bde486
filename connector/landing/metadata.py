"""``_metadata.json`` (per table, written once) and ``_partnerEvents.json`` (landing-zone root)."""

from __future__ import annotations

from typing import Any

import orjson

from connector.errors import TableStopped
from connector.landing.layout import METADATA_FILE, PARTNER_EVENTS_FILE, TableRef
from connector.storage.base import Storage, join


def table_metadata(key_columns: tuple[str, ...], extra: dict[str, Any]) -> dict[str, Any]:
    """The content of a table's ``_metadata.json``."""
    return {"keyColumns": list(key_columns), **extra}


def ensure_table_metadata(storage: Storage, table: TableRef, content: dict[str, Any]) -> bool:
    """Write ``_metadata.json`` once; an existing one must declare the same key columns.

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
    try:
        existing = orjson.loads(storage.read_bytes(path))
    except orjson.JSONDecodeError as exc:
        raise TableStopped(table.id, f"{storage.url}/{path} exists but is not valid JSON: {exc}") from exc
    if not isinstance(existing, dict):
        raise TableStopped(table.id, f"{storage.url}/{path} exists but is not a JSON object")
    existing_keys = existing.get("keyColumns", existing.get("KeyColumns"))
    if existing_keys != content["keyColumns"]:
        raise TableStopped(
            table.id,
            f"{storage.url}/{path} declares keyColumns {existing_keys}, but the source key is "
            f"{content['keyColumns']}; keyColumns can never change: drop the table folder to reload it",
        )
    for name in ("FileFormat", "FileExtension", "SchemaDefinition"):
        if name in content and existing.get(name) != content[name]:
            raise TableStopped(
                table.id,
                f"{storage.url}/{path} has a different {name} than this batch needs; delimited-text tables "
                "cannot change schema or format: drop the table folder to reload it",
            )
    return False


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
