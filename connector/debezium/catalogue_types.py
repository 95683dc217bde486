"""A source column as the catalogue describes it → the Connect field schema Debezium would send for it.

An empty table has no change event, so the schema its first event would carry is built here from
``information_schema.columns`` and then typed by ``connector.debezium.types.column_type_from_schema``, the very
function the events' schemas go through: the empty table's file has the Parquet types its later files will have,
and Fabric never sees a type change when the first row arrives.

The mapping follows Debezium's documented type tables for its Postgres and MySQL/MariaDB connectors, under the
connector settings that change a type (``DebeziumTypeSettings``; Debezium's defaults when Kafka Connect is not
read). A type not listed is sent as text by Debezium (or as a struct, which the sink writes as JSON text).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from connector.debezium.types import (
    BITS,
    CONNECT_DECIMAL,
    VARIABLE_SCALE_DECIMAL,
    ZONED_TIMESTAMP,
)

ConnectField = dict[str, Any]


@dataclass(frozen=True)
class CatalogueColumn:
    """One column of ``information_schema.columns`` (``data_type`` lower case; MySQL's ``column_type`` too)."""

    name: str
    data_type: str
    numeric_precision: int | None = None
    numeric_scale: int | None = None
    datetime_precision: int | None = None
    character_maximum_length: int | None = None
    column_type: str = ""  # MySQL/MariaDB: the full type, e.g. ``int(10) unsigned``; Postgres: empty


@dataclass(frozen=True)
class DebeziumTypeSettings:
    """The Debezium connector settings that change a column's schema; Debezium's defaults unless read."""

    decimal_handling: str = "precise"
    time_precision: str = "adaptive"
    bigint_unsigned: str = "long"
    binary_handling: str = "bytes"
    interval_handling: str = "numeric"

    @classmethod
    def of_config(cls, config: Mapping[str, str]) -> DebeziumTypeSettings:
        """The settings of one Debezium connector's config (Kafka Connect's ``/connectors/NAME/config``)."""
        mysql = ".mysql." in config.get("connector.class", "") or ".mariadb." in config.get("connector.class", "")
        return cls(
            decimal_handling=config.get("decimal.handling.mode", "precise"),
            time_precision=config.get("time.precision.mode", "adaptive_time_microseconds" if mysql else "adaptive"),
            bigint_unsigned=config.get("bigint.unsigned.handling.mode", "long"),
            binary_handling=config.get("binary.handling.mode", "bytes"),
            interval_handling=config.get("interval.handling.mode", "numeric"),
        )


def _decimal(settings: DebeziumTypeSettings, precision: int | None, scale: int | None) -> ConnectField:
    if settings.decimal_handling == "double":
        return {"type": "double"}
    if settings.decimal_handling == "string":
        return {"type": "string"}
    if precision is None:
        return {"type": "struct", "name": VARIABLE_SCALE_DECIMAL}
    return {
        "type": "bytes",
        "name": CONNECT_DECIMAL,
        "parameters": {"scale": str(scale or 0), "connect.decimal.precision": str(precision)},
    }


def _binary(settings: DebeziumTypeSettings) -> ConnectField:
    return {"type": "bytes"} if settings.binary_handling == "bytes" else {"type": "string"}


def _timestamp(settings: DebeziumTypeSettings, precision: int | None) -> ConnectField:
    if settings.time_precision == "connect" or (settings.time_precision == "adaptive" and (precision or 0) <= 3):
        return {"type": "int64", "name": "io.debezium.time.Timestamp"}
    return {"type": "int64", "name": "io.debezium.time.MicroTimestamp"}


def _time(settings: DebeziumTypeSettings, precision: int | None) -> ConnectField:
    if settings.time_precision == "connect" or (settings.time_precision == "adaptive" and (precision or 0) <= 3):
        return {"type": "int32", "name": "io.debezium.time.Time"}
    return {"type": "int64", "name": "io.debezium.time.MicroTime"}


def _bits(length: int | None) -> ConnectField:
    if length == 1:
        return {"type": "boolean"}
    return {"type": "bytes", "name": BITS, "parameters": {"length": str(length)} if length else {}}


_POSTGRES_PLAIN: dict[str, ConnectField] = {
    "smallint": {"type": "int16"},
    "integer": {"type": "int32"},
    "bigint": {"type": "int64"},
    "oid": {"type": "int64"},
    "real": {"type": "float"},
    "double precision": {"type": "double"},
    "boolean": {"type": "boolean"},
    "date": {"type": "int32", "name": "io.debezium.time.Date"},
    "timestamp with time zone": {"type": "string", "name": ZONED_TIMESTAMP},
    "time with time zone": {"type": "string", "name": "io.debezium.time.ZonedTime"},
    "array": {"type": "array"},
}


def postgres_field(column: CatalogueColumn, settings: DebeziumTypeSettings) -> ConnectField:
    """The Connect schema Debezium's Postgres connector gives ``column`` (text for any type not named here)."""
    data_type = column.data_type.lower()
    if data_type in _POSTGRES_PLAIN:
        return dict(_POSTGRES_PLAIN[data_type])
    if data_type == "numeric":
        return _decimal(settings, column.numeric_precision, column.numeric_scale)
    if data_type == "money":
        # money.fraction.digits (2 by default), no declared precision.
        return _decimal(settings, None, 2) if settings.decimal_handling != "precise" else _money()
    if data_type == "bytea":
        return _binary(settings)
    if data_type == "timestamp without time zone":
        return _timestamp(settings, column.datetime_precision)
    if data_type == "time without time zone":
        return _time(settings, column.datetime_precision)
    if data_type == "interval":
        return {"type": "int64"} if settings.interval_handling == "numeric" else {"type": "string"}
    if data_type in ("bit", "bit varying"):
        return _bits(column.character_maximum_length)
    return {"type": "string"}


def _money() -> ConnectField:
    return {"type": "bytes", "name": CONNECT_DECIMAL, "parameters": {"scale": "2"}}


_MYSQL_SIGNED: dict[str, str] = {
    "tinyint": "int16",
    "smallint": "int16",
    "mediumint": "int32",
    "int": "int32",
    "integer": "int32",
    "bigint": "int64",
    "year": "int32",
}
_MYSQL_UNSIGNED: dict[str, str] = {
    "tinyint": "int16",
    "smallint": "int32",
    "mediumint": "int32",
    "int": "int64",
    "integer": "int64",
}
_MYSQL_BINARY = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"})


_MYSQL_PLAIN: dict[str, ConnectField] = {
    "float": {"type": "float"},
    "double": {"type": "double"},
    "real": {"type": "double"},
    "bool": {"type": "boolean"},
    "boolean": {"type": "boolean"},
    "date": {"type": "int32", "name": "io.debezium.time.Date"},
    "timestamp": {"type": "string", "name": ZONED_TIMESTAMP},
}


def mysql_field(column: CatalogueColumn, settings: DebeziumTypeSettings) -> ConnectField:
    """The Connect schema Debezium's MySQL/MariaDB connector gives ``column`` (text for any type not named here)."""
    data_type = column.data_type.lower()
    unsigned = "unsigned" in column.column_type.lower()
    if data_type == "bigint" and unsigned:
        return _decimal(settings, 20, 0) if settings.bigint_unsigned == "precise" else {"type": "int64"}
    if data_type in _MYSQL_SIGNED:
        return {"type": (_MYSQL_UNSIGNED if unsigned else _MYSQL_SIGNED).get(data_type, _MYSQL_SIGNED[data_type])}
    if data_type in _MYSQL_PLAIN:
        return dict(_MYSQL_PLAIN[data_type])
    if data_type in ("decimal", "numeric"):
        return _decimal(settings, column.numeric_precision, column.numeric_scale)
    if data_type == "bit":
        return _bits(column.numeric_precision)
    if data_type in _MYSQL_BINARY:
        return _binary(settings)
    if data_type == "datetime":
        return _timestamp(settings, column.datetime_precision)
    if data_type == "time":
        # adaptive_time_microseconds (MySQL's default) and adaptive: MicroTime; connect: Time.
        if settings.time_precision == "connect":
            return {"type": "int32", "name": "io.debezium.time.Time"}
        return {"type": "int64", "name": "io.debezium.time.MicroTime"}
    return {"type": "string"}


def connect_field(dialect: str, column: CatalogueColumn, settings: DebeziumTypeSettings) -> ConnectField:
    """``column``'s Connect field schema for ``dialect`` (``postgres`` or ``mysql``), nullable as every event's is."""
    field = mysql_field(column, settings) if dialect == "mysql" else postgres_field(column, settings)
    field["field"] = column.name
    field["optional"] = True
    return field
