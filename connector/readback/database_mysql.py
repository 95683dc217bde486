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
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import unquote, urlsplit

import pyarrow as pa

from connector.errors import ConfigError, ConnectorError
from connector.landing_zone.layout import TableRef
from connector.readback.database_reader import Row, show, time_micros
from connector.readback.table_report import TableReport, compare_as_multiset, compare_by_key
from connector.secrets import redact_url

#: URL schemes this reader reads (``verify`` chooses the reader by them).
MYSQL_SCHEMES = ("mysql", "mariadb")

Canonical = Callable[[Any], Any]

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
            msg = f"{redact_url(url, keep_user=True)}: invalid port"
            raise ConfigError(msg) from exc
        if not parts.hostname or not parts.username:
            msg = f"{redact_url(url, keep_user=True)}: a MySQL/MariaDB URL needs a user and a host (mysql://USER:PASSWORD@HOST:PORT/DB)"
            raise ConfigError(msg)
        database = unquote(parts.path.lstrip("/")) or None
        return cls(parts.hostname, port, unquote(parts.username), unquote(parts.password or ""), database)

    def label(self) -> str:
        """The source as messages name it (no password)."""
        return f"mysql://{self.user}@{self.host}:{self.port}/{self.database or ''}"


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

    driver = "pymysql"

    def __init__(self, source: MySqlSource) -> None:
        self._source = source
        self._columns: dict[TableRef, list[SourceColumn]] = {}

    def __enter__(self) -> MySqlReader:
        """Connect.

        Raises:
            ConnectorError: the server cannot be reached or refuses the login (named without the password).
        """
        import pymysql  # type: ignore[import-untyped]  # PyMySQL ships no type information

        source = self._source
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
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the connection."""
        self._conn.close()

    @property
    def connection(self) -> Any:
        """The PyMySQL connection (autocommit, UTC), between ``__enter__`` and ``__exit__``."""
        return self._conn

    def tables(self, schemas: Collection[str | None]) -> list[str]:
        """The tables of databases ``schemas`` (``information_schema.TABLES``), ``database.table``.

        Base tables and MariaDB's system-versioned tables hold rows Debezium captures; views and sequences
        are left out. Only tables the user may read are listed, as ``verify`` could compare no other.
        ``None`` is the URL's database, whose tables a table without a schema is read from; they are listed
        by name alone.

        Raises:
            ConnectorError: ``None`` is asked for and the URL names no database.
        """
        ids: list[str] = []
        named = sorted({s for s in schemas if s is not None})
        if None in schemas:
            if not self._source.database:
                msg = f"a mirrored table has no schema and {self._source.label()} names no database"
                raise ConnectorError(msg)
            ids += [name for _, name in self._base_tables([self._source.database])]
        ids += [f"{database}.{name}" for database, name in self._base_tables(named)]
        return sorted(ids)

    def _base_tables(self, databases: list[str]) -> list[tuple[str, str]]:
        if not databases:
            return []
        marks = ", ".join(["%s"] * len(databases))
        with self._conn.cursor() as cursor:
            cursor.execute(
                "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "  # noqa: S608 - placeholders only
                f"WHERE TABLE_SCHEMA IN ({marks}) AND TABLE_TYPE IN ('BASE TABLE', 'SYSTEM VERSIONED')",
                databases,
            )
            return [(str(database), str(name)) for database, name in cursor.fetchall()]

    def check(self, table: TableRef) -> None:
        """Find the source table of ``table`` and its columns.

        A mirrored table ``<schema>.<table>`` is read from database ``<schema>`` (Debezium's MySQL topics are
        ``prefix.database.table``); a table without a schema from the URL's database.

        Raises:
            ConnectorError: the source has no such table, or the URL names no database for a table without one.
        """
        database = _database_of(table, self._source)
        columns = self.columns(database, table.name)
        if not columns:
            msg = f"{table.id}: no table {database}.{table.name} at {self._source.label()}"
            raise ConnectorError(msg)
        self._columns[table] = columns

    def compare(self, table: TableRef, key_columns: list[str], mirror: pa.Table) -> TableReport:
        """Every row of the source table compared with ``mirror`` in canonical forms, and the column sets."""
        if table not in self._columns:
            self.check(table)
        columns = self._columns[table]
        database = _database_of(table, self._source)
        report = compare_table(table.id, key_columns, columns, self.rows(database, table.name, columns), mirror)
        report.judge_columns([c.name for c in columns], mirror)
        return report

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

    def differences(row: Row, mirrored: Row) -> list[str]:
        diffs = []
        for column, value in row.items():
            if column not in mirrored:
                if value is not None:
                    diffs.append(f"{column}: source={show(value)} mirror=<no column>")
            elif canonical(column, value, True) != canonical(column, mirrored[column], False):
                diffs.append(f"{column}: source={show(value)} mirror={show(mirrored[column])}")
        return diffs

    if not key_columns:  # a keyless table: rows as a multiset, in the source's columns
        names = [c.name for c in columns]
        return compare_as_multiset(
            table,
            source,
            mirror,
            source_form=lambda row: tuple(canonical(c, row.get(c), True) for c in names),
            mirror_form=lambda row: tuple(canonical(c, row.get(c), False) for c in names),
        )
    return compare_by_key(
        table,
        source,
        mirror,
        source_key=lambda row: tuple(canonical(k, row[k], True) for k in key_columns),
        mirror_key=lambda row: tuple(canonical(k, row.get(k), False) for k in key_columns),
        differences=differences,
    )


def _identity(value: Any) -> Any:
    return value


def _database_of(ref: TableRef, source: MySqlSource) -> str:
    if ref.schema:
        return ref.schema
    if source.database:
        return source.database
    msg = f"{ref.id}: the mirrored table has no schema and {source.label()} names no database"
    raise ConnectorError(msg)
