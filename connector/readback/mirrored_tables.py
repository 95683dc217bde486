"""What Fabric holds: the mirrored database's Delta tables, read with delta-rs (invariant 15, docs/guarantees.md).

Fabric's open mirroring applies the landing zone's files to one Delta table per table folder, in the same item:
the landing zone is ``<workspace>/<item>/Files/LandingZone`` and the tables are ``<workspace>/<item>/Tables``,
one folder per schema, one per table in it (``Tables/<schema>/<table>``; Microsoft's Fabric CLI shows a mirrored
database's table as ``<name>.MirroredDatabase/Tables/dbo/<table>``). A table folder without a ``<schema>.schema``
folder lands in the default schema, ``dbo``. So ``verify`` can judge what the mirror *holds* after Fabric has
deleted the files it processed (seven days), and the audit can compare it chunk by chunk.

Reading is delta-rs (``deltalake``, the ``verify`` extra): a local folder (the tests' replicator double, or a
copy) or OneLake with the landing zone's identity (a bearer token of the storage audience, Fabric's endpoint).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from connector.errors import ConfigError
from connector.landing_zone.layout import TableRef, parse_data_file_name
from connector.storage.base import Storage
from connector.storage.identity import CredentialConfig
from connector.storage.location import StorageLocation, abfss_form, as_location

DEFAULT_SCHEMA = "dbo"
"""The schema of a landing-zone table folder that sits in no ``<schema>.schema`` folder."""


def table_path(table: TableRef) -> str:
    """The table's folder under ``Tables``: ``<schema>/<table>`` (``dbo`` without a schema)."""
    return f"{table.schema or DEFAULT_SCHEMA}/{table.name}"


def tables_url(landing_zone: StorageLocation | str) -> str:
    """The mirrored database's ``Tables`` folder of a OneLake landing zone (``<workspace>/<item>/Files/LandingZone``).

    Raises:
        ConfigError: the location is not a mirrored database's landing zone (a local folder, an ADLS Gen2 URL):
            then ``--tables-path`` names the tables.
    """
    try:
        tables = as_location(landing_zone).tables_folder()
    except ConfigError:  # not even a storage URL: no mirrored database's either
        tables = None
    if tables is None:
        url = landing_zone.url if isinstance(landing_zone, StorageLocation) else landing_zone
        msg = (
            f"{url} is not a mirrored database's landing zone "
            "(https://onelake.dfs.fabric.microsoft.com/<workspace>/<item>/Files/LandingZone): "
            "name the mirrored tables with --tables-path (verify replays a landing zone named with --landing-zone)"
        )
        raise ConfigError(msg)
    return tables


@dataclass(frozen=True)
class MirroredTables:
    """Where Fabric's Delta tables are (a local folder or a OneLake URL) and the identity that reads them."""

    url: str
    identity: CredentialConfig = field(default_factory=CredentialConfig)

    @property
    def remote(self) -> bool:
        """A OneLake URL rather than a local folder."""
        return "://" in self.url

    def uri(self, table: TableRef) -> str:
        """The Delta table's URI, as delta-rs opens it (``abfss://`` for OneLake)."""
        if not self.remote:
            return str(Path(self.url) / table_path(table))
        return f"{abfss_form(self.url)}/{table_path(table)}"

    def storage_options(self) -> dict[str, str]:
        """delta-rs's options: none for a local folder; a storage token and Fabric's endpoint for OneLake."""
        if not self.remote:
            return {}
        from connector.storage.credentials import STORAGE_SCOPE, build_credential

        identity = build_credential(self.identity)
        token = identity.credential.get_token(STORAGE_SCOPE).token
        return {"bearer_token": token, "use_fabric_endpoint": "true"}

    def exists(self, table: TableRef) -> bool:
        """Whether Fabric holds a Delta table of ``table`` (it creates one with the first file it reads)."""
        from deltalake import DeltaTable

        options = self.storage_options()
        return bool(DeltaTable.is_deltatable(self.uri(table), storage_options=options or None))

    def read(self, table: TableRef, key_columns: Iterable[str]) -> pa.Table | None:
        """The table as Fabric holds it, sorted by its keys then its other columns; ``None`` when there is none.

        Raises:
            ConnectorError: the Delta table exists but cannot be read (its message names the table).
        """
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        options = self.storage_options()
        try:
            delta = DeltaTable(self.uri(table), storage_options=options or None)
        except TableNotFoundError:
            return None
        if self.remote:
            state = delta.to_pyarrow_table()
        else:
            from pyarrow import fs

            # Arrow's own file system (delta_oracle.DeltaWriter.read_all says why).
            local = fs.SubTreeFileSystem(str(Path(self.uri(table)).resolve()), fs.LocalFileSystem())
            state = delta.to_pyarrow_dataset(filesystem=local).to_table()
        return sorted_rows(state, tuple(key_columns))


def sorted_rows(state: pa.Table, key_columns: tuple[str, ...]) -> pa.Table:
    """Rows sorted by the key columns, then by the other sortable ones: two reads compare row for row."""
    order = [*key_columns, *(name for name in state.column_names if name not in key_columns)]
    sortable = [name for name in order if name in state.column_names and _sortable(state.schema.field(name).type)]
    if state.num_rows and sortable:
        state = state.sort_by([(name, "ascending") for name in sortable])
    return state.combine_chunks()


def _sortable(arrow_type: pa.DataType) -> bool:
    return not (pa.types.is_nested(arrow_type) or pa.types.is_null(arrow_type))


def waiting_files(storage: Storage, table: TableRef) -> list[int]:
    """Numbers of the data files still in the table's folder: published, not yet taken by Fabric.

    Fabric moves each file it has applied out of the table folder (to ``_ProcessedFiles`` or
    ``_FilesReadyToDelete``), so a file still there is one Fabric has not applied yet.
    """
    numbers: list[int] = []
    for entry in storage.list_dir(table.folder):
        parsed = None if entry.is_dir else parse_data_file_name(entry.path.rsplit("/", 1)[-1])
        if parsed is not None:
            numbers.append(parsed[0])
    return sorted(numbers)


def fabric_has_applied(storage: Storage, table: TableRef, through: int) -> bool:
    """Whether Fabric has applied every file of ``table`` up to number ``through`` (none is left in its folder)."""
    return not any(number <= through for number in waiting_files(storage, table))


def describe(tables: MirroredTables) -> dict[str, Any]:
    """The location as a log line shows it (no token)."""
    return {"tables": tables.url, "identity": tables.identity.kind if tables.remote else "local"}
