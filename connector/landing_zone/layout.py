"""Where things live in a landing zone: table folders (and finding them), the 20-digit file names, reserved names."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from connector.config import MirrorSettings
from connector.storage.base import Storage

FILE_NUMBER_DIGITS = 20
PROCESSED_FOLDERS = ("_ProcessedFiles", "_FilesReadyToDelete")
METADATA_FILE = "_metadata.json"
PARTNER_EVENTS_FILE = "_partnerEvents.json"
STAGED_PREFIX = "_staged_"
"""Prefix of a staged data file: written before its batch's plan is recorded, published by renaming it to its
number. Not the storage layer's ``TEMP_PREFIX`` (``_tmp_``): start-up deletes every ``_tmp_`` file unasked,
while a staged file a recorded plan names must survive a crash so recovery can publish it."""
SCHEMA_SUFFIX = ".schema"
# Root and table-level folders that are not tables: the mirroring service's and the connector's own (``_``),
# and hidden ones a person keeps beside the tables (``.``).
_NOT_TABLE_PREFIXES = ("_", ".")

_DATA_FILE = re.compile(r"^(\d{20})\.([A-Za-z0-9]+)$")


@dataclass(frozen=True)
class TableRef:
    """A mirrored table: its id (``schema.table``) and its folder in the landing zone."""

    schema: str | None
    name: str

    @property
    def id(self) -> str:
        """``schema.table``, or ``table`` without a schema; used in metrics, logs and the ledger."""
        return f"{self.schema}.{self.name}" if self.schema else self.name

    @property
    def folder(self) -> str:
        """``<schema>.schema/<table>`` per the landing-zone format, or ``<table>``."""
        return f"{self.schema}.schema/{self.name}" if self.schema else self.name


def table_for_topic(topic: str, mirror: MirrorSettings) -> TableRef:
    """Map a Debezium topic ``<prefix>.<schema>.<table>`` to its table, honouring config overrides."""
    override = mirror.table_settings(topic)
    parts = topic.split(".")
    schema = parts[-2] if len(parts) >= 3 else None
    name = parts[-1]
    return TableRef(override.schema_name or schema, override.table or name)


def data_file_name(number: int, extension: str) -> str:
    """``00000000000000000001.parquet``."""
    return f"{number:0{FILE_NUMBER_DIGITS}d}.{extension}"


def parse_data_file_name(name: str) -> tuple[int, str] | None:
    """Return (number, extension) for a data file name, ``None`` for anything else."""
    match = _DATA_FILE.match(name)
    if not match:
        return None
    return int(match[1]), match[2]


def staged_batch_prefix(batch_id: int) -> str:
    """The start of every staged file name of batch ``batch_id`` (``staged_file_name``)."""
    return f"{STAGED_PREFIX}{batch_id}_"


def staged_file_name(batch_id: int, first: tuple[str, int, int], chunk: int, attempt: str, extension: str) -> str:
    """Name of a file staged before its batch is planned; the leading underscore keeps mirroring off it.

    The batch, the piece's first record (topic, partition, offset), the chunk, and the staging attempt: every
    attempt of a task (retried, speculative, or a zombie of a lost executor) writes names of its own, so one
    attempt never writes over a file another attempt reported, and a staged file needs no atomic upload. The
    topic is hashed: names stay short and free of characters a file system may refuse.
    """
    topic, partition, offset = first
    slice_id = f"{hashlib.sha1(topic.encode(), usedforsecurity=False).hexdigest()[:12]}-{partition}-{offset}"
    return f"{staged_batch_prefix(batch_id)}{slice_id}_{chunk}_{attempt}.{extension}"


def discover_tables(storage: Storage) -> list[TableRef]:
    """Table folders of the landing zone, sorted by table id.

    Folders starting with ``_`` are not tables (the mirroring service ignores them, and the connector
    uses the prefix for its own files); nor are hidden folders starting with ``.`` (a ``.state`` folder
    that a person keeps beside the tables is not data to replay). A root folder ``<schema>.schema``
    holds one folder per table; any other root folder is a table without a schema.
    """
    tables: list[TableRef] = []
    for entry in storage.list_dir(""):
        name = entry.path.rsplit("/", 1)[-1]
        if not entry.is_dir or name.startswith(_NOT_TABLE_PREFIXES):
            continue
        if name.endswith(SCHEMA_SUFFIX) and len(name) > len(SCHEMA_SUFFIX):
            schema = name[: -len(SCHEMA_SUFFIX)]
            for child in storage.list_dir(entry.path):
                child_name = child.path.rsplit("/", 1)[-1]
                if child.is_dir and not child_name.startswith(_NOT_TABLE_PREFIXES):
                    tables.append(TableRef(schema, child_name))
        else:
            tables.append(TableRef(None, name))
    return sorted(tables, key=lambda table: table.id)
