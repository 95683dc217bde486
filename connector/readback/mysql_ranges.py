"""A MySQL/MariaDB source as the audit reads it (``mirror_compare.RangedSource``): key ranges, keys, its position.

Rows come in key order with text keys ordered by code point (``CONVERT(… USING utf8mb4) COLLATE utf8mb4_bin``,
the order Python and Arrow give them; the column's own collation may fold case), so a key range means the same
rows on both sides. Values compare in ``database_mysql``'s canonical forms, chosen from each column's source type
(``compare_rules``): keys are those forms too (an integer key is an exact ``Decimal``). The position gate is
``mysql_position``'s: a mark row in Debezium's signalling table, seen back in Kafka.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from connector.errors import ConnectorError, first_line
from connector.landing_zone.layout import TableRef
from connector.readback.database_mysql import (
    MySqlReader,
    MySqlSource,
    SourceColumn,
    canonical_for,
    compare_table,
    source_timestamp,
)
from connector.readback.database_reader import Row
from connector.readback.mysql_position import (
    MARK_TYPE,
    MarkWatcher,
    mark_delete,
    mark_insert,
    mark_of,
    new_mark,
    position_text,
)
from connector.readback.table_report import TableReport

log = logging.getLogger(__name__)

_TEXT = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"}


class MySqlRules:
    """``database_mysql``'s comparison of one table (``mirror_compare.CompareRules``)."""

    def __init__(self, columns: list[SourceColumn]) -> None:
        self._columns = columns
        self._canon = {c.name: canonical_for(c) for c in columns}
        self._timestamps = {c.name for c in columns if c.data_type.lower() == "timestamp"}

    def form(self, column: str, value: Any, arrow: pa.DataType | None, *, source: bool) -> Any:
        """The canonical form of a value of ``column`` (a source ``TIMESTAMP`` is read in UTC, and marked so)."""
        if value is None:
            return None
        if source and column in self._timestamps:
            value = source_timestamp(value)
        canon = self._canon.get(column)
        return value if canon is None else canon(value)

    def compare_rows(self, table: str, key_columns: list[str], source: Iterable[Row], mirror: pa.Table) -> TableReport:
        """``database_mysql.compare_table`` on these rows."""
        return compare_table(table, key_columns, self._columns, iter(source), mirror)


class MySqlRangedReader:
    """One PyMySQL connection (``MySqlReader``'s, in UTC) reading key ranges, and the mark gate on Kafka."""

    driver = "pymysql"

    def __init__(self, url: str, signal_table: str, watcher: Callable[[], MarkWatcher]) -> None:
        self._reader = MySqlReader(MySqlSource.from_url(url))
        self._source = MySqlSource.from_url(url)
        self._signal_table = signal_table
        self._insert = mark_insert(signal_table)
        self._make_watcher = watcher
        self._watcher: MarkWatcher | None = None
        self._marks: list[str] = []
        self._columns: dict[TableRef, list[SourceColumn]] = {}

    def __enter__(self) -> MySqlRangedReader:
        """Connect."""
        self._reader.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        """Delete this round's marks, close the connection and the Kafka consumer."""
        if self._watcher is not None:
            self._watcher.close()
        try:
            self._delete_marks()
        finally:
            self._reader.__exit__(*exc)

    def current_position(self) -> str:
        """A mark row written to the signalling table now, in a transaction of its own (``mysql_position``).

        Raises:
            ConnectorError: the insert is refused (the audit's user may not write the signalling table).
        """
        import pymysql  # type: ignore[import-untyped]

        watcher = self._watch()
        watcher.before_mark()
        mark = new_mark()
        self._marks.append(mark)
        try:
            with self._reader.connection.cursor() as cursor:
                cursor.execute(self._insert, (mark, MARK_TYPE, '{"message": "cdc-mirror audit position"}'))
                cursor.execute("SELECT @@last_gtid")
                row = cursor.fetchone()
        except pymysql.MySQLError as exc:
            msg = (
                f"the audit's position mark could not be written to {self._signal_table} ({first_line(str(exc))}): "
                "grant the audit's user INSERT on Debezium's signalling table (mirror.audit.signal_table)"
            )
            raise ConnectorError(msg) from None
        coordinates = str(row[0]) if row and row[0] else self._binlog_file_position()
        return position_text(coordinates, mark)

    def captured_through(self, position: str) -> bool:
        """Whether the mark of ``position`` is in the signalling table's topic (Debezium read the binlog past it)."""
        return self._watch().seen(mark_of(position))

    def _delete_marks(self) -> None:
        """Delete the marks this reader wrote (their inserts are in the binlog: the gate needs the rows no more).

        So marks do not pile up in the signalling table (Debezium acts on inserted signal rows only). Without the
        right to delete, they stay, said once a round.
        """
        import pymysql

        if not self._marks:
            return
        try:
            with self._reader.connection.cursor() as cursor:
                cursor.execute(mark_delete(self._signal_table, len(self._marks)), self._marks)
        except pymysql.MySQLError as exc:
            log.warning(
                "audit: the position marks stay in %s: deleting them was refused (%s)",
                self._signal_table,
                first_line(str(exc)),
            )
        self._marks = []

    def ranged_rows(
        self, table: TableRef, key_columns: list[str], after: tuple[Any, ...] | None, through: tuple[Any, ...] | None
    ) -> Iterator[Row]:
        """The rows with keys in ``(after, through]`` (no bound where ``None``), in key order, streamed."""
        import pymysql.cursors  # type: ignore[import-untyped]

        columns = self._table_columns(table)
        keys = ", ".join(_order_expression(_column(columns, k)) for k in key_columns)
        marks = ", ".join(["%s"] * len(key_columns))
        conditions: list[str] = []
        params: list[Any] = []
        if after is not None:
            conditions.append(f"({keys}) > ({marks})")
            params += list(after)
        if through is not None:
            conditions.append(f"({keys}) <= ({marks})")
            params += list(through)
        where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        query = f"SELECT {_select_list(columns)} FROM {self._name(table)}{where} ORDER BY {keys}"  # noqa: S608
        names = [c.name for c in columns]
        with self._reader.connection.cursor(pymysql.cursors.SSCursor) as cursor:
            cursor.execute(query, params)
            for values in cursor:
                yield dict(zip(names, values, strict=True))

    def rows_by_keys(self, table: TableRef, key_columns: list[str], keys: Sequence[tuple[Any, ...]]) -> list[Row]:
        """The rows of ``keys`` (those the source still has), in one statement."""
        if not keys:
            return []
        columns = self._table_columns(table)
        names = [c.name for c in columns]
        tuple_marks = "(" + ", ".join(["%s"] * len(key_columns)) + ")"
        key_list = ", ".join(_quote(k) for k in key_columns)
        query = (
            f"SELECT {_select_list(columns)} FROM {self._name(table)} "  # noqa: S608 - quoted identifiers
            f"WHERE ({key_list}) IN ({', '.join([tuple_marks] * len(keys))})"
        )
        with self._reader.connection.cursor() as cursor:
            cursor.execute(query, [value for key in keys for value in key])
            return [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]

    def columns(self, table: TableRef) -> list[str]:
        """The table's columns, in order."""
        return [c.name for c in self._table_columns(table)]

    def compare_rules(self, table: TableRef) -> MySqlRules:
        """How the table's rows are compared: ``database_mysql``'s canonical forms of its source types."""
        return MySqlRules(self._table_columns(table))

    def _table_columns(self, table: TableRef) -> list[SourceColumn]:
        if table not in self._columns:
            database = table.schema or self._source.database
            if not database:
                msg = f"{table.id}: the mirrored table has no schema and {self._source.label()} names no database"
                raise ConnectorError(msg)
            columns = self._reader.columns(database, table.name)
            if not columns:
                msg = f"{table.id}: no table {database}.{table.name} at {self._source.label()}"
                raise ConnectorError(msg)
            self._columns[table] = columns
        return self._columns[table]

    def _name(self, table: TableRef) -> str:
        return f"{_quote(table.schema or self._source.database or '')}.{_quote(table.name)}"

    def _watch(self) -> MarkWatcher:
        if self._watcher is None:
            self._watcher = self._make_watcher()
        return self._watcher

    def _binlog_file_position(self) -> str:
        with self._reader.connection.cursor() as cursor:
            cursor.execute("SHOW MASTER STATUS")
            row = cursor.fetchone()
        return f"{row[0]}:{row[1]}" if row else "?"


def _column(columns: list[SourceColumn], name: str) -> SourceColumn:
    for column in columns:
        if column.name == name:
            return column
    msg = f"no key column {name!r} in the source table"
    raise ConnectorError(msg)


def _order_expression(column: SourceColumn) -> str:
    """A key column as ordered and bounded: text by code point, everything else as it is."""
    if column.data_type.lower() in _TEXT:
        return f"CONVERT({_quote(column.name)} USING utf8mb4) COLLATE utf8mb4_bin"
    return _quote(column.name)


def _select_list(columns: list[SourceColumn]) -> str:
    """The columns as ``database_mysql`` selects them (``FLOAT`` read exactly through a cast)."""
    return ", ".join(
        f"CAST({_quote(c.name)} AS DOUBLE) AS {_quote(c.name)}" if c.data_type.lower() == "float" else _quote(c.name)
        for c in columns
    )


def _quote(identifier: str) -> str:
    return "`" + identifier.replace("`", "``") + "`"
