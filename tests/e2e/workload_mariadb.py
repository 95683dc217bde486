"""MariaDB workload for the end-to-end tests: every common MySQL type at its edges, and the changes that
break naive publishers (key moves, delete + re-insert in one transaction, a 1000-row transaction, a
column added mid-stream, TRUNCATE).

``init_sql`` is the schema and the snapshot rows as SQL, run by ``stack-mariadb.sh up --init-sql`` before
the connector is registered (so they arrive as snapshot reads). ``streaming_phase`` drives the changes
through PyMySQL; the same seed over the same database state yields the same statements.

Tables (database ``mirror``):

``all_types``  one column per common type; the snapshot rows hold the extremes (BIGINT UNSIGNED max,
               BIT(12) b'101000000001', TIME '838:59:59' and '-838:59:59', YEAR 1901/2155, DECIMAL(65,30)
               with all 65 digits, utf8mb4 emoji, a 100 KB LONGTEXT, JSON, ENUM, SET, DATETIME and
               TIMESTAMP at their range limits) and a row of NULLs
``items``      key ``id``: inserts, updates, deletes, key moves, delete + re-insert, the 1000-row transaction
``pairs``      composite key ``(tenant, code)``: key moves on one part of the key
``evolving``   gets ``ALTER TABLE ADD COLUMN`` in the middle of the stream
``wiped``      TRUNCATEd mid-stream, then refilled
``shapes``     spatial columns: ``g GEOMETRY`` (every geometry kind, SRIDs 0, 4326 and 3857, an empty
               collection, NULL), ``p POINT REF_SYSTEM_ID=4326 NOT NULL`` (MariaDB 10.11 has no MySQL 8
               ``SRID 4326`` attribute; ``REF_SYSTEM_ID`` is recorded but not enforced, so the values carry
               SRID 4326 themselves) and ``area POLYGON``; streamed inserts and updates change the geometries
               and their SRIDs, to and from NULL

FLOAT in the snapshot: Debezium reads snapshot rows through the text protocol, where the server prints a
FLOAT with six significant digits (the float32 maximum 3.4028234e38 arrives as 3.40282e38, and ``verify``
rightly reports it). Snapshot FLOATs therefore have at most six digits; the full float32 range is
streamed (the binlog carries the exact value).
"""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any

TABLES = ("all_types", "items", "pairs", "evolving", "wiped", "shapes")
LONG_TEXT_BYTES = 100 * 1024

_ALL_TYPES_COLUMNS = """
  id INT NOT NULL PRIMARY KEY,
  c_tinyint TINYINT, c_tinyint_u TINYINT UNSIGNED, c_bool BOOLEAN,
  c_smallint SMALLINT, c_smallint_u SMALLINT UNSIGNED,
  c_mediumint MEDIUMINT, c_mediumint_u MEDIUMINT UNSIGNED,
  c_int INT, c_int_u INT UNSIGNED,
  c_bigint BIGINT, c_bigint_u BIGINT UNSIGNED,
  c_float FLOAT, c_double DOUBLE,
  c_decimal DECIMAL(10,2), c_decimal_wide DECIMAL(65,30), c_decimal_38 DECIMAL(38,10),
  c_bit1 BIT(1), c_bit12 BIT(12), c_bit64 BIT(64),
  c_date DATE, c_datetime DATETIME, c_datetime6 DATETIME(6), c_timestamp6 TIMESTAMP(6) NULL DEFAULT NULL,
  c_time TIME, c_time6 TIME(6), c_year YEAR,
  c_char CHAR(10), c_varchar VARCHAR(200), c_text TEXT, c_longtext LONGTEXT,
  c_binary BINARY(4), c_varbinary VARBINARY(32), c_blob BLOB,
  c_json JSON, c_enum ENUM('small','medium','large'), c_set SET('red','green','blue')
"""
# Each snapshot row of all_types as SQL literals (after id), the extremes first.
_EXTREME_ROWS = [
    # maxima
    (
        "127, 255, 1, 32767, 65535, 8388607, 16777215, 2147483647, 4294967295, 9223372036854775807, "
        # FLOAT: six significant digits in the snapshot (module docstring); the float32 maximum is streamed.
        "18446744073709551615, 3.40282e38, 1.7976931348623157e308, 99999999.99, "
        "'" + "9" * 35 + "." + "9" * 30 + "', '" + "9" * 28 + "." + "9" * 10 + "', "
        "b'1', b'101000000001', b'1111111111111111111111111111111111111111111111111111111111111111', "
        "'9999-12-31', '9999-12-31 23:59:59', '9999-12-31 23:59:59.999999', '2038-01-19 03:14:07.999999', "
        "'838:59:59', '838:59:59.000000', 2155, 'ten chars!', 'emoji 😀🎉 ünïcödé 中文', 'text ✓', REPEAT('x', "
        f"{LONG_TEXT_BYTES}), x'00010203', x'DEADBEEF00', x'CAFE', "
        '\'{"a": 1, "nested": {"b": [1, 2.5, "three", null, true]}, "emoji": "😀"}\', \'large\', \'red,green,blue\''
    ),
    # minima
    (
        "-128, 0, 0, -32768, 0, -8388608, 0, -2147483648, 0, -9223372036854775808, 0, -1.5, -2.2250738585072014e-308, "
        "-99999999.99, '-" + "9" * 35 + "." + "9" * 30 + "', '-0.0000000001', b'0', b'000000000000', b'0', "
        "'1000-01-01', '1000-01-01 00:00:00', '1000-01-01 00:00:00.000000', '1970-01-01 00:00:01.000000', "
        "'-838:59:59', '-838:59:59.000000', 1901, '', '', '', '', x'00000000', x'', x'', '[]', 'small', ''"
    ),
    # everyday values, fractions and negatives of a second
    (
        "7, 8, 1, 1000, 2000, 30000, 40000, 123456, 3000000000, -42, 9223372036854775808, 3.14, 2.718281828459045, "
        "12.30, '0.000000000000000000000000000001', '1.5', b'1', b'000000000001', "
        "b'1000000000000000000000000000000000000000000000000000000000000001', "
        "'2024-02-29', '2024-02-29 12:34:56', '2024-02-29 12:34:56.789012', '2024-02-29 12:34:56.789012', "
        "'-00:00:01', '-00:00:00.500000', 2024, 'pad  ', 'a''quote\"and\\\\backslash', 'line\\nbreak', 'tab\\tend', "
        "x'41424344', x'00FF', x'0102030405', '\"just a string\"', 'medium', 'green'"
    ),
]
# Each snapshot row of shapes after id: (g, p, area) as SQL expressions.
_SHAPE_ROWS = [
    ("ST_GeomFromText('POINT(1 2)')", "ST_GeomFromText('POINT(-122.4194 37.7749)', 4326)",
     "ST_GeomFromText('POLYGON((0 0, 10 0, 10 10, 0 10, 0 0), (2 2, 2 3, 3 3, 2 2))', 4326)"),
    ("ST_GeomFromText('LINESTRING(0 0, 1.5 -2.25, 1e300 -1e-300)', 3857)", "ST_GeomFromText('POINT(0 0)', 4326)",
     "NULL"),
    ("ST_GeomFromText('POLYGON((0 0, 1 0, 1 1, 0 0))')", "ST_GeomFromText('POINT(180 -90)', 4326)", "NULL"),
    ("ST_GeomFromText('MULTIPOINT(1 1, 2 2)', 4326)", "ST_GeomFromText('POINT(1 1)', 4326)", "NULL"),
    ("ST_GeomFromText('MULTILINESTRING((0 0, 1 1), (2 2, 3 3))')", "ST_GeomFromText('POINT(2 2)', 4326)", "NULL"),
    ("ST_GeomFromText('MULTIPOLYGON(((0 0, 1 0, 1 1, 0 0)), ((5 5, 6 5, 6 6, 5 5)))', 4326)",
     "ST_GeomFromText('POINT(3 3)', 4326)", "NULL"),
    ("ST_GeomFromText('GEOMETRYCOLLECTION(POINT(1 1), LINESTRING(0 0, 1 1))', 4326)",
     "ST_GeomFromText('POINT(4 4)', 4326)", "NULL"),
    ("ST_GeomFromText('GEOMETRYCOLLECTION EMPTY')", "ST_GeomFromText('POINT(5 5)', 4326)", "NULL"),
    ("NULL", "ST_GeomFromText('POINT(-0.5 0.25)', 4326)", "NULL"),
]  # fmt: skip


def init_sql(seed: int = 1, rows: int = 20) -> str:
    """The schema and snapshot rows as SQL (for ``stack-mariadb.sh up --init-sql``)."""
    rng = random.Random(seed)
    out = [
        f"CREATE TABLE all_types ({_ALL_TYPES_COLUMNS});",
        "CREATE TABLE items (id INT NOT NULL PRIMARY KEY, name VARCHAR(100) NOT NULL, qty INT, price DECIMAL(12,4), "
        "note TEXT, updated DATETIME(6)) CHARACTER SET utf8mb4;",
        "CREATE TABLE pairs (tenant INT NOT NULL, code VARCHAR(20) NOT NULL, v BIGINT UNSIGNED, "
        "PRIMARY KEY (tenant, code));",
        "CREATE TABLE evolving (id INT NOT NULL PRIMARY KEY, a VARCHAR(50));",
        "CREATE TABLE wiped (id INT NOT NULL PRIMARY KEY, v VARCHAR(50));",
        "CREATE TABLE shapes (id INT NOT NULL PRIMARY KEY, g GEOMETRY NULL, p POINT REF_SYSTEM_ID=4326 NOT NULL, "
        "area POLYGON NULL);",
        "CREATE TABLE e2e_watermark (token VARCHAR(64) NOT NULL PRIMARY KEY);",
    ]
    for number, values in enumerate(_EXTREME_ROWS, start=1):
        out.append(f"INSERT INTO all_types VALUES ({number}, {values});")
    out.append("INSERT INTO all_types (id) VALUES (4);")  # every column NULL
    for number, (g, p, area) in enumerate(_SHAPE_ROWS, start=1):
        out.append(f"INSERT INTO shapes VALUES ({number}, {g}, {p}, {area});")
    for i in range(1, rows + 1):
        out.append(
            f"INSERT INTO items VALUES ({i}, 'item {i} ✓', {rng.randint(0, 100)}, {_price(rng)}, NULL, "
            f"'2024-01-{(i % 28) + 1:02d} 10:00:00.{i:06d}');"
        )
        out.append(f"INSERT INTO pairs VALUES ({i % 4}, 'c{i}', {rng.randint(0, 2**64 - 1)});")
        out.append(f"INSERT INTO evolving VALUES ({i}, 'a{i}');")
        out.append(f"INSERT INTO wiped VALUES ({i}, 'before truncate {i}');")
    return "\n".join(out) + "\n"


def _price(rng: random.Random) -> str:
    return str(Decimal(rng.randint(-(10**9), 10**9)) / Decimal(10**4))


def _execute(conn: Any, statement: str, args: Any = None) -> None:
    with conn.cursor() as cursor:
        cursor.execute(statement, args)


def _keys(conn: Any, table: str, columns: str) -> list[tuple[Any, ...]]:
    with conn.cursor() as cursor:
        cursor.execute(f"SELECT {columns} FROM {table} ORDER BY {columns}")  # noqa: S608 - test constants
        return [tuple(row) for row in cursor.fetchall()]


def streaming_phase(conn: Any, seed: int, big_transaction: bool = True) -> None:
    """One round of every kind of change (autocommit connection; transactions where stated)."""
    rng = random.Random(seed)
    base = seed * 100_000
    # inserts, updates, deletes
    for i in range(30):
        _execute(
            conn,
            "INSERT INTO items VALUES (%s, %s, %s, %s, %s, %s)",
            (base + i, f"new {seed}/{i} 🚀", rng.randint(0, 9), _price(rng), "n" * rng.randint(0, 50), None),
        )
    ids = [k[0] for k in _keys(conn, "items", "id")]
    for item in rng.sample(ids, min(15, len(ids))):
        _execute(
            conn, "UPDATE items SET qty = qty + 1, price = %s, updated = NOW(6) WHERE id = %s", (_price(rng), item)
        )
    ids = [k[0] for k in _keys(conn, "items", "id")]
    for item in rng.sample(ids, min(5, len(ids))):
        _execute(conn, "DELETE FROM items WHERE id = %s", (item,))
    # primary-key moves: single key, each to a key never used before
    ids = [k[0] for k in _keys(conn, "items", "id")]
    for number, item in enumerate(rng.sample(ids, min(3, len(ids))), start=1):
        _execute(
            conn,
            "UPDATE items SET id = %s, name = CONCAT(name, ' moved') WHERE id = %s",
            (max(ids) + 10_000_000 + number, item),
        )
    # composite key: move one part
    pairs = _keys(conn, "pairs", "tenant, code")
    for tenant, code in rng.sample(pairs, min(3, len(pairs))):
        _execute(conn, "UPDATE pairs SET code = %s WHERE tenant = %s AND code = %s", (f"{code}m{seed}", tenant, code))
        _execute(
            conn,
            "UPDATE pairs SET tenant = tenant + 100, v = %s WHERE tenant = %s AND code = %s",
            (2**64 - 1, tenant, f"{code}m{seed}"),
        )
    # delete and re-insert the same key in one transaction
    ids = [k[0] for k in _keys(conn, "items", "id")]
    victim = rng.choice(ids)
    conn.begin()
    _execute(conn, "DELETE FROM items WHERE id = %s", (victim,))
    _execute(conn, "INSERT INTO items VALUES (%s, %s, 1, 1.0000, 're-inserted', NULL)", (victim, f"reborn {seed}"))
    conn.commit()
    if big_transaction:
        conn.begin()
        with conn.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO items VALUES (%s, %s, %s, %s, NULL, NULL)",
                [(base + 50_000 + i, f"bulk {i}", i, _price(rng)) for i in range(1000)],
            )
        conn.commit()
    # all_types: change the extremes' neighbours, add a row
    _execute(
        conn,
        "UPDATE all_types SET c_bigint_u = c_bigint_u - 1, c_time6 = '-12:34:56.000001', c_bit12 = b'111111111111', "
        "c_json = JSON_OBJECT('seed', %s), c_set = 'blue,red', c_enum = 'small', c_year = 1999 WHERE id = 3",
        (seed,),
    )
    _execute(
        conn,
        "INSERT INTO all_types (id, c_float, c_bigint_u, c_decimal_wide, c_bit12, c_time, c_year, c_varchar, "
        "c_longtext, c_timestamp6, c_datetime6) VALUES (%s, 3.4028234e38, 18446744073709551615, %s, b'101000000001', "
        "'838:59:59', 2155, "
        "'streamed 😀', REPEAT('y', %s), '2030-06-15 01:02:03.000004', '2030-06-15 01:02:03.000004')",
        (100 + seed, "-" + "1" * 35 + "." + "2" * 30, LONG_TEXT_BYTES),
    )
    _shapes_phase(conn, seed)


def _shapes_phase(conn: Any, seed: int) -> None:
    """shapes: a new row, geometries (and SRIDs) changed, a geometry set to NULL and one set from NULL."""
    x, y = seed + 0.125, -seed - 0.5
    _execute(
        conn,
        "INSERT INTO shapes VALUES (%s, ST_GeomFromText(%s, 3857), ST_GeomFromText(%s, 4326), "
        "ST_GeomFromText(%s, 4326))",
        (1000 + seed, f"LINESTRING({x} {y}, {y} {x})", f"POINT({x} {y})", f"POLYGON((0 0, {x} 0, {x} {x}, 0 0))"),
    )
    _execute(
        conn,
        "UPDATE shapes SET g = ST_GeomFromText(%s, 4326), p = ST_GeomFromText(%s, 4326) WHERE id = 1",
        (f"MULTIPOINT({x} {y}, {y} {x})", f"POINT({y} {x})"),
    )
    _execute(conn, "UPDATE shapes SET g = ST_GeomFromText(%s), area = NULL WHERE id = 2", (f"POINT({x} {x})",))
    _execute(conn, "UPDATE shapes SET g = NULL WHERE id = 3")
    _execute(
        conn,
        "UPDATE shapes SET g = ST_GeomFromText(%s, 3857), area = ST_GeomFromText(%s) WHERE id = 9",
        (f"POINT({seed} {seed})", f"POLYGON((0 0, {seed} 0, 0 {seed}, 0 0))"),
    )


def evolve_and_truncate(conn: Any, seed: int) -> None:
    """``ALTER TABLE ADD COLUMN`` mid-stream, and ``TRUNCATE`` followed by new rows."""
    _execute(conn, "INSERT INTO evolving (id, a) VALUES (%s, 'before alter')", (1000 + seed,))
    _execute(conn, f"ALTER TABLE evolving ADD COLUMN added_{seed} DECIMAL(20,5) NULL")
    _execute(conn, f"UPDATE evolving SET added_{seed} = 1.25 WHERE id <= 5")
    _execute(conn, f"INSERT INTO evolving (id, a, added_{seed}) VALUES (%s, 'after alter', -3.5)", (2000 + seed,))
    _execute(conn, "TRUNCATE TABLE wiped")
    for i in range(5):
        _execute(conn, "INSERT INTO wiped VALUES (%s, %s)", (seed * 10 + i, f"after truncate {seed}"))
