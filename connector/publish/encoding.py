"""File formats: an Arrow table → the bytes of one landing-zone data file.

The format is separate from the destination (quix-streams' convention): encoders return bytes and know
nothing of storage. Encoding is deterministic, so a replayed batch produces byte-identical files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

_DELIMITERS = {"csv": ",", "tsv": "\t", "psv": "|"}


@dataclass(frozen=True)
class FileFormat:
    """An output format: Parquet (default) or delimited text."""

    name: str = "parquet"
    compression: str = "snappy"

    @property
    def extension(self) -> str:
        """File extension without the dot."""
        return "parquet" if self.name == "parquet" else self.name

    @property
    def is_delimited(self) -> bool:
        """Whether this is a delimited-text format (needs a schema in ``_metadata.json``)."""
        return self.name in _DELIMITERS

    def encode(self, table: pa.Table) -> bytes:
        """Serialise ``table`` as one complete file."""
        sink = pa.BufferOutputStream()  # Arrow-owned: see tools.landing_reader.arrow_owned
        if self.name == "parquet":
            pq.write_table(
                table,
                sink,
                compression=None if self.compression == "none" else self.compression,
                # The type mapping already writes microsecond timestamps only (what Delta stores): nothing to coerce.
                coerce_timestamps=None,
                write_statistics=True,
            )
            return bytes(sink.getvalue())
        options = pacsv.WriteOptions(
            include_header=True,
            delimiter=_DELIMITERS[self.name],
            quoting_style="needed",
        )
        pacsv.write_csv(_csv_ready(table), sink, write_options=options)
        return bytes(sink.getvalue())

    def metadata_properties(self, table: pa.Table) -> dict[str, Any]:
        """``_metadata.json`` keys a delimited-text table needs (empty for Parquet)."""
        if not self.is_delimited:
            return {}
        return {
            "SchemaDefinition": {
                "Columns": [
                    {"Name": f.name, "DataType": delimited_type_name(f.type), "IsNullable": f.nullable}
                    for f in table.schema
                ]
            },
            "FileFormat": "DelimitedText",
            "FileExtension": self.extension,
            "FileFormatTypeProperties": {
                "FirstRowAsHeader": True,
                "RowSeparator": "\n",
                "ColumnSeparator": _DELIMITERS[self.name],
                "QuoteCharacter": '"',
                "EscapeCharacter": '"',
                "NullValue": "",
                "Encoding": "UTF-8",
            },
        }


def delimited_type_name(arrow: pa.DataType) -> str:
    """The landing zone's delimited-text type names (the seed's table of supported data types)."""
    if pa.types.is_int8(arrow) or pa.types.is_int16(arrow):
        return "Int16"
    if pa.types.is_int32(arrow):
        return "Int32"
    if pa.types.is_int64(arrow):
        return "Int64"
    if pa.types.is_float32(arrow):
        return "Single"
    if pa.types.is_floating(arrow):
        return "Double"
    if pa.types.is_boolean(arrow):
        return "Boolean"
    if pa.types.is_date(arrow):
        return "IDate"
    if pa.types.is_timestamp(arrow):
        return "DateTime"
    if pa.types.is_time(arrow):
        return "ITime"
    if pa.types.is_binary(arrow):
        return "ByteArray"
    # Decimals have no delimited-text type: they travel as exact text.
    return "String"


def _csv_ready(table: pa.Table) -> pa.Table:
    """Decimals and binaries as text: exact, and readable by every delimited-text reader."""
    columns = []
    for column in table.columns:
        if pa.types.is_decimal(column.type):
            columns.append(column.cast(pa.string()))
        elif pa.types.is_binary(column.type):
            columns.append(pa.array([None if v is None else v.hex() for v in column.to_pylist()], pa.string()))
        else:
            columns.append(column)
    return pa.Table.from_arrays(columns, names=table.column_names)
