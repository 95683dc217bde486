"""The source database's catalogue: each base table's columns (in order, with their types) and primary key.

``run`` reads it once at start to publish the tables no change event announces (``connector.stream.empty_tables``).
Only ``information_schema`` is read, which every user may read for the tables it can see: no privilege beyond what
the audit's and ``verify``'s user already has.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from connector.debezium.catalogue_types import CatalogueColumn
from connector.errors import ConnectorError
from connector.readback.database_mysql import MySqlSource, is_mysql_url

_SYSTEM_SCHEMAS = ("pg_catalog", "information_schema", "mysql", "performance_schema", "sys")

_COLUMNS = (
    "SELECT c.table_schema, c.table_name, c.column_name, lower(c.data_type), c.numeric_precision, c.numeric_scale, "
    "c.datetime_precision, c.character_maximum_length, {column_type} "
    "FROM information_schema.columns c JOIN information_schema.tables t "
    "ON t.table_schema = c.table_schema AND t.table_name = c.table_name "
    "WHERE t.table_type = 'BASE TABLE' AND c.table_schema NOT IN ({system}) "
    "ORDER BY c.table_schema, c.table_name, c.ordinal_position"
)
_KEYS = (
    "SELECT k.table_schema, k.table_name, k.column_name FROM information_schema.table_constraints c "
    "JOIN information_schema.key_column_usage k ON k.constraint_schema = c.constraint_schema "
    "AND k.constraint_name = c.constraint_name AND k.table_schema = c.table_schema AND k.table_name = c.table_name "
    "WHERE c.constraint_type = 'PRIMARY KEY' AND c.table_schema NOT IN ({system}) "
    "ORDER BY k.table_schema, k.table_name, k.ordinal_position"
)


@dataclass
class CatalogueTable:
    """One base table of the source: ``schema`` is the Postgres schema, or the MySQL/MariaDB database."""

    schema: str
    name: str
    columns: list[CatalogueColumn] = field(default_factory=list)
    key_columns: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        """``schema.table``, as Debezium names the table in its lists and topics."""
        return f"{self.schema}.{self.name}"


def dialect(source_url: str) -> str:
    """``mysql`` for a MySQL/MariaDB URL, else ``postgres``."""
    return "mysql" if is_mysql_url(source_url) else "postgres"


def read_catalogue(source_url: str) -> list[CatalogueTable]:
    """Every base table outside the system schemas, with columns and primary key.

    Raises:
        ConnectorError: the database cannot be reached or read (the message names no secret).
    """
    system = ", ".join(f"'{name}'" for name in _SYSTEM_SCHEMAS)
    if is_mysql_url(source_url):
        rows, keys = _read_mysql(MySqlSource.from_url(source_url), system)
    else:
        rows, keys = _read_postgres(source_url, system)
    return catalogue_tables(rows, keys)


def catalogue_tables(rows: Iterable[tuple[Any, ...]], keys: Iterable[tuple[Any, ...]]) -> list[CatalogueTable]:
    """The tables of the column rows (``_COLUMNS``' order) and key rows (``_KEYS``')."""
    tables: dict[tuple[str, str], CatalogueTable] = {}
    for schema, table, column, data_type, precision, scale, dt_precision, length, column_type in rows:
        found = tables.setdefault((schema, table), CatalogueTable(schema, table))
        found.columns.append(
            CatalogueColumn(
                column,
                str(data_type),
                _int(precision),
                _int(scale),
                _int(dt_precision),
                _int(length),
                column_type or "",
            )
        )
    for schema, table, column in keys:
        if (schema, table) in tables:
            tables[schema, table].key_columns.append(column)
    return list(tables.values())


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _read_postgres(url: str, system: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    import psycopg

    try:
        with psycopg.connect(url, autocommit=True) as conn:
            rows = conn.execute(_COLUMNS.format(column_type="''", system=system)).fetchall()
            keys = conn.execute(_KEYS.format(system=system)).fetchall()
    except psycopg.Error as exc:
        msg = f"cannot read the source catalogue: {type(exc).__name__}: {exc.sqlstate or 'no connection'}"
        raise ConnectorError(msg) from None
    return rows, keys


def _read_mysql(source: MySqlSource, system: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    import pymysql  # type: ignore[import-untyped]  # PyMySQL ships no type information

    try:
        conn = pymysql.connect(
            host=source.host, port=source.port, user=source.user, password=source.password, charset="utf8mb4"
        )
        try:
            with conn.cursor() as cursor:
                cursor.execute(_COLUMNS.format(column_type="c.column_type", system=system))
                rows = list(cursor.fetchall())
                cursor.execute(_KEYS.format(system=system))
                keys = list(cursor.fetchall())
        finally:
            conn.close()
    except pymysql.MySQLError as exc:
        msg = f"cannot read the source catalogue of {source.label()}: {exc}"
        raise ConnectorError(msg) from None
    return rows, keys
