"""``verify``: the landing zone applied to real Delta tables, against the source database, row by row.

Each table is applied with the Delta oracle (``connector.oracle.delta_oracle``) into a temporary folder
and read back from Delta, so verify judges what Fabric would hold, not what our own reader accepts: a
type Delta cannot hold, or a type change, is a refused table, reported as such with a non-zero exit.

The source is read by the ``SourceReader`` its URL names: ``mysql://`` and ``mariadb://`` by
``source_mysql``, any other (``postgresql://``) by ``source_postgres``. Each compares values in the
forms its database's types need (see those modules).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from connector.errors import LandingZoneCorrupt
from connector.landing_zone import discover_tables
from connector.oracle.delta_oracle import apply_table_to_delta
from connector.oracle.extra import require_extra
from connector.oracle.landing_reader import read_table_metadata, require_landing_zone
from connector.oracle.source_mysql import MySqlReader, MySqlSource, is_mysql_url
from connector.oracle.source_postgres import PostgresReader
from connector.oracle.source_reader import SourceReader
from connector.oracle.table_report import TableReport
from connector.storage import CredentialKind, open_storage


def source_reader(source_url: str) -> SourceReader:
    """The reader for ``source_url``, not yet connected.

    Raises:
        ConfigError: a MySQL/MariaDB URL without a user or host, or with an invalid port.
    """
    if is_mysql_url(source_url):  # mysql:// or mariadb://: MySQL's types need their own reader
        return MySqlReader(MySqlSource.from_url(source_url))
    return PostgresReader(source_url)


def verify(
    source_url: str, landing_zone: str, tables: list[str] | None = None, *, credential: CredentialKind = "default"
) -> list[TableReport]:
    """Apply every mirrored table (or ``tables``) to Delta and compare it with the source database.

    A table Delta refuses gets a report with ``refused`` set; the other tables are still compared, as
    open mirroring stops only the refused table.

    Raises:
        MissingExtra: the ``verify`` extra (the database driver, ``deltalake``) is not installed.
        ConfigError: the source URL is malformed, or ``landing_zone`` is a local folder that does not exist.
        ConnectorError: the source cannot be reached, or a mirrored table has no source table.
    """
    reader = source_reader(source_url)
    require_extra("verify", ("deltalake", reader.driver))
    storage = open_storage(landing_zone, credential)
    require_landing_zone(storage, landing_zone)
    reports = []
    with reader, tempfile.TemporaryDirectory(prefix="verify-delta-") as delta_root:
        for ref in discover_tables(storage):
            if tables and ref.id not in tables:
                continue
            reader.check(ref)
            metadata = read_table_metadata(storage, ref)
            keys = list(metadata.key_columns) if metadata else []
            try:
                mirror = apply_table_to_delta(storage, ref, Path(delta_root) / ref.folder)
            except LandingZoneCorrupt as exc:
                reports.append(TableReport(ref.id, refused=str(exc)))
                continue
            reports.append(reader.compare(ref, keys, mirror))
    return reports


def verify_command(
    source_url: str, landing_zone: str, tables: str | None, *, credential: CredentialKind = "default"
) -> int:
    """CLI: print one line per table (plus examples of differences); non-zero exit on any difference."""
    wanted = [t.strip() for t in tables.split(",")] if tables else None
    reports = verify(source_url, landing_zone, wanted, credential=credential)
    for report in reports:
        print(report.line())
        for example in report.examples:
            print(f"  {example}")
    # A table asked for by name but absent from the landing zone is a difference, not a silent pass.
    absent = [table for table in wanted or () if table not in {r.table for r in reports}]
    for table in absent:
        print(f"{table}: not in the landing zone {landing_zone} (no table folder)")
    if not reports and not absent:
        print("no mirrored tables found")
        return 1
    return 0 if all(r.ok for r in reports) and not absent else 1
