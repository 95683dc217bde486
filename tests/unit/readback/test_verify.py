"""``verify``'s comparison works on what Delta gives back, and a table Delta refuses fails verify."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from decimal import Decimal
from pathlib import Path

import pyarrow as pa

from connector.collect.encoding import FileFormat
from connector.events import ROW_MARKER_COLUMN
from connector.landing_zone.layout import TableRef
from connector.readback.database_postgres import compare_rows
from connector.readback.delta_oracle import apply_to_delta
from connector.readback.table_report import TableReport
from connector.readback.verify import NO_FABRIC_TABLE, NO_MIRROR_TABLE, _compare, _compare_mirrored
from connector.storage.local import LocalStorage


def test_source_rows_match_the_delta_table_read_back(tmp_path: Path) -> None:
    zone = LocalStorage(tmp_path / "zone")
    zone.create("public.schema/t/_metadata.json", json.dumps({"keyColumns": ["id"]}).encode())
    ident = uuid.UUID("12345678-1234-5678-1234-567812345678")
    instant = dt.datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=dt.UTC)
    data = pa.table(
        {
            "id": pa.array([1, 2], pa.int32()),
            "amount": pa.array([Decimal("1.50"), Decimal("-3")], pa.decimal128(20, 2)),
            "at": pa.array([instant, None], pa.timestamp("us", "UTC")),
            "doc": ['{"b": [1, 2], "a": null}', None],
            "ident": [str(ident), None],
            "ratio": pa.array([0.1, None], pa.float32()),
            ROW_MARKER_COLUMN: pa.array([0, 0], pa.int32()),
        }
    )
    zone.create(f"public.schema/t/{1:020d}.parquet", FileFormat().encode(data))
    mirror = apply_to_delta(str(zone.root), tmp_path / "delta")["public.t"]
    plus_two = dt.timezone(dt.timedelta(hours=2))
    source = [
        {
            "id": 1,
            "amount": Decimal("1.5"),  # Postgres numeric without trailing zeros
            "at": instant.astimezone(plus_two),  # psycopg gives the session's zone
            "doc": {"a": None, "b": [1, 2]},  # jsonb, parsed
            "ident": ident,
            "ratio": 0.1,
        },
        {"id": 2, "amount": Decimal("-3.00"), "at": None, "doc": None, "ident": None, "ratio": None},
    ]
    report = compare_rows("public.t", ["id"], source, mirror)
    assert report.examples == []
    assert (report.matching, report.missing, report.extra, report.differing) == (2, 0, 0, 0)
    assert report.ok


def test_json_text_compares_as_documents_in_every_arrow_string_type() -> None:
    for string_type in (pa.string(), pa.large_string(), pa.string_view()):
        mirror = pa.table({"id": [1], "doc": pa.array(['{"b":1,"a":2}'], string_type)})
        report = compare_rows("t", ["id"], [{"id": 1, "doc": {"a": 2, "b": 1}}], mirror)
        assert report.ok, (string_type, report.examples)


def test_a_refused_table_fails_verify_and_says_why() -> None:
    report = TableReport("public.t", refused="table public.t: x.parquet: column 'at' has type time64[us]")
    assert not report.ok
    assert report.line() == (
        "public.t: refused by Delta (Fabric would stop this table): "
        "table public.t: x.parquet: column 'at' has type time64[us]"
    )


def test_decimals_and_times_mirrored_as_text_compare_by_value() -> None:
    """Unconstrained numerics and times of day land as text (README type table); verify reads the text's value."""
    mirror = pa.table(
        {
            "id": [1, 2],
            "free": ["0.14285714285714285714", "1.500"],
            "at": ["23:59:59.999999", "-00:00:01.000000"],
        }
    )
    source = [
        {"id": 1, "free": Decimal("0.14285714285714285714"), "at": dt.time(23, 59, 59, 999999)},
        {"id": 2, "free": Decimal("1.5"), "at": dt.timedelta(seconds=-1)},
    ]
    assert compare_rows("t", ["id"], source, mirror).ok
    wrong = [{"id": 1, "free": Decimal("0.1428571428571428571"), "at": dt.time(23, 59, 59)}]
    assert compare_rows("t", ["id"], wrong, mirror.slice(0, 1)).differing == 1


def test_numeric_nan_in_source_and_mirror_matches() -> None:
    # An unconstrained numeric is mirrored as text (Arrow decimals cannot hold NaN).
    mirror = pa.table({"id": [1], "n": ["NaN"]})
    report = compare_rows("t", ["id"], [{"id": 1, "n": Decimal("NaN")}], mirror)
    assert report.ok, report.examples


class _EmptySource:
    """A source whose table is empty and has columns: what an empty table looks like from the source."""

    def check(self, table: object) -> None:
        pass

    def compare(self, table: TableRef, key_columns: list[str], mirror: pa.Table) -> TableReport:
        report = TableReport(table.id, mirror_rows=mirror.num_rows)
        report.judge_columns(["id", "name"], mirror)
        return report


def test_a_folder_without_a_data_file_is_no_table_and_never_exact(tmp_path: Path) -> None:
    zone = LocalStorage(tmp_path / "zone")
    zone.create("public.schema/t/_metadata.json", json.dumps({"keyColumns": ["id"]}).encode())
    ref = TableRef("public", "t")
    report = _compare(_EmptySource(), zone, ref, tmp_path / "delta")  # type: ignore[arg-type]
    assert not report.ok
    assert report.absent == NO_MIRROR_TABLE


def test_an_empty_table_with_its_zero_row_file_is_exact(tmp_path: Path) -> None:
    zone = LocalStorage(tmp_path / "zone")
    zone.create("public.schema/t/_metadata.json", json.dumps({"keyColumns": ["id"]}).encode())
    empty = pa.schema([pa.field("id", pa.int32()), pa.field("name", pa.string())]).empty_table()
    zone.create(f"public.schema/t/{1:020d}.parquet", FileFormat().encode(empty))
    report = _compare(_EmptySource(), zone, TableRef("public", "t"), tmp_path / "delta")  # type: ignore[arg-type]
    assert report.ok, report.line()


class _NoFabricTable:
    def exists(self, table: TableRef) -> bool:
        return False

    def read(self, table: TableRef, key_columns: object) -> None:
        return None


def test_a_table_fabric_does_not_hold_is_a_difference(tmp_path: Path) -> None:
    zone = LocalStorage(tmp_path / "zone")
    zone.create("public.schema/t/_metadata.json", json.dumps({"keyColumns": []}).encode())
    ref = TableRef("public", "t")
    report = _compare_mirrored(_EmptySource(), zone, ref, _NoFabricTable(), 1.0)  # type: ignore[arg-type]
    assert not report.ok
    assert report.absent == NO_FABRIC_TABLE
