"""A column typed from the catalogue gets the Arrow type the sink gives Debezium's real event schema of it."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from connector.debezium.catalogue_types import CatalogueColumn, DebeziumTypeSettings, connect_field
from connector.debezium.types import column_type_from_schema

REAL_PG = Path(__file__).resolve().parents[2] / "data" / "real_pg" / "create.jsonl"

# public.all_types of tests/e2e/workload.py as Postgres's information_schema.columns describes it.
ALL_TYPES = [
    CatalogueColumn("id", "integer", 32, 0),
    CatalogueColumn("c_int", "integer", 32, 0),
    CatalogueColumn("c_bigint", "bigint", 64, 0),
    CatalogueColumn("c_numeric", "numeric", 12, 2),
    CatalogueColumn("c_numeric_free", "numeric"),
    CatalogueColumn("c_real", "real", 24),
    CatalogueColumn("c_double", "double precision", 53),
    CatalogueColumn("c_bool", "boolean"),
    CatalogueColumn("c_text", "text"),
    CatalogueColumn("c_varchar", "character varying", character_maximum_length=64),
    CatalogueColumn("c_bytea", "bytea"),
    CatalogueColumn("c_date", "date", datetime_precision=0),
    CatalogueColumn("c_time", "time without time zone", datetime_precision=6),
    CatalogueColumn("c_timestamp", "timestamp without time zone", datetime_precision=6),
    CatalogueColumn("c_timestamptz", "timestamp with time zone", datetime_precision=6),
    CatalogueColumn("c_uuid", "uuid"),
    CatalogueColumn("c_json", "json"),
    CatalogueColumn("c_jsonb", "jsonb"),
    CatalogueColumn("c_enum", "user-defined"),
]


def real_event_fields() -> dict[str, dict[str, object]]:
    """The row fields of a real Debezium create event of public.all_types (Postgres, default settings)."""
    for line in REAL_PG.read_text().splitlines():
        record = json.loads(line)
        if record["topic"].endswith(".all_types") and record["payload"]:
            fields = json.loads(record["payload"])["schema"]["fields"]
            after = next(f for f in fields if f["field"] == "after")
            return {f["field"]: f for f in after["fields"]}
    raise AssertionError("no all_types event in the sample")


def test_every_postgres_column_gets_the_arrow_type_of_its_real_debezium_schema() -> None:
    real = real_event_fields()
    for column in ALL_TYPES:
        expected = column_type_from_schema(real[column.name]).arrow
        got = column_type_from_schema(connect_field("postgres", column, DebeziumTypeSettings())).arrow
        assert got == expected, column.name


@pytest.mark.parametrize(
    ("column", "expected"),
    [
        (CatalogueColumn("a", "bigint", column_type="bigint(20) unsigned"), pa.decimal128(20, 0)),
        (CatalogueColumn("b", "int", column_type="int(10) unsigned"), pa.int64()),
        (CatalogueColumn("c", "smallint", column_type="smallint(6)"), pa.int16()),
        (CatalogueColumn("d", "decimal", 30, 10, column_type="decimal(30,10)"), pa.decimal128(30, 10)),
        (CatalogueColumn("e", "datetime", datetime_precision=3, column_type="datetime(3)"), pa.timestamp("us")),
        (CatalogueColumn("f", "timestamp", column_type="timestamp"), pa.timestamp("us", tz="UTC")),
        (CatalogueColumn("g", "time", column_type="time"), pa.string()),
        (CatalogueColumn("h", "bit", 12, column_type="bit(12)"), pa.int64()),
        (CatalogueColumn("i", "bit", 1, column_type="bit(1)"), pa.bool_()),
        (CatalogueColumn("j", "varbinary", column_type="varbinary(8)"), pa.binary()),
        (CatalogueColumn("k", "float", column_type="float"), pa.float32()),
    ],
)
def test_mariadb_columns_under_the_stacks_settings(column: CatalogueColumn, expected: pa.DataType) -> None:
    settings = DebeziumTypeSettings.of_config(
        {
            "connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
            "bigint.unsigned.handling.mode": "precise",
        }
    )
    assert column_type_from_schema(connect_field("mysql", column, settings)).arrow == expected


def test_decimals_as_text_or_double_follow_the_connectors_decimal_handling_mode() -> None:
    column = CatalogueColumn("amount", "numeric", 12, 2)
    as_text = DebeziumTypeSettings.of_config({"decimal.handling.mode": "string"})
    as_double = DebeziumTypeSettings.of_config({"decimal.handling.mode": "double"})
    assert column_type_from_schema(connect_field("postgres", column, as_text)).arrow == pa.string()
    assert column_type_from_schema(connect_field("postgres", column, as_double)).arrow == pa.float64()
