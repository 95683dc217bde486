"""Connect decimals decoded in bulk agree with the value-by-value conversion, or step aside."""

from __future__ import annotations

import base64
import random

import pyarrow as pa
import pytest

from connector.debezium.arrow_values import ConversionError, to_arrow
from connector.debezium.connect_decimal import decimals_from_base64
from connector.debezium.types import ColumnType, decimal_type


def encoded(unscaled: int, size: int | None = None) -> str:
    size = size if size is not None else max(1, (unscaled.bit_length() + 8) // 8)
    return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()


@pytest.mark.parametrize(("precision", "scale"), [(10, 2), (18, 0), (19, 4), (38, 10), (5, 5)])
def test_bulk_equals_value_by_value(precision: int, scale: int) -> None:
    rng = random.Random(precision * 100 + scale)
    bound = min(10**precision, 2**63) - 1
    unscaled = [0, 1, -1, 127, 128, -128, -129, 255, 256, bound, -bound]
    unscaled += [rng.randint(-bound, bound) for _ in range(500)]
    unscaled += [rng.randint(-(2 ** rng.randint(1, 62)), 2 ** rng.randint(1, 62)) % bound for _ in range(500)]
    values: list[str | None] = [encoded(v) for v in unscaled]
    values += [None, encoded(5, 8), encoded(-5, 8), "", None]  # zero-padded, sign-extended, empty bytes
    ctype = ColumnType(decimal_type(precision, scale), "decimal", scale)
    bulk = decimals_from_base64(pa.array(values, pa.string()), ctype.arrow, scale)
    assert bulk is not None
    assert bulk.equals(to_arrow(values, ctype))


def test_a_slice_of_a_larger_array() -> None:
    ctype = ColumnType(decimal_type(12, 2), "decimal", 2)
    values = [encoded(v) for v in range(-50, 50)]
    sliced = pa.array(values, pa.string()).slice(17, 40)
    bulk = decimals_from_base64(sliced, ctype.arrow, 2)
    assert bulk is not None
    assert bulk.equals(to_arrow(values[17:57], ctype))


@pytest.mark.parametrize(
    "bad",
    [
        "AB=C",  # padding before the end
        "A===",  # three padding characters
        "AAAAA",  # not a multiple of four
        "AA A",  # outside the alphabet
        "AA-_",  # URL-safe alphabet: refused by strict base64
        encoded(2**70),  # more than 8 bytes
        encoded(10**12),  # beyond precision 10
    ],
)
def test_anything_the_value_by_value_path_must_judge_is_left_to_it(bad: str) -> None:
    ctype = ColumnType(decimal_type(10, 2), "decimal", 2)
    values = [encoded(1), bad, encoded(2)]
    assert decimals_from_base64(pa.array(values, pa.string()), ctype.arrow, 2) is None
    with pytest.raises(ConversionError) as caught:
        to_arrow(values, ctype)
    assert caught.value.row == 1


def test_wide_decimals_and_other_scales_are_left_to_the_value_by_value_path() -> None:
    values = pa.array([encoded(1)], pa.string())
    assert decimals_from_base64(values, pa.decimal256(50, 2), 2) is None
    assert decimals_from_base64(values, decimal_type(10, 2), 3) is None
