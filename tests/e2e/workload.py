"""Workload generator for the end-to-end tests: a schema covering the Postgres types Debezium maps, an
initial (snapshot) load, and a deterministic streaming mix of the changes that break naive publishers.

Importable (``create_schema``, ``snapshot_phase``, ``streaming_phase``, ``init_sql``) and runnable::

    python tests/e2e/workload.py --dsn postgresql://u:p@127.0.0.1:5432/db --create-schema \
        --snapshot-rows 50 --ops 500 --rate 50 --seed 7
    python tests/e2e/workload.py --emit-sql init.sql --snapshot-rows 50   # schema + snapshot rows as SQL

The snapshot rows can be rendered as plain SQL (``init_sql``) so that they exist before the Debezium
connector is registered (``deploy/local/stack.sh up --init-sql FILE``) and therefore arrive as snapshot
reads (``op=r``), not as streamed inserts.

Tables (all in one schema, default ``public``):

``all_types``      every covered type, ``REPLICA IDENTITY DEFAULT``, key ``id int``
``toasted``        ``body text`` and ``blob bytea`` > 8 kB of incompressible data (stored out of line),
                   ``REPLICA IDENTITY DEFAULT``: an update of another column makes Debezium send the
                   ``__debezium_unavailable_value`` placeholder for them
``full_identity``  ``REPLICA IDENTITY FULL``, with a TOASTed column too, key ``id bigint``
``composite_key``  primary key ``(tenant_id int, item_code varchar(20))``

Determinism: the same seed over the same database state yields the same statements (the streaming phase
reads the existing keys, ordered, before it starts).
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import random
import string
import struct
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import psycopg
from psycopg import sql

ENUM_TYPE = "mood"
ENUM_LABELS = ("sad", "ok", "happy", "très bien")


@dataclass(frozen=True)
class Column:
    name: str
    sql_type: str  # as written in CREATE TABLE; "{enum}" is replaced by the qualified enum type
    nullable: bool = True


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]
    replica_identity_full: bool = False
    toast_columns: tuple[str, ...] = ()

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def non_key_columns(self) -> list[str]:
        return [c.name for c in self.columns if c.name not in self.key]

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)


TABLES: tuple[Table, ...] = (
    Table(
        "all_types",
        (
            Column("id", "integer", nullable=False),
            Column("c_int", "integer"),
            Column("c_bigint", "bigint"),
            Column("c_numeric", "numeric(12,2)"),
            Column("c_numeric_free", "numeric"),
            Column("c_real", "real"),
            Column("c_double", "double precision"),
            Column("c_bool", "boolean"),
            Column("c_text", "text"),
            Column("c_varchar", "varchar(64)"),
            Column("c_bytea", "bytea"),
            Column("c_date", "date"),
            Column("c_time", "time"),
            Column("c_timestamp", "timestamp"),
            Column("c_timestamptz", "timestamptz"),
            Column("c_uuid", "uuid"),
            Column("c_json", "json"),
            Column("c_jsonb", "jsonb"),
            Column("c_enum", "{enum}"),
        ),
        key=("id",),
    ),
    Table(
        "toasted",
        (
            Column("id", "bigint", nullable=False),
            Column("version", "integer", nullable=False),
            Column("note", "varchar(100)"),
            Column("body", "text"),
            Column("blob", "bytea"),
            Column("updated_at", "timestamptz"),
        ),
        key=("id",),
        toast_columns=("body", "blob"),
    ),
    Table(
        "full_identity",
        (
            Column("id", "bigint", nullable=False),
            Column("amount", "numeric(12,2)"),
            Column("status", "{enum}"),
            Column("attrs", "jsonb"),
            Column("body", "text"),
            Column("updated_at", "timestamp"),
        ),
        key=("id",),
        replica_identity_full=True,
        toast_columns=("body",),
    ),
    Table(
        "composite_key",
        (
            Column("tenant_id", "integer", nullable=False),
            Column("item_code", "varchar(20)", nullable=False),
            Column("qty", "integer"),
            Column("price", "numeric(10,4)"),
            Column("label", "text"),
            Column("valid_from", "date"),
            Column("changed_at", "timestamptz"),
        ),
        key=("tenant_id", "item_code"),
    ),
)
TABLES_BY_NAME = {t.name: t for t in TABLES}

# First key of the bigint-keyed tables: past 2**31 so a key that only fits in an int64 is exercised.
BIGINT_KEY_BASE = 5_000_000_000

Key = tuple[Any, ...]
Row = dict[str, Any]


# --------------------------------------------------------------------------------------------- values
_WORDS = (
    "alpha", "beta", "straße", "naïve", "café", "Œuvre", "日本語", "中文", "한국어", "Ελληνικά", "русский",
    "עברית", "العربية", "emoji🚀", "👍🏽", "tab\there", "new\nline", "quote'single", 'quote"double',
    "back\\slash", "percent%", "semi;colon", "  spaces  ", "ǅ", "ﬁ", "\u00a0nbsp",
)  # fmt: skip
_TOAST_ALPHABET = string.ascii_letters + string.digits + string.punctuation + "äöüßéèêçñøåæ€£¥§°±µ¶•"
_TIMEZONES = tuple(
    dt.timezone(dt.timedelta(minutes=m)) for m in (0, 60, 120, 330, 345, 540, 600, -180, -300, -420, -480, -570)
)


def _maybe_null(rng: random.Random, value: Callable[[], Any], p: float = 0.1) -> Any:
    return None if rng.random() < p else value()


def _text(rng: random.Random, max_words: int = 8) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(0, max_words)))


def _varchar(rng: random.Random, limit: int) -> str:
    return _text(rng, 12)[:limit]


def _toast_text(rng: random.Random) -> str:
    """Mostly > 8 kB of random characters (pglz cannot compress it, so it is stored out of line)."""
    r = rng.random()
    if r < 0.1:
        return _text(rng, 4)  # small, stays inline
    return "".join(rng.choices(_TOAST_ALPHABET, k=rng.randint(8_500, 16_000)))


def _toast_bytes(rng: random.Random) -> bytes:
    if rng.random() < 0.1:
        return rng.randbytes(rng.randint(0, 32))
    return rng.randbytes(rng.randint(8_500, 12_000))


def _numeric_12_2(rng: random.Random) -> Decimal:
    edge = (Decimal("0.00"), Decimal("-0.01"), Decimal("0.01"), Decimal("9999999999.99"), Decimal("-9999999999.99"))
    if rng.random() < 0.15:
        return rng.choice(edge)
    digits = rng.randint(1, 12)
    return Decimal(rng.randint(-(10**digits) + 1, 10**digits - 1)).scaleb(-2)


def _numeric_10_4(rng: random.Random) -> Decimal:
    return Decimal(rng.randint(-(10**10) + 1, 10**10 - 1)).scaleb(-4)


def _numeric_free(rng: random.Random) -> Decimal:
    """Variable scale (0..9, trailing zeros kept) and up to 28 significant digits, both signs."""
    if rng.random() < 0.1:
        return rng.choice((Decimal("0"), Decimal("-1.500"), Decimal("123456789012345678901234567.8")))
    scale = rng.randint(0, 9)
    digits = rng.randint(1, 28)
    return Decimal(rng.randint(-(10**digits) + 1, 10**digits - 1)).scaleb(-scale)


def _float32(x: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


def _real(rng: random.Random) -> float:
    if rng.random() < 0.1:
        return rng.choice((0.0, 1.0, -1.5, 3.4e38, -1.17549435e-38))
    return _float32(rng.uniform(-1.0, 1.0) * 10.0 ** rng.randint(-30, 30))


def _double(rng: random.Random) -> float:
    if rng.random() < 0.1:
        return rng.choice((0.0, 1.0, -2.5, 1.7976931348623157e308, 2.2250738585072014e-308, 0.1))
    return rng.uniform(-1.0, 1.0) * 10.0 ** rng.randint(-300, 300)


def _date(rng: random.Random) -> dt.date:
    if rng.random() < 0.15:
        return rng.choice((dt.date(1970, 1, 1), dt.date(1969, 12, 31), dt.date(2000, 2, 29), dt.date(1900, 1, 1)))
    return dt.date(1900, 1, 1) + dt.timedelta(days=rng.randint(0, 109_572))  # up to 2199-12-31


def _time(rng: random.Random) -> dt.time:
    if rng.random() < 0.15:
        return rng.choice((dt.time(0, 0), dt.time(23, 59, 59, 999_999), dt.time(12, 0, 0, 1)))
    return dt.time(rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59), rng.randint(0, 999_999))


def _timestamp(rng: random.Random) -> dt.datetime:
    if rng.random() < 0.15:
        return rng.choice(
            (
                dt.datetime(1970, 1, 1),  # noqa: DTZ001 - timestamp without time zone on purpose
                dt.datetime(1969, 12, 31, 23, 59, 59, 999_999),  # noqa: DTZ001
                dt.datetime(2038, 1, 19, 3, 14, 8, 1),  # noqa: DTZ001
            )
        )
    base = dt.datetime(1900, 1, 1)  # noqa: DTZ001
    return base + dt.timedelta(seconds=rng.randint(0, 9_467_280_000), microseconds=rng.randint(0, 999_999))


def _timestamptz(rng: random.Random) -> dt.datetime:
    return _timestamp(rng).replace(tzinfo=rng.choice(_TIMEZONES))


def _json_doc(rng: random.Random) -> dict[str, Any]:
    return {
        "n": rng.randint(-(10**6), 10**6),
        "f": round(rng.uniform(-1000, 1000), 3),
        "s": _text(rng, 3),
        "b": rng.random() < 0.5,
        "null": None,
        "arr": [rng.randint(0, 9) for _ in range(rng.randint(0, 4))],
        "nested": {"ünïcödé": _text(rng, 2), "depth": {"x": rng.randint(0, 3)}},
    }


def _json_text(rng: random.Random) -> str:
    # json (not jsonb) keeps the text verbatim: vary key order, spacing and escaping.
    doc = _json_doc(rng)
    sep = rng.choice(((",", ":"), (", ", ": ")))
    return json.dumps(doc, ensure_ascii=rng.random() < 0.5, separators=sep, sort_keys=rng.random() < 0.5)


def _jsonb_text(rng: random.Random) -> str:
    return json.dumps(_json_doc(rng), ensure_ascii=False)


def _enum(rng: random.Random) -> str:
    return rng.choice(ENUM_LABELS)


def _gen_non_key(rng: random.Random, table: Table) -> Row:
    n = _maybe_null
    if table.name == "all_types":
        return {
            "c_int": n(rng, lambda: rng.choice((rng.randint(-(2**31), 2**31 - 1), 0, -(2**31), 2**31 - 1))),
            "c_bigint": n(rng, lambda: rng.choice((rng.randint(-(2**63), 2**63 - 1), -(2**63), 2**63 - 1))),
            "c_numeric": n(rng, lambda: _numeric_12_2(rng)),
            "c_numeric_free": n(rng, lambda: _numeric_free(rng)),
            "c_real": n(rng, lambda: _real(rng)),
            "c_double": n(rng, lambda: _double(rng)),
            "c_bool": n(rng, lambda: rng.random() < 0.5),
            "c_text": n(rng, lambda: _text(rng, 20)),
            "c_varchar": n(rng, lambda: _varchar(rng, 64)),
            "c_bytea": n(rng, lambda: rng.randbytes(rng.randint(0, 48))),
            "c_date": n(rng, lambda: _date(rng)),
            "c_time": n(rng, lambda: _time(rng)),
            "c_timestamp": n(rng, lambda: _timestamp(rng)),
            "c_timestamptz": n(rng, lambda: _timestamptz(rng)),
            "c_uuid": n(rng, lambda: uuid.UUID(int=rng.getrandbits(128))),
            "c_json": n(rng, lambda: _json_text(rng)),
            "c_jsonb": n(rng, lambda: _jsonb_text(rng)),
            "c_enum": n(rng, lambda: _enum(rng)),
        }
    if table.name == "toasted":
        return {
            "version": rng.randint(0, 1000),
            "note": n(rng, lambda: _varchar(rng, 100)),
            "body": n(rng, lambda: _toast_text(rng)),
            "blob": n(rng, lambda: _toast_bytes(rng)),
            "updated_at": n(rng, lambda: _timestamptz(rng)),
        }
    if table.name == "full_identity":
        return {
            "amount": n(rng, lambda: _numeric_12_2(rng)),
            "status": n(rng, lambda: _enum(rng)),
            "attrs": n(rng, lambda: _jsonb_text(rng)),
            "body": n(rng, lambda: _toast_text(rng)),
            "updated_at": n(rng, lambda: _timestamp(rng)),
        }
    if table.name == "composite_key":
        return {
            "qty": n(rng, lambda: rng.randint(-1000, 100_000)),
            "price": n(rng, lambda: _numeric_10_4(rng)),
            "label": n(rng, lambda: _text(rng, 6)),
            "valid_from": n(rng, lambda: _date(rng)),
            "changed_at": n(rng, lambda: _timestamptz(rng)),
        }
    raise KeyError(table.name)


# ----------------------------------------------------------------------------------------------- keys
_ITEM_PREFIXES = ("item", "sku", "ключ", "項目")


class KeyBook:
    """Existing keys per table (sorted at load, then in insertion order) and the next fresh key."""

    def __init__(self) -> None:
        self.keys: dict[str, list[Key]] = {t.name: [] for t in TABLES}
        self._index: dict[str, dict[Key, int]] = {t.name: {} for t in TABLES}
        self.counter: dict[str, int] = {t.name: 0 for t in TABLES}

    def add(self, table: str, key: Key) -> None:
        self._index[table][key] = len(self.keys[table])
        self.keys[table].append(key)

    def remove(self, table: str, key: Key) -> None:
        keys, index = self.keys[table], self._index[table]
        pos = index.pop(key)
        last = keys.pop()
        if pos < len(keys):  # swap-remove keeps it O(1); order stays deterministic
            keys[pos] = last
            index[last] = pos

    def fresh(self, table: str) -> Key:
        while True:
            self.counter[table] += 1
            n = self.counter[table]
            if table == "all_types":
                key: Key = (n,)
            elif table in ("toasted", "full_identity"):
                key = (BIGINT_KEY_BASE + n,)
            else:
                key = (n % 7 + 1, f"{_ITEM_PREFIXES[n % len(_ITEM_PREFIXES)]}-{n:06d}")
            if key not in self._index[table]:
                return key


# ----------------------------------------------------------------------------------------------- SQL
def _qualified_enum(schema: str) -> str:
    return f'"{schema}"."{ENUM_TYPE}"'


def _sql_type(col: Column, schema: str) -> str:
    return col.sql_type.replace("{enum}", _qualified_enum(schema))


def schema_sql(schema: str = "public") -> str:
    """DDL of the workload schema (enum type, four tables, replica identities)."""
    out = [] if schema == "public" else [f'CREATE SCHEMA IF NOT EXISTS "{schema}";']
    labels = ", ".join("'" + label.replace("'", "''") + "'" for label in ENUM_LABELS)
    out.append(f"CREATE TYPE {_qualified_enum(schema)} AS ENUM ({labels});")
    for t in TABLES:
        cols = [f'  "{c.name}" {_sql_type(c, schema)}' + ("" if c.nullable else " NOT NULL") for c in t.columns]
        cols.append("  PRIMARY KEY (" + ", ".join(f'"{k}"' for k in t.key) + ")")
        out.append(f'CREATE TABLE "{schema}"."{t.name}" (\n' + ",\n".join(cols) + "\n);")
        identity = "FULL" if t.replica_identity_full else "DEFAULT"
        out.append(f'ALTER TABLE "{schema}"."{t.name}" REPLICA IDENTITY {identity};')
        for c in t.toast_columns:  # never compress: the value must be stored out of line as is
            out.append(f'ALTER TABLE "{schema}"."{t.name}" ALTER COLUMN "{c}" SET STORAGE EXTERNAL;')
    return "\n".join(out) + "\n"


def sql_literal(value: Any, sql_type: str) -> str:
    """Render a generated value as a SQL literal (standard_conforming_strings on, the default)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, bytes):
        text = "\\x" + value.hex()
    elif isinstance(value, Decimal):
        text = format(value, "f")
    elif isinstance(value, float):
        text = repr(value)
    elif isinstance(value, dt.date | dt.time):  # datetime is a date
        text = value.isoformat()
    else:
        text = str(value)
    return "'" + text.replace("'", "''") + "'::" + sql_type


def _insert_sql(schema: str, table: Table, row: Row) -> str:
    cols = ", ".join(f'"{c}"' for c in table.column_names)
    vals = ", ".join(sql_literal(row[c.name], _sql_type(c, schema)) for c in table.columns)
    return f'INSERT INTO "{schema}"."{table.name}" ({cols}) VALUES ({vals});'


# ------------------------------------------------------------------------------------------ database
@dataclass
class WorkloadStats:
    """What a phase did, per table and kind of operation."""

    ops: Counter[tuple[str, str]] = field(default_factory=Counter)
    transactions: int = 0

    def count(self, table: str, kind: str) -> None:
        self.ops[(table, kind)] += 1

    def min_messages(self, table: str) -> int:
        """Fewest Kafka records Debezium produces for this table's operations (tombstones included)."""
        per_kind = {"insert": 1, "update": 1, "toast_unchanged_update": 1, "delete": 2, "pk_update": 3}
        return sum(per_kind[kind] * n for (t, kind), n in self.ops.items() if t == table)

    def merge(self, other: WorkloadStats) -> WorkloadStats:
        return WorkloadStats(self.ops + other.ops, self.transactions + other.transactions)


def _ident(name: str) -> sql.Identifier:
    return sql.Identifier(name)


def _table_ref(schema: str, table: Table) -> sql.Identifier:
    return sql.Identifier(schema, table.name)


def _where_key(table: Table) -> sql.Composable:
    return sql.SQL(" AND ").join(sql.SQL("{} = %s").format(_ident(k)) for k in table.key)


def _exec_insert(conn: psycopg.Connection[Any], schema: str, table: Table, row: Row) -> None:
    q = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
        _table_ref(schema, table),
        sql.SQL(", ").join(_ident(c) for c in table.column_names),
        sql.SQL(", ").join(_placeholder(table.column(c), schema) for c in table.column_names),
    )
    conn.execute(q, [row[c] for c in table.column_names])


def _placeholder(col: Column, schema: str) -> sql.Composable:
    """``%s`` with a cast where Python's type alone does not pick the column type."""
    if col.sql_type == "{enum}":
        return sql.SQL("%s::{}").format(sql.Identifier(schema, ENUM_TYPE))
    if col.sql_type in ("json", "jsonb"):
        return sql.SQL("%s::" + col.sql_type)
    return sql.SQL("%s")


def _exec_update(conn: psycopg.Connection[Any], schema: str, table: Table, key: Key, values: Row) -> None:
    names = list(values)
    q = sql.SQL("UPDATE {} SET {} WHERE {}").format(
        _table_ref(schema, table),
        sql.SQL(", ").join(sql.SQL("{} = {}").format(_ident(c), _placeholder(table.column(c), schema)) for c in names),
        _where_key(table),
    )
    cur = conn.execute(q, [values[c] for c in names] + list(key))
    if cur.rowcount != 1:
        msg = f"update of {table.name} {key} touched {cur.rowcount} rows"
        raise RuntimeError(msg)


def _exec_delete(conn: psycopg.Connection[Any], schema: str, table: Table, key: Key) -> None:
    q = sql.SQL("DELETE FROM {} WHERE {}").format(_table_ref(schema, table), _where_key(table))
    cur = conn.execute(q, list(key))
    if cur.rowcount != 1:
        msg = f"delete of {table.name} {key} touched {cur.rowcount} rows"
        raise RuntimeError(msg)


def create_schema(conn: psycopg.Connection[Any], schema: str = "public") -> None:
    """Create the enum type and the four tables (fails if they exist)."""
    with conn.transaction():
        conn.execute(schema_sql(schema))


def _snapshot_rows(rows: int, seed: int) -> Iterable[tuple[Table, Row]]:
    rng = random.Random(seed)
    book = KeyBook()
    for table in TABLES:
        for _ in range(rows):
            key = book.fresh(table.name)
            book.add(table.name, key)
            yield table, {**dict(zip(table.key, key, strict=True)), **_gen_non_key(rng, table)}


def snapshot_phase(conn: psycopg.Connection[Any], rows: int, seed: int = 1, schema: str = "public") -> WorkloadStats:
    """Insert ``rows`` rows into every table, in one transaction per table."""
    stats = WorkloadStats()
    for table, group in itertools.groupby(_snapshot_rows(rows, seed), key=lambda tr: tr[0]):
        with conn.transaction():
            for _, row in group:
                _exec_insert(conn, schema, table, row)
                stats.count(table.name, "insert")
        stats.transactions += 1
    return stats


def snapshot_stats(rows: int) -> WorkloadStats:
    """Stats of ``snapshot_phase``/``init_sql`` with the same ``rows`` (without a database)."""
    stats = WorkloadStats()
    for t in TABLES:
        stats.ops[(t.name, "insert")] = rows
    stats.transactions = len(TABLES)
    return stats


def init_sql(rows: int, seed: int = 1, schema: str = "public") -> str:
    """The schema DDL plus exactly the rows ``snapshot_phase(conn, rows, seed)`` would insert, as SQL."""
    parts = [schema_sql(schema), "BEGIN;"]
    parts.extend(_insert_sql(schema, table, row) for table, row in _snapshot_rows(rows, seed))
    parts.append("COMMIT;")
    return "\n".join(parts) + "\n"


def _load_keys(conn: psycopg.Connection[Any], schema: str) -> KeyBook:
    book = KeyBook()
    for table in TABLES:
        order = sql.SQL(", ").join(_ident(k) for k in table.key)
        q = sql.SQL("SELECT {} FROM {} ORDER BY {}").format(order, _table_ref(schema, table), order)
        for rec in conn.execute(q).fetchall():
            book.add(table.name, tuple(rec))
    # Fresh keys continue after the largest counter seen, so they never collide with loaded keys.
    for name, keys in book.keys.items():
        nums = []
        for k in keys:
            if name == "all_types":
                nums.append(int(k[0]))
            elif name in ("toasted", "full_identity"):
                nums.append(int(k[0]) - BIGINT_KEY_BASE)
            else:
                tail = str(k[1]).rsplit("-", 1)[-1]
                nums.append(int(tail) if tail.isdigit() else 0)
        book.counter[name] = max(nums, default=0)
    return book


_KINDS = ("insert", "update", "pk_update", "delete", "toast_unchanged_update", "transaction")
_WEIGHTS = (30, 25, 8, 12, 15, 10)


def _one_op(
    conn: psycopg.Connection[Any], schema: str, rng: random.Random, book: KeyBook, stats: WorkloadStats, kind: str
) -> None:
    if kind == "toast_unchanged_update":
        table = TABLES_BY_NAME[rng.choice(("toasted", "full_identity"))]
    else:
        table = rng.choice(TABLES)
    keys = book.keys[table.name]
    if not keys and kind != "insert":
        kind = "insert"
    if kind == "insert":
        key = book.fresh(table.name)
        _exec_insert(conn, schema, table, {**dict(zip(table.key, key, strict=True)), **_gen_non_key(rng, table)})
        book.add(table.name, key)
    elif kind == "update":
        values = _gen_non_key(rng, table)
        # A partial update now and then: Debezium still sends the full new row.
        if rng.random() < 0.3:
            keep = rng.sample(sorted(values), k=max(1, len(values) // 2))
            values = {c: values[c] for c in sorted(keep)}
        _exec_update(conn, schema, table, rng.choice(keys), values)
    elif kind == "pk_update":
        old, new = rng.choice(keys), book.fresh(table.name)
        changes: Row = dict(zip(table.key, new, strict=True))
        if rng.random() < 0.5:  # sometimes change other columns in the same statement
            changes.update(_gen_non_key(rng, table))
        _exec_update(conn, schema, table, old, changes)
        book.remove(table.name, old)
        book.add(table.name, new)
    elif kind == "delete":
        key = rng.choice(keys)
        _exec_delete(conn, schema, table, key)
        book.remove(table.name, key)
    elif kind == "toast_unchanged_update":
        # Only non-TOASTed, non-key columns change: Debezium cannot see the old TOAST value (DEFAULT identity).
        gen = _gen_non_key(rng, table)
        cols = [c for c in table.non_key_columns if c not in table.toast_columns]
        chosen = sorted(rng.sample(cols, k=rng.randint(1, len(cols))))
        _exec_update(conn, schema, table, rng.choice(keys), {c: gen[c] for c in chosen})
    else:
        raise ValueError(kind)
    stats.count(table.name, kind)


def streaming_phase(
    conn: psycopg.Connection[Any],
    ops: int,
    rate: float | None = None,
    seed: int = 2,
    schema: str = "public",
    progress: Callable[[int], None] | None = None,
) -> WorkloadStats:
    """Run ``ops`` operations (a multi-row transaction counts its statements) at ``rate`` ops/s."""
    rng = random.Random(seed)
    book = _load_keys(conn, schema)
    stats = WorkloadStats()
    done = 0
    start = time.monotonic()
    while done < ops:
        kind = rng.choices(_KINDS, weights=_WEIGHTS)[0]
        if kind == "transaction":
            n = min(rng.randint(2, 6), ops - done)
            sub = rng.choices(_KINDS[:-1], weights=_WEIGHTS[:-1], k=n)
        else:
            n, sub = 1, [kind]
        with conn.transaction():
            for k in sub:
                _one_op(conn, schema, rng, book, stats, k)
        stats.transactions += 1
        done += n
        if progress is not None:
            progress(done)
        if rate:
            delay = start + done / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
    return stats


def table_names() -> Sequence[str]:
    return [t.name for t in TABLES]


# ------------------------------------------------------------------------------------------------ CLI
def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--dsn", help="postgresql:// URL (as printed by deploy/local/stack.sh up)")
    p.add_argument("--schema", default="public")
    p.add_argument("--create-schema", action="store_true", help="create the enum type and tables first")
    p.add_argument("--snapshot-rows", type=int, default=0, help="rows per table for the initial load")
    p.add_argument("--ops", type=int, default=0, help="streaming operations")
    p.add_argument("--rate", type=float, default=None, help="streaming operations per second")
    p.add_argument("--seed", type=int, default=2, help="streaming seed (the snapshot uses --snapshot-seed)")
    p.add_argument("--snapshot-seed", type=int, default=1)
    p.add_argument(
        "--emit-sql",
        metavar="FILE",
        help="write schema DDL + snapshot rows as SQL to FILE ('-' = stdout) and exit; no database needed",
    )
    a = p.parse_args(argv)
    if a.emit_sql:
        text = init_sql(a.snapshot_rows, a.snapshot_seed, a.schema)
        if a.emit_sql == "-":
            sys.stdout.write(text)
        else:
            with open(a.emit_sql, "w", encoding="utf-8") as fh:
                fh.write(text)
        return 0
    if not a.dsn:
        p.error("--dsn is required unless --emit-sql is given")
    with psycopg.connect(a.dsn, autocommit=True) as conn:
        stats = WorkloadStats()
        if a.create_schema:
            create_schema(conn, a.schema)
        if a.snapshot_rows:
            stats = stats.merge(snapshot_phase(conn, a.snapshot_rows, a.snapshot_seed, a.schema))
        if a.ops:
            t0 = time.monotonic()
            stats = stats.merge(streaming_phase(conn, a.ops, a.rate, a.seed, a.schema))
            print(f"streamed {a.ops} ops in {time.monotonic() - t0:.1f}s", file=sys.stderr)
    for (table, kind), n in sorted(stats.ops.items()):
        print(f"{table}\t{kind}\t{n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
