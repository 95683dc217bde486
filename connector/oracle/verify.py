"""``verify``: the landing zone applied to real Delta tables, against the source database, row by row.

Each table is applied with the Delta oracle (``connector.oracle.delta_oracle``) into a temporary folder
and read back from Delta, so verify judges what Fabric would hold, not what our own reader accepts: a
type Delta cannot hold, or a type change, is a refused table, reported as such with a non-zero exit.

Values are compared exactly after one normalisation per type, so a difference means the mirror is
wrong, not that two libraries print a value differently: decimals compare numerically (Debezium strips
trailing zeros of unconstrained NUMERIC), ``real`` compares as float32, JSON compares as parsed
documents (``jsonb`` is normalised by Postgres), UUIDs as text, timestamps with time zone as instants.
"""

from __future__ import annotations

import datetime as dt
import json
import struct
import tempfile
import uuid
from collections.abc import Iterable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa

from connector.config import CredentialKind
from connector.errors import LandingZoneCorrupt
from connector.landing_zone import discover_tables
from connector.oracle.delta_oracle import apply_table_to_delta
from connector.oracle.landing_reader import read_table_metadata, require_landing_zone
from connector.oracle.table_report import TableReport
from connector.storage import open_storage

Row = dict[str, Any]


def compare_rows(
    table: str, key_columns: list[str], source: Iterable[Row], mirror: pa.Table, max_examples: int = 5
) -> TableReport:
    """Compare source rows with the replayed mirror table on every source column."""
    report = TableReport(table)
    types = {f.name: f.type for f in mirror.schema}
    mirrored: dict[tuple[Any, ...], list[Row]] = {}
    for row in mirror.to_pylist():
        mirrored.setdefault(tuple(row[k] for k in key_columns), []).append(row)
    report.mirror_rows = mirror.num_rows
    seen: set[tuple[Any, ...]] = set()
    for row in source:
        report.source_rows += 1
        key = tuple(_normalise(row[k], types.get(k)) for k in key_columns)
        seen.add(key)
        candidates = mirrored.get(key, [])
        if not candidates:
            report.missing += 1
            _example(report, max_examples, f"missing key {key}")
            continue
        if len(candidates) > 1:
            report.extra += len(candidates) - 1
            _example(report, max_examples, f"key {key} appears {len(candidates)} times in the mirror")
        diffs = [
            f"{column}: source={_show(value)} mirror={_show(candidates[0].get(column))}"
            for column, value in row.items()
            if not _same(value, candidates[0].get(column), types.get(column))
        ]
        if diffs:
            report.differing += 1
            _example(report, max_examples, f"key {key}: " + "; ".join(diffs))
        else:
            report.matching += 1
    for key, rows in mirrored.items():
        if key not in seen:
            report.extra += len(rows)
            _example(report, max_examples, f"extra key {key}")
    return report


def _example(report: TableReport, limit: int, text: str) -> None:
    if len(report.examples) < limit:
        report.examples.append(text)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}...({len(text)} chars)"


def _normalise(value: Any, arrow: pa.DataType | None) -> Any:
    """One comparable form per type (see the module docstring)."""
    if value is None:
        return None
    if isinstance(value, memoryview):
        value = bytes(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, str) and value[:1] in "{[" and arrow is not None and _is_text(arrow):
        try:
            return json.dumps(json.loads(value), sort_keys=True)
        except ValueError:
            return value
    if isinstance(value, float) and arrow is not None and pa.types.is_float32(arrow):
        return struct.unpack("f", struct.pack("f", value))[0]
    if isinstance(value, Decimal):
        if not value.is_finite():
            return str(value)  # NaN never equals itself: compare non-finite decimals by their text
        return value.normalize() if value else Decimal(0)
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC)
    return value


def _same(source: Any, mirrored: Any, arrow: pa.DataType | None) -> bool:
    """Whether a source value and its mirrored value are equal, once both are normalised.

    Unconstrained and wide decimals and times of day are mirrored as text (the README's type table):
    a source decimal compares numerically with the decimal the text spells, a source time with the
    microseconds the text spells.
    """
    left, right = _normalise(source, arrow), _normalise(mirrored, arrow)
    if isinstance(right, str) and isinstance(left, Decimal):
        try:
            right = _normalise(Decimal(right), None)
        except ArithmeticError:
            return False
    elif isinstance(right, str) and isinstance(left, (dt.time, dt.timedelta)):
        from connector.oracle.source_mysql import time_micros

        left, right = time_micros(left), time_micros(right)
    return bool(left == right)


def _is_text(arrow: pa.DataType) -> bool:
    """Delta reads strings back as ``string``, ``large_string`` or ``string_view`` depending on the path."""
    return bool(pa.types.is_string(arrow) or pa.types.is_large_string(arrow) or pa.types.is_string_view(arrow))


def verify(
    source_url: str, landing_zone: str, tables: list[str] | None = None, *, credential: CredentialKind = "default"
) -> list[TableReport]:
    """Apply every mirrored table (or ``tables``) to Delta and compare it with the source database.

    A table Delta refuses gets a report with ``refused`` set; the other tables are still compared, as
    open mirroring stops only the refused table.

    Raises:
        ConfigError: ``landing_zone`` is a local folder that does not exist.
    """
    from connector.oracle.source_mysql import is_mysql_url, verify_mysql

    if is_mysql_url(source_url):  # mysql:// or mariadb://: MySQL's types need their own reader
        return verify_mysql(source_url, landing_zone, tables, credential=credential)
    import psycopg
    from psycopg import sql

    storage = open_storage(landing_zone, credential)
    require_landing_zone(storage, landing_zone)
    reports = []
    with (
        psycopg.connect(source_url, autocommit=True) as conn,
        tempfile.TemporaryDirectory(prefix="verify-delta-") as delta_root,
    ):
        for ref in discover_tables(storage):
            if tables and ref.id not in tables:
                continue
            metadata = read_table_metadata(storage, ref)
            keys = list(metadata.key_columns) if metadata else []
            try:
                mirror = apply_table_to_delta(storage, ref, Path(delta_root) / ref.folder)
            except LandingZoneCorrupt as exc:
                reports.append(TableReport(ref.id, refused=str(exc)))
                continue
            query = sql.SQL("SELECT * FROM {}").format(
                sql.Identifier(ref.schema, ref.name) if ref.schema else sql.Identifier(ref.name)
            )
            with conn.cursor() as cursor:
                cursor.execute(query)
                names = [d.name for d in cursor.description or ()]
                rows = (dict(zip(names, values, strict=True)) for values in cursor)
                reports.append(compare_rows(ref.id, list(keys or []), rows, mirror))
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
