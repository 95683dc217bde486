"""Which Arrow (Parquet) column types Fabric's open mirroring can hold, and why not the others.

Open mirroring writes every landing-zone table into a Delta table, so a column type must be one Delta
has: a file whose column Delta cannot hold stops the table in Fabric, long after the connector wrote it.
The rule lives here once so that the Delta oracle (which refuses such a file, as Fabric would), the
``validate`` tool (which reports it) and the type mapping (which must never produce it) agree.

The limits, from the Delta protocol and Spark's Parquet reader that Fabric uses:

* no time-of-day type (Parquet ``TIME``): Spark cannot even read the column;
* decimals up to precision 38 (``decimal256`` always has room for more, so it is refused as such);
* timestamps in microseconds at most: nanoseconds would be truncated (or refused) silently;
* signed integers only: Delta has no unsigned type, and an ``UINT64`` can exceed ``long``;
* no half-precision floats, no nested types: complex values go to the landing zone as JSON text, as
  the landing-zone format asks.
"""

from __future__ import annotations

import pyarrow as pa

_NESTED_ADVICE = "nested types are not supported by open mirroring: write complex values as JSON text"


def fabric_type_problem(arrow_type: pa.DataType) -> str | None:
    """Why a column of ``arrow_type`` cannot be held by a Delta table in Fabric, or ``None`` when it can.

    The reason is a phrase that completes "column X has type T: ..." so that callers can name the
    table, file and column around it.
    """
    if pa.types.is_dictionary(arrow_type):
        return fabric_type_problem(arrow_type.value_type)
    if pa.types.is_time(arrow_type):
        return "Delta has no time-of-day type (Parquet TIME); write a time as text or as an integer count"
    if pa.types.is_decimal(arrow_type) and (arrow_type.precision > 38 or pa.types.is_decimal256(arrow_type)):
        return "Delta decimals have at most 38 digits of precision"
    if pa.types.is_timestamp(arrow_type) and arrow_type.unit == "ns":
        return "Delta timestamps have microsecond precision; nanoseconds would be truncated"
    if pa.types.is_unsigned_integer(arrow_type):
        return "Delta has no unsigned integers; write a wider signed integer or a decimal"
    if pa.types.is_float16(arrow_type):
        return "Delta has no half-precision float; write float32"
    if pa.types.is_nested(arrow_type):
        return _NESTED_ADVICE
    if pa.types.is_duration(arrow_type) or pa.types.is_interval(arrow_type):
        return "Delta has no duration or interval type; write an integer count or text"
    return None
