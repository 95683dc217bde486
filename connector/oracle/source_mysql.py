"""``verify`` against a MySQL or MariaDB source (``mysql://`` or ``mariadb://`` URLs), through PyMySQL.

MySQL's types do not read back the way they land: PyMySQL returns ``BIT`` as big-endian bytes, ``TIME``
as a ``timedelta`` (a duration from -838:59:59 to 838:59:59, not a time of day), ``TIMESTAMP`` as a naive
wall-clock time in the session's time zone, ``SET`` as comma-joined text, ``JSON`` as the stored text,
while the mirror holds whatever representation the Debezium type mapping chose (an integer or big-endian
bytes for bits, text or a time for TIME, a decimal or its exact text for ``DECIMAL(65,30)``, …). So each
column is compared in one canonical form chosen from its *source* type (information_schema), applied to
both sides: a difference then means a different value, never a different spelling of the same value.

- integers of every width (``BIGINT UNSIGNED`` included), ``DECIMAL``: exact ``Decimal`` (text parsed
  exactly, so a decimal the mirror writes as text compares by value, not by digits);
- ``BIT``: the integer the bit string spells;
- ``TIME``: signed microseconds;
- ``FLOAT``: the float32 value (MySQL ``FLOAT`` is single precision); ``DOUBLE``: the float;
- ``DATETIME``: a naive wall-clock time (no zone: the mirror must not invent one); ``TIMESTAMP``: an
  instant in UTC (the session runs in UTC, so the source value is UTC; a naive mirror value stays naive
  and differs: the mirror lost the instant semantics);
- ``JSON``: the parsed document (key order and spacing are not values);
- ``SET``: the set of its members; ``ENUM``, text: the string; binary: the bytes;
- spatial types (``GEOMETRY``, ``POINT``, ``LINESTRING``, ``POLYGON``, the ``MULTI…`` kinds,
  ``GEOMETRYCOLLECTION``): the pair (SRID, WKB bytes). The source value is read as stored, a 4-byte
  little-endian SRID then the WKB (what ``ST_SRID`` and ``ST_AsBinary`` return); the mirror's is the JSON
  text of Debezium's ``Geometry``/``Point`` struct, ``{"wkb": base64, "srid": n}``, whose null SRID is
  SRID 0 (Debezium writes 0 as null; MySQL has no other "no SRID"). A ``Point``'s ``x`` and ``y`` are
  read from the same WKB by Debezium and are not compared separately.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import struct
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pyarrow as pa

from connector.config import CredentialKind
from connector.errors import ConfigError, ConnectorError, LandingZoneCorrupt
from connector.landing_zone import TableRef, discover_tables
from connector.oracle.delta_oracle import apply_table_to_delta
from connector.oracle.landing_reader import read_table_metadata, require_landing_zone
from connector.oracle.table_report import TableReport
from connector.storage import open_storage

#: URL schemes this module reads (``verify`` dispatches on them).
MYSQL_SCHEMES = ("mysql", "mariadb")

Canonical = Callable[[Any], Any]
Row = dict[str, Any]

_INTEGERS = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint"}
_DECIMALS = {"decimal", "numeric", "fixed"}
_BINARY = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
_SPATIAL = {
    "geometry",
    "point",
    "linestring",
    "polygon",
    "multipoint",
    "multilinestring",
    "multipolygon",
    "geometrycollection",
}
_MICROS_PER_DAY = 86_400_000_000


def is_mysql_url(url: str) -> bool:
    """Whether ``url`` names a MySQL/MariaDB source (``mysql://`` or ``mariadb://``)."""
    return urlsplit(url).scheme.lower() in MYSQL_SCHEMES


@dataclass(frozen=True)
class MySqlSource:
    """Where to connect, parsed from ``mysql://USER[:PASSWORD]@HOST[:PORT][/DB]``."""

    host: str
    port: int
    user: str
    password: str
    database: str | None

    @classmethod
    def from_url(cls, url: str) -> MySqlSource:
        """Parse the URL; the password is kept out of every message.

        Raises:
            ConfigError: not a mysql:// or mariadb:// URL, or no host or user.
        """
        parts = urlsplit(url)
        if parts.scheme.lower() not in MYSQL_SCHEMES:
            msg = f"not a MySQL/MariaDB URL (scheme {parts.scheme!r}; expected one of {list(MYSQL_SCHEMES)})"
            raise ConfigError(msg)
        try:
            port = parts.port or 3306
        except ValueError as exc:
            msg = f"{redact(url)}: invalid port"
            raise ConfigError(msg) from exc
        if not parts.hostname or not parts.username:
            msg = f"{redact(url)}: a MySQL/MariaDB URL needs a user and a host (mysql://USER:PASSWORD@HOST:PORT/DB)"
            raise ConfigError(msg)
        database = unquote(parts.path.lstrip("/")) or None
        return cls(parts.hostname, port, unquote(parts.username), unquote(parts.password or ""), database)

    def label(self) -> str:
        """The source as messages name it (no password)."""
        return f"mysql://{self.user}@{self.host}:{self.port}/{self.database or ''}"


def redact(url: str) -> str:
    """``url`` with its password replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


@dataclass(frozen=True)
class SourceColumn:
    """A source column's name and MySQL types (``DATA_TYPE`` and the full ``COLUMN_TYPE``)."""

    name: str
    data_type: str
    column_type: str


def canonical_for(column: SourceColumn) -> Canonical:
    """The canonical form for values of ``column`` (module docstring), applied to source and mirror alike."""
    data_type = column.data_type.lower()
    if data_type in _INTEGERS or data_type in _DECIMALS or data_type == "year":
        return exact_number
    if data_type == "bit":
        return bit_integer
    if data_type == "time":
        return time_micros
    if data_type == "float":
        return float32
    if data_type in ("double", "real"):
        return lambda v: float(v)
    if data_type == "datetime":
        return wall_clock
    if data_type == "timestamp":
        return utc_instant
    if data_type == "json":
        return json_document
    if data_type == "set":
        return set_members
    if data_type in _BINARY:
        return lambda v: bytes(v)
    if data_type in _SPATIAL:
        return srid_and_wkb
    return lambda v: v


def exact_number(value: Any) -> Any:
    """An exact ``Decimal`` (``Decimal`` equality and hash are by value, whatever the exponent)."""
    if isinstance(value, bool):
        return Decimal(int(value))
    if isinstance(value, (int, Decimal)):
        return Decimal(value)
    if isinstance(value, str):
        try:
            return Decimal(value)
        except InvalidOperation:
            return value
    return value


def bit_integer(value: Any) -> Any:
    """The integer a bit string spells: source bytes (big-endian), mirror integer or big-endian bytes."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return int.from_bytes(bytes(value), "big")
    if isinstance(value, bool):
        return int(value)
    return value


def time_micros(value: Any) -> Any:
    """Signed microseconds of a MySQL ``TIME`` (a duration): ``timedelta``, ``time`` or ``[-]H:MM:SS[.f]`` text."""
    if isinstance(value, dt.timedelta):
        return (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    if isinstance(value, dt.time):
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
    if isinstance(value, str):
        return _time_text_micros(value)
    return value


def _time_text_micros(text: str) -> Any:
    body = text.strip()
    sign = -1 if body.startswith("-") else 1
    body = body.lstrip("+-")
    whole, _, fraction = body.partition(".")
    pieces = whole.split(":")
    if len(pieces) != 3 or not all(p.isdigit() for p in pieces) or (fraction and not fraction.isdigit()):
        return text
    hours, minutes, seconds = (int(p) for p in pieces)
    micros = int((fraction + "000000")[:6]) if fraction else 0
    if len(fraction) > 6 and int(fraction[6:]):
        return text  # finer than a microsecond: no MySQL TIME holds it, keep it visibly different
    return sign * (((hours * 60 + minutes) * 60 + seconds) * 1_000_000 + micros)


def float32(value: Any) -> Any:
    """The float32 nearest ``value``: MySQL ``FLOAT`` is single precision (read exactly: ``_select_expression``)."""
    if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
        return struct.unpack("f", struct.pack("f", float(value)))[0]
    return value


def wall_clock(value: Any) -> Any:
    """A ``DATETIME``: naive wall-clock time; an aware mirror value is kept aware and so differs."""
    return value


def utc_instant(value: Any) -> Any:
    """A ``TIMESTAMP``: the instant in UTC; a naive mirror value stays naive (and so differs)."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC)
    return value


def source_timestamp(value: Any) -> Any:
    """A source ``TIMESTAMP`` read in the UTC session: naive, so marked UTC before comparing."""
    return value.replace(tzinfo=dt.UTC) if isinstance(value, dt.datetime) and value.tzinfo is None else value


def json_document(value: Any) -> Any:
    """The parsed JSON document as canonical text (sorted keys); unparsable text stays as it is."""
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, str):
        try:
            return json.dumps(json.loads(value), sort_keys=True, ensure_ascii=False)
        except ValueError:
            return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def set_members(value: Any) -> Any:
    """A ``SET`` as the set of its members (``'a,b'``, a Python set, or a list)."""
    if isinstance(value, str):
        return frozenset(m for m in value.split(",") if m)
    if isinstance(value, (set, frozenset, list, tuple)):
        return frozenset(value)
    return value


def srid_and_wkb(value: Any) -> Any:
    """A spatial value as (SRID, WKB): stored bytes (little-endian SRID + WKB) or ``{"wkb", "srid"}`` JSON text.

    Anything else (text that is not such a struct, WKB that is not base64) is returned as it is, and so differs.
    """
    if isinstance(value, (bytes, bytearray, memoryview)):
        stored = bytes(value)
        return (int.from_bytes(stored[:4], "little"), stored[4:]) if len(stored) > 4 else stored
    struct_value = value
    if isinstance(value, str):
        try:
            struct_value = json.loads(value)
        except ValueError:
            return value
    if not isinstance(struct_value, dict) or not isinstance(struct_value.get("wkb"), str):
        return value
    srid = struct_value.get("srid")
    if not (srid is None or (isinstance(srid, int) and not isinstance(srid, bool))):
        return value
    try:
        wkb = base64.b64decode(struct_value["wkb"], validate=True)
    except binascii.Error:
        return value
    return (srid or 0, wkb)


class MySqlReader:
    """One PyMySQL connection in UTC, reading tables and their column types."""

    def __init__(self, source: MySqlSource) -> None:
        """Connect.

        Raises:
            ConnectorError: the server cannot be reached or refuses the login (named without the password).
        """
        import pymysql  # type: ignore[import-untyped]  # PyMySQL ships no type information

        self._source = source
        try:
            self._conn = pymysql.connect(
                host=source.host,
                port=source.port,
                user=source.user,
                password=source.password,
                database=source.database,
                charset="utf8mb4",
                # TIMESTAMP values read back in UTC; DATETIME has no zone and is unaffected.
                init_command="SET time_zone = '+00:00'",
                connect_timeout=10,
                autocommit=True,
            )
        except pymysql.MySQLError as exc:
            msg = f"cannot connect to {source.label()}: {exc}"
            raise ConnectorError(msg) from None

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()

    def __enter__(self) -> MySqlReader:
        """Use as a context manager."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close on leaving."""
        self.close()

    def columns(self, database: str, table: str) -> list[SourceColumn]:
        """The table's columns in order; empty when the table does not exist."""
        with self._conn.cursor() as cursor:
            cursor.execute(
                "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE FROM information_schema.COLUMNS "
                "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
                (database, table),
            )
            return [SourceColumn(str(n), str(d), str(c)) for n, d, c in cursor.fetchall()]

    def rows(self, database: str, table: str, columns: list[SourceColumn]) -> Iterator[Row]:
        """Every row of the table, streamed (an unbuffered cursor: memory stays flat)."""
        import pymysql.cursors  # type: ignore[import-untyped]

        names = ", ".join(_select_expression(c) for c in columns)
        with self._conn.cursor(pymysql.cursors.SSCursor) as cursor:
            cursor.execute(f"SELECT {names} FROM {_quote(database)}.{_quote(table)}")  # noqa: S608 - quoted identifiers
            for values in cursor:
                yield dict(zip((c.name for c in columns), values, strict=True))


def _select_expression(column: SourceColumn) -> str:
    """The column as selected; ``FLOAT`` through ``CAST(… AS DOUBLE)``.

    The server prints a float with six significant digits only (3.4028234e38 reads back as 3.40282e38);
    the cast gives the stored single-precision value exactly.
    """
    if column.data_type.lower() == "float":
        return f"CAST({_quote(column.name)} AS DOUBLE) AS {_quote(column.name)}"
    return _quote(column.name)


def _quote(identifier: str) -> str:
    return "`" + identifier.replace("`", "``") + "`"


def compare_table(
    table: str, key_columns: list[str], columns: list[SourceColumn], source: Iterator[Row], mirror: pa.Table
) -> TableReport:
    """Compare source rows with the replayed mirror on every source column, in canonical forms."""
    canon = {c.name: canonical_for(c) for c in columns}
    timestamps = {c.name for c in columns if c.data_type.lower() == "timestamp"}

    def canonical(column: str, value: Any, from_source: bool) -> Any:
        if value is None:
            return None
        if from_source and column in timestamps:
            value = source_timestamp(value)
        return canon.get(column, _identity)(value)

    report = TableReport(table)
    mirrored: dict[tuple[Any, ...], list[Row]] = {}
    for row in mirror.to_pylist():
        key = tuple(canonical(k, row.get(k), False) for k in key_columns)
        mirrored.setdefault(key, []).append(row)
    report.mirror_rows = mirror.num_rows
    seen: set[tuple[Any, ...]] = set()
    for row in source:
        report.source_rows += 1
        key = tuple(canonical(k, row[k], True) for k in key_columns)
        seen.add(key)
        candidates = mirrored.get(key, [])
        if not candidates:
            report.missing += 1
            _example(report, f"missing key {key}")
            continue
        if len(candidates) > 1:
            report.extra += len(candidates) - 1
            _example(report, f"key {key} appears {len(candidates)} times in the mirror")
        mirror_row = candidates[0]
        diffs = []
        for column, value in row.items():
            if column not in mirror_row:
                if value is not None:
                    diffs.append(f"{column}: source={_show(value)} mirror=<no column>")
                continue
            if canonical(column, value, True) != canonical(column, mirror_row[column], False):
                diffs.append(f"{column}: source={_show(value)} mirror={_show(mirror_row[column])}")
        if diffs:
            report.differing += 1
            _example(report, f"key {key}: " + "; ".join(diffs))
        else:
            report.matching += 1
    for key, rows in mirrored.items():
        if key not in seen:
            report.extra += len(rows)
            _example(report, f"extra key {key}")
    return report


def _identity(value: Any) -> Any:
    return value


def _example(report: TableReport, text: str, limit: int = 5) -> None:
    if len(report.examples) < limit:
        report.examples.append(text)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}...({len(text)} chars)"


def verify_mysql(
    source_url: str, landing_zone: str, tables: list[str] | None = None, *, credential: CredentialKind = "default"
) -> list[TableReport]:
    """Apply every mirrored table (or ``tables``) to Delta, as ``verify`` does, and compare it with the source.

    A mirrored table ``<schema>.<table>`` is read from database ``<schema>`` (Debezium's MySQL topics are
    ``prefix.database.table``); a table without a schema from the URL's database. A table Delta refuses
    gets a report with ``refused`` set; the others are still compared.

    Raises:
        ConfigError: the URL is not a MySQL/MariaDB URL, or ``landing_zone`` is a missing local folder.
        ConnectorError: the source cannot be reached, or a mirrored table has no source table.
    """
    source = MySqlSource.from_url(source_url)
    storage = open_storage(landing_zone, credential)
    require_landing_zone(storage, landing_zone)
    reports = []
    with MySqlReader(source) as reader, tempfile.TemporaryDirectory(prefix="verify-delta-") as delta_root:
        for ref in discover_tables(storage):
            if tables and ref.id not in tables:
                continue
            database = _database_of(ref, source)
            columns = reader.columns(database, ref.name)
            if not columns:
                msg = f"{ref.id}: no table {database}.{ref.name} at {source.label()}"
                raise ConnectorError(msg)
            metadata = read_table_metadata(storage, ref)
            keys = list(metadata.key_columns) if metadata else []
            try:
                mirror = apply_table_to_delta(storage, ref, Path(delta_root) / ref.folder)
            except LandingZoneCorrupt as exc:
                reports.append(TableReport(ref.id, refused=str(exc)))
                continue
            reports.append(compare_table(ref.id, keys, columns, reader.rows(database, ref.name, columns), mirror))
    return reports


def _database_of(ref: TableRef, source: MySqlSource) -> str:
    if ref.schema:
        return ref.schema
    if source.database:
        return source.database
    msg = f"{ref.id}: the mirrored table has no schema and {source.label()} names no database"
    raise ConnectorError(msg)
