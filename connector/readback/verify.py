"""``verify``: the landing zone applied to real Delta tables, against the source database, row by row.

Each table is applied with the Delta oracle (``connector.readback.delta_oracle``) into a temporary folder
and read back from Delta, so verify judges what Fabric would hold, not what our own reader accepts: a
type Delta cannot hold, or a type change, is a refused table, reported as such with a non-zero exit.

The source is read by the ``SourceReader`` its URL names: ``mysql://`` and ``mariadb://`` by
``database_mysql``, any other (``postgresql://``) by ``database_postgres``. Each compares values in the
forms its database's types need (see those modules).

Each table is judged whole (invariant 11 of docs/guarantees.md: the mirror equals the source in values and column set):
its rows, its columns (a column the source dropped or renamed still holding values in the mirror is a difference,
``TableReport.judge_columns``), and its presence. The mirrored schemas are those of the landing zone's tables (Postgres
schemas, MySQL/MariaDB databases): a source table in one of them without a table folder is a difference (the mirror
lacks a table: Debezium never published it, the topics pattern leaves it out, or its folder was deleted), and so is a
table folder whose source table is gone. A folder without a data file (or, against Fabric's tables, no Delta table) is
no table to Fabric: a difference too, never exact against an empty table. A table an operator does not mirror on purpose
(Debezium's ``table.include.list`` leaves it out, or its signalling table sits in a mirrored schema) is named in
``ignore``. The local stacks keep Debezium's signalling tables in a schema of their own (``debezium``), never mirrored,
so they need no ``ignore``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Collection, Sequence
from pathlib import Path

import pyarrow as pa

from connector.errors import LandingZoneCorrupt
from connector.landing_zone.layout import TableRef, discover_tables
from connector.readback.database_mysql import MySqlReader, MySqlSource, is_mysql_url
from connector.readback.database_postgres import PostgresReader
from connector.readback.database_reader import SourceReader
from connector.readback.delta_oracle import apply_table_to_delta
from connector.readback.extra import require_extra
from connector.readback.landing_reader import read_table_metadata, require_landing_zone
from connector.readback.mirror_compare import compare_table, fabric_settle
from connector.readback.mirrored_tables import MirroredTables
from connector.readback.table_report import TableReport
from connector.storage import Storage
from connector.storage.location import StorageLocation, as_location


def source_reader(source_url: str) -> SourceReader:
    """The reader for ``source_url``, not yet connected.

    Raises:
        ConfigError: a MySQL/MariaDB URL without a user or host, or with an invalid port.
    """
    if is_mysql_url(source_url):  # mysql:// or mariadb://: MySQL's types need their own reader
        return MySqlReader(MySqlSource.from_url(source_url))
    return PostgresReader(source_url)


#: Why a table on one side only was not compared (``TableReport.absent``).
NO_TABLE_FOLDER = "in the source, not in the landing zone (no table folder)"
NO_SOURCE_TABLE = "in the landing zone, not in the source (no source table)"
#: A folder without a data file is no table to Fabric (it creates the table with the first file it reads).
NO_MIRROR_TABLE = "in the source, not in the mirror (its folder has no data file: Fabric holds no table)"
NO_FABRIC_TABLE = "in the source, not in the mirror (Fabric holds no Delta table of it)"


def verify(
    source_url: str,
    landing_zone: StorageLocation | str,
    tables: Sequence[str] | None = None,
    *,
    ignore: Collection[str] = (),
    mirrored: MirroredTables | None = None,
    settle_s: float = 120.0,
) -> list[TableReport]:
    """Judge every table of the mirrored schemas (or only ``tables``) against the source; reports by table id.

    Without ``tables``, the tables judged are the landing zone's and the source's in the schemas the landing
    zone's tables are in: one on one side only gets a report with ``absent`` set. With ``tables``, exactly
    those: one without a folder is absent from the landing zone, whatever the source holds. ``ignore`` (ids)
    is never judged, on either side. A table on both sides is applied to Delta and compared in rows and
    columns; one Delta refuses gets a report with ``refused`` set, and the other tables are still compared,
    as open mirroring stops only the refused table.

    With ``mirrored``, the mirror is what Fabric holds, Fabric's Delta tables (``mirrored_tables``), not the landing
    zone replayed: the landing zone gives only the tables and their ``_metadata.json`` keys (its files may be long
    deleted). A Postgres source is then compared chunk by chunk, and a difference counts only if it is still there
    once the mirror is past the source's position at the first look (``mirror_compare``; at most ``settle_s``).

    Raises:
        MissingExtra: the ``verify`` extra (the database driver, ``deltalake``) is not installed.
        ConfigError: the source URL is malformed, or ``landing_zone`` is a local folder that does not exist.
        ConnectorError: the source cannot be reached.
    """
    reader = source_reader(source_url)
    require_extra("verify", ("deltalake", reader.driver))
    location = as_location(landing_zone)
    storage = location.open()
    require_landing_zone(storage, location.url)
    ignored = set(ignore)
    folders = {ref.id: ref for ref in discover_tables(storage) if ref.id not in ignored}
    reports: list[TableReport] = []
    with reader, tempfile.TemporaryDirectory(prefix="verify-delta-") as delta_root:
        if tables:
            named = [table for table in dict.fromkeys(tables) if table not in ignored]
            judged = [folders[table] for table in named if table in folders]
            reports += [
                TableReport(table, absent=f"not in the landing zone {landing_zone} (no table folder)")
                for table in named
                if table not in folders
            ]
            in_source = set(reader.tables({ref.schema for ref in judged}))
        else:
            judged = list(folders.values())
            in_source = set(reader.tables({ref.schema for ref in judged})) - ignored
            reports += [TableReport(table, absent=NO_TABLE_FOLDER) for table in in_source if table not in folders]
        for ref in judged:
            if ref.id not in in_source:
                reports.append(TableReport(ref.id, absent=NO_SOURCE_TABLE))
                continue
            if mirrored is not None:
                reports.append(_compare_mirrored(reader, storage, ref, mirrored, settle_s))
            else:
                reports.append(_compare(reader, storage, ref, Path(delta_root) / ref.folder))
    return sorted(reports, key=lambda report: report.table)


def _compare(reader: SourceReader, storage: Storage, ref: TableRef, delta: Path) -> TableReport:
    """One table on both sides: its folder applied to Delta at ``delta``, then compared by ``reader``."""
    reader.check(ref)
    metadata = read_table_metadata(storage, ref)
    keys = list(metadata.key_columns) if metadata else []
    try:
        mirror = apply_table_to_delta(storage, ref, delta)
    except LandingZoneCorrupt as exc:
        return TableReport(ref.id, refused=str(exc))
    if not mirror.num_columns:  # never an empty table that compares exact with an empty source table
        return TableReport(ref.id, absent=NO_MIRROR_TABLE)
    return reader.compare(ref, keys, mirror)


def _compare_mirrored(
    reader: SourceReader, storage: Storage, ref: TableRef, mirrored: MirroredTables, settle_s: float
) -> TableReport:
    """One table against Fabric's Delta table of it: chunked and lag-tolerant for Postgres, whole otherwise."""
    reader.check(ref)
    metadata = read_table_metadata(storage, ref)
    keys = list(metadata.key_columns) if metadata else []
    if not mirrored.exists(ref):  # never an empty table that compares exact with an empty source table
        return TableReport(ref.id, absent=NO_FABRIC_TABLE)
    if isinstance(reader, PostgresReader) and keys:
        settle = fabric_settle(reader, storage, ref, timeout_s=settle_s)
        return compare_table(reader, ref, keys, lambda: mirrored.read(ref, keys), settle=settle)
    return reader.compare(ref, keys, mirrored.read(ref, keys) or pa.table({}))


def verify_command(
    source_url: str,
    landing_zone: StorageLocation | str,
    tables: str | None,
    *,
    ignore_tables: str | None = None,
    mirrored: MirroredTables | None = None,
    settle_s: float = 120.0,
) -> int:
    """CLI: print one line per table (plus examples of differences); non-zero exit on any difference.

    ``tables`` and ``ignore_tables`` are comma-separated ids (``schema.table``); with ``mirrored``, the mirror is
    Fabric's Delta tables there.
    """
    wanted = _id_list(tables)
    if mirrored is not None:
        print(f"comparing with the mirrored tables at {mirrored.url} (Fabric's Delta tables)")
    reports = verify(
        source_url, landing_zone, wanted, ignore=_id_list(ignore_tables) or (), mirrored=mirrored, settle_s=settle_s
    )
    for report in reports:
        print(report.line())
        for example in report.examples:
            print(f"  {example}")
    if not reports:
        print("no mirrored tables found")
        return 1
    return 0 if all(r.ok for r in reports) else 1


def _id_list(text: str | None) -> list[str] | None:
    return [t.strip() for t in text.split(",") if t.strip()] if text else None
