"""``_metadata.json`` is written once: an existing one that says anything else stops the table.

"Anything else" is any key present on either side whose meaning differs, not only the keys this batch
writes: Parquet content omits ``FileFormat``, so an existing file saying ``CSV`` must still stop the table.
Absent keys mean their documented defaults, and key names are matched without regard to case (the seed
spells ``keyColumns`` and ``KeyColumns``), so a file that merely spells a default out still agrees.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest

from connector.collect.encoding import FileFormat
from connector.errors import TableStopped
from connector.landing_zone.layout import TableRef
from connector.publish.metadata import ensure_table_metadata, table_metadata
from connector.storage.local import LocalStorage

TABLE = TableRef("public", "customers")
PATH = "public.schema/customers/_metadata.json"
CSV = FileFormat("csv")
SAMPLE = pa.table({"id": pa.array([1], pa.int32()), "__rowMarker__": pa.array([0], pa.int32())})


def parquet_content() -> dict[str, Any]:
    return table_metadata(("id",), FileFormat().metadata_properties(SAMPLE))


def csv_content() -> dict[str, Any]:
    return table_metadata(("id",), CSV.metadata_properties(SAMPLE))


def ensure_over(tmp_path: Path, existing: dict[str, Any], content: dict[str, Any]) -> bool:
    storage = LocalStorage(tmp_path)
    storage.create(PATH, orjson.dumps(existing))
    return ensure_table_metadata(storage, TABLE, content)


@pytest.mark.parametrize(
    ("existing", "named"),
    [
        ({"keyColumns": ["id"], "FileFormat": "CSV"}, "FileFormat"),
        ({"keyColumns": ["id"], "fileFormat": "DelimitedText", "FileExtension": "tsv"}, "fileFormat"),
        ({"keyColumns": ["id"], "FileExtension": "csv"}, "FileExtension"),
        ({"keyColumns": ["id"], "isUpsertDefaultRowMarker": True}, "isUpsertDefaultRowMarker"),
        ({"keyColumns": ["id"], "fileDetectionStrategy": "LastUpdateTimeFileDetection"}, "fileDetectionStrategy"),
        ({"keyColumns": ["id"], "KeyColumns": ["other"]}, "KeyColumns"),
    ],
    ids=["csv-format", "delimited-format", "extension-only", "upsert-default", "detection", "two-key-spellings"],
)
def test_an_existing_key_the_parquet_content_lacks_stops_the_table(
    tmp_path: Path, existing: dict[str, Any], named: str
) -> None:
    with pytest.raises(TableStopped) as info:
        ensure_over(tmp_path, existing, parquet_content())
    assert info.value.table == "public.customers"
    assert PATH in info.value.reason and named in info.value.reason


def test_delimited_content_over_an_existing_parquet_metadata_stops_the_table(tmp_path: Path) -> None:
    with pytest.raises(TableStopped) as info:
        ensure_over(tmp_path, {"keyColumns": ["id"]}, csv_content())
    assert PATH in info.value.reason and "FileFormat" in info.value.reason


def test_a_missing_delimited_property_means_its_default(tmp_path: Path) -> None:
    """Without RowSeparator the service reads \\r\\n, but this connector writes \\n: not the same table."""
    existing = csv_content()
    del existing["FileFormatTypeProperties"]["RowSeparator"]
    with pytest.raises(TableStopped, match="RowSeparator"):
        ensure_over(tmp_path, existing, csv_content())


@pytest.mark.parametrize(
    "existing",
    [
        {"keyColumns": ["id"]},
        {"KeyColumns": ["id"]},
        {"keyColumns": ["id"], "KeyColumns": ["id"]},
        {"keyColumns": ["id"], "FileFormat": "Parquet", "isUpsertDefaultRowMarker": False},
        {"keyColumns": ["id"], "fileformat": "parquet", "FileExtension": ".parquet"},
    ],
    ids=["same", "other-spelling", "both-spellings", "defaults-spelt-out", "extension-with-dot"],
)
def test_an_existing_metadata_that_means_the_same_is_accepted(tmp_path: Path, existing: dict[str, Any]) -> None:
    assert ensure_over(tmp_path, existing, parquet_content()) is False


def test_an_equivalent_delimited_metadata_is_accepted(tmp_path: Path) -> None:
    existing = csv_content()
    existing["FileFormat"] = "CSV"  # the seed's default delimited format is CSV: the same files
    existing["FileExtension"] = ".csv"
    del existing["FileFormatTypeProperties"]["ColumnSeparator"]  # "," is the default
    del existing["FileFormatTypeProperties"]["FirstRowAsHeader"]  # true is the only value allowed
    assert ensure_over(tmp_path, existing, csv_content()) is False


def test_the_first_write_creates_the_file(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    assert ensure_table_metadata(storage, TABLE, parquet_content()) is True
    assert orjson.loads(storage.read_bytes(PATH)) == {"keyColumns": ["id"]}
    assert ensure_table_metadata(storage, TABLE, parquet_content()) is False


def test_different_key_columns_still_name_them(tmp_path: Path) -> None:
    with pytest.raises(TableStopped, match=r"keyColumns \['other'\].*\['id'\]"):
        ensure_over(tmp_path, {"keyColumns": ["other"]}, parquet_content())


def test_a_keyless_table_over_an_existing_keyed_metadata_stops_it_and_its_own_is_accepted(tmp_path: Path) -> None:
    """keyColumns can never change: a table that lost its key (or got one) is rebuilt, whichever way round."""
    keyless = table_metadata((), {})
    with pytest.raises(TableStopped, match="keyColumns"):
        ensure_over(tmp_path / "a", {"keyColumns": ["id"]}, keyless)
    with pytest.raises(TableStopped, match="keyColumns"):
        ensure_over(tmp_path / "b", {}, table_metadata(("id",), {}))
    assert not ensure_over(tmp_path / "c", {}, keyless)
