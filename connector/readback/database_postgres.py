"""``verify`` against a PostgreSQL source (any URL that is not ``mysql://`` or ``mariadb://``), through psycopg.

Values are compared exactly after one normalisation per type, so a difference means the mirror is
wrong, not that two libraries print a value differently: decimals compare numerically (Debezium strips
trailing zeros of unconstrained NUMERIC), ``real`` compares as float32, JSON compares as parsed
documents (``jsonb`` is normalised by Postgres), UUIDs as text, timestamps with time zone as instants.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import struct
import uuid
from collections.abc import Collection, Iterable, Iterator, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from connector.errors import first_line
from connector.landing_zone.layout import TableRef
from connector.readback.database_reader import Row, show, time_micros
from connector.readback.table_report import TableReport, compare_as_multiset, compare_by_key

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger(__name__)

POSITION_MESSAGE_PREFIX = "cdc-mirror-position"
"""The prefix of the logical-decoding messages that mark a source position (``PostgresReader.current_position``)."""


class PostgresReader:
    """One psycopg connection (autocommit), reading each mirrored table with ``SELECT *``."""

    driver = "psycopg"

    def __init__(self, url: str) -> None:
        self._url = url
        self._conn: psycopg.Connection[Any] | None = None
        self._emit_messages = True

    def __enter__(self) -> PostgresReader:
        """Connect."""
        import psycopg

        self._conn = psycopg.connect(self._url, autocommit=True)
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the connection."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def tables(self, schemas: Collection[str | None]) -> list[str]:
        """The base tables of ``schemas`` (``information_schema.tables``), ``schema.table``.

        ``BASE TABLE`` is what holds rows Debezium captures: views, foreign and temporary tables are left out.
        A partitioned table is listed with its partitions: Debezium publishes the changes under the
        partitions' names by default (under the root's with ``publish_via_partition_root``), so the side it
        does not publish is one for ``verify --ignore-tables``. Only tables the user may read are listed,
        as ``verify`` could compare no other. ``None`` is the session's ``current_schema()``, whose tables a
        table without a schema is read from; they are listed by name alone.
        """
        conn = self._connection()
        named = sorted({s for s in schemas if s is not None})
        ids: list[str] = []
        with conn.cursor() as cursor:
            cursor.execute(
                "SELECT table_schema, table_name FROM information_schema.tables "
                "WHERE table_type = 'BASE TABLE' AND table_schema = ANY(%s)",
                (named,),
            )
            ids += [f"{schema}.{name}" for schema, name in cursor.fetchall()]
            if None in schemas:
                cursor.execute(
                    "SELECT table_name FROM information_schema.tables "
                    "WHERE table_type = 'BASE TABLE' AND table_schema = current_schema()"
                )
                ids += [str(name) for (name,) in cursor.fetchall()]
        return sorted(ids)

    def check(self, table: TableRef) -> None:
        """Nothing to check ahead: ``verify`` compares only tables ``tables`` lists."""

    def compare(self, table: TableRef, key_columns: list[str], mirror: pa.Table) -> TableReport:
        """``SELECT *`` from the source table, compared with ``mirror`` (``compare_rows``), columns included."""
        from psycopg import sql

        conn = self._connection()
        query = sql.SQL("SELECT * FROM {}").format(
            sql.Identifier(table.schema, table.name) if table.schema else sql.Identifier(table.name)
        )
        with conn.cursor() as cursor:
            cursor.execute(query)
            names = [d.name for d in cursor.description or ()]
            rows = (dict(zip(names, values, strict=True)) for values in cursor)
            report = compare_rows(table.id, key_columns, rows, mirror)
        report.judge_columns(names, mirror)
        return report

    def current_position(self) -> str:
        """The source's position now: a change committed before it is in the WAL below it.

        The position is that of a logical-decoding message the reader writes (``pg_logical_emit_message``, prefix
        ``POSITION_MESSAGE_PREFIX``, empty, in a transaction of its own) rather than ``pg_current_wal_lsn()``: a slot
        confirms only what Debezium decoded, and pgoutput skips transactions that touch no published table, so on a
        quiet source the slot never reaches ``pg_current_wal_lsn()`` (seen on the local stack) and no lag gate
        would ever open. The message is decoded (Debezium sends it on as an ``op: m`` record, which the connector
        takes as noise), so the slot passes it within a heartbeat. Without the right to write it,
        ``pg_current_wal_lsn()``, said once: then a quiet source needs Debezium's ``heartbeat.action.query``.
        """
        import psycopg

        conn = self._connection()
        if self._emit_messages:
            try:
                with conn.cursor() as cursor:
                    cursor.execute("SELECT pg_logical_emit_message(true, %s, '')::text", (POSITION_MESSAGE_PREFIX,))
                    row = cursor.fetchone()
                return str(row[0]) if row else "0/0"
            except psycopg.Error as exc:
                self._emit_messages = False
                log.warning(
                    "the source position is pg_current_wal_lsn(): pg_logical_emit_message is refused (%s); on a "
                    "quiet source set Debezium's heartbeat.action.query, or the mirror never looks caught up",
                    first_line(str(exc)),
                )
        with conn.cursor() as cursor:
            cursor.execute("SELECT pg_current_wal_lsn()::text")
            row = cursor.fetchone()
        return str(row[0]) if row else "0/0"

    def captured_through(self, position: str) -> bool:
        """Whether Debezium has every change up to ``position`` (a logical slot confirmed it: it is in Kafka)."""
        with self._connection().cursor() as cursor:
            cursor.execute(
                "SELECT coalesce(bool_or(confirmed_flush_lsn >= %s::pg_lsn), false) FROM pg_replication_slots "
                "WHERE slot_type = 'logical'",
                (position,),
            )
            row = cursor.fetchone()
        return bool(row and row[0])

    def ranged_rows(
        self, table: TableRef, key_columns: list[str], after: tuple[Any, ...] | None, through: tuple[Any, ...] | None
    ) -> Iterator[Row]:
        """The rows with keys in ``(after, through]`` (no bound where ``None``), in key order, streamed.

        Text keys are ordered and bounded by code point (``COLLATE "C"``), the order Python and Arrow give
        them, so a key range means the same rows on both sides.
        """
        from psycopg import sql

        text = self._text_columns(table)
        keys = sql.SQL(", ").join(
            sql.SQL('{} COLLATE "C"').format(sql.Identifier(k)) if k in text else sql.Identifier(k) for k in key_columns
        )
        conditions: list[sql.Composable] = []
        params: list[Any] = []
        marks = sql.SQL(", ").join(sql.Placeholder() for _ in key_columns)
        if after is not None:
            conditions.append(sql.SQL("({}) > ({})").format(keys, marks))
            params += list(after)
        if through is not None:
            conditions.append(sql.SQL("({}) <= ({})").format(keys, marks))
            params += list(through)
        where = sql.SQL(" WHERE ") + sql.SQL(" AND ").join(conditions) if conditions else sql.SQL("")
        name = sql.Identifier(table.schema, table.name) if table.schema else sql.Identifier(table.name)
        query = sql.SQL("SELECT * FROM {}{} ORDER BY {}").format(name, where, keys)
        conn = self._connection()
        with conn.transaction(), conn.cursor(name=f"ranged_{id(self)}") as cursor:
            cursor.itersize = 10_000
            cursor.execute(query, params)
            names: list[str] | None = None
            for values in cursor:
                if names is None:
                    names = [d.name for d in cursor.description or ()]
                yield dict(zip(names, values, strict=True))

    def rows_by_keys(self, table: TableRef, key_columns: list[str], keys: Sequence[tuple[Any, ...]]) -> list[Row]:
        """The rows of ``keys`` (those the source still has), read in one statement: the audit's last look."""
        from psycopg import sql

        if not keys:
            return []
        columns = sql.SQL(", ").join(sql.Identifier(k) for k in key_columns)
        tuples = sql.SQL(", ").join(
            sql.SQL("({})").format(sql.SQL(", ").join(sql.Placeholder() for _ in key_columns)) for _ in keys
        )
        name = sql.Identifier(table.schema, table.name) if table.schema else sql.Identifier(table.name)
        query = sql.SQL("SELECT * FROM {} WHERE ({}) IN ({})").format(name, columns, tuples)
        with self._connection().cursor() as cursor:
            cursor.execute(query, [value for key in keys for value in key])
            names = [d.name for d in cursor.description or ()]
            return [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]

    def columns(self, table: TableRef) -> list[str]:
        """The table's columns, in order (``information_schema.columns``)."""
        return [name for name, _ in self._column_types(table)]

    def _text_columns(self, table: TableRef) -> set[str]:
        text = {"text", "character varying", "character"}
        return {name for name, data_type in self._column_types(table) if data_type in text}

    def _column_types(self, table: TableRef) -> list[tuple[str, str]]:
        with self._connection().cursor() as cursor:
            cursor.execute(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = coalesce(%s, current_schema()) AND table_name = %s ORDER BY ordinal_position",
                (table.schema, table.name),
            )
            return [(str(name), str(data_type)) for name, data_type in cursor.fetchall()]

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None:
            msg = "PostgresReader is used outside its with block"
            raise RuntimeError(msg)
        return self._conn


def compare_rows(
    table: str, key_columns: list[str], source: Iterable[Row], mirror: pa.Table, max_examples: int = 5
) -> TableReport:
    """Compare source rows with the replayed mirror table on every source column (keyless: as a multiset)."""
    types = {f.name: f.type for f in mirror.schema}
    if not key_columns:
        return _compare_keyless(table, list(source), mirror, types, max_examples)

    def differences(row: Row, mirrored: Row) -> list[str]:
        return [
            f"{column}: source={show(value)} mirror={show(mirrored.get(column))}"
            for column, value in row.items()
            if not _same(value, mirrored.get(column), types.get(column))
        ]

    return compare_by_key(
        table,
        source,
        mirror,
        source_key=lambda row: tuple(_normalise(row[k], types.get(k)) for k in key_columns),
        mirror_key=lambda row: tuple(row[k] for k in key_columns),
        differences=differences,
        max_examples=max_examples,
    )


def _compare_keyless(
    table: str, source: list[Row], mirror: pa.Table, types: dict[str, pa.DataType | None], max_examples: int
) -> TableReport:
    """A keyless table's rows as a multiset, each value in ``_same``'s form.

    A column the source reads as a decimal or a time of day and the mirror holds as text compares by the number or
    the microseconds the text spells.
    """
    columns = list(source[0]) if source else mirror.column_names
    kinds = {c: next((type(r[c]) for r in source if r[c] is not None), None) for c in columns}

    def form(column: str, value: Any) -> Any:
        kind, value = kinds.get(column), _normalise(value, types.get(column))
        if isinstance(value, str) and kind is Decimal:
            try:
                return _normalise(Decimal(value), None)
            except ArithmeticError:
                return value
        if kind in (dt.time, dt.timedelta) and isinstance(value, (str, dt.time, dt.timedelta)):
            return time_micros(value)
        return value

    def row_form(row: Row) -> tuple[Any, ...]:
        return tuple(form(c, row.get(c)) for c in columns)

    return compare_as_multiset(
        table, source, mirror, source_form=row_form, mirror_form=row_form, max_examples=max_examples
    )


def normalise(value: Any, arrow: pa.DataType | None) -> Any:
    """One comparable form per type (see the module docstring); ``arrow`` is the mirror's type of the column."""
    return _normalise(value, arrow)


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
        left, right = time_micros(left), time_micros(right)
    return bool(left == right)


def _is_text(arrow: pa.DataType) -> bool:
    """Delta reads strings back as ``string``, ``large_string`` or ``string_view`` depending on the path."""
    return bool(pa.types.is_string(arrow) or pa.types.is_large_string(arrow) or pa.types.is_string_view(arrow))
