"""Which rows go to files without ``__rowMarker__``: a keyed table's initial load, a keyless table's every row."""

from __future__ import annotations

import pyarrow as pa
import pytest

from connector.collect.encoding import FileFormat
from connector.collect.pieces import CollectContext, InitialLoad, PieceFacts, TablePiece
from connector.collect.staging import marker_free_rows, with_insert_marker
from connector.config import MirrorSettings
from connector.landing_zone.layout import TableRef

TABLE = pa.table({"id": [1, 1, 2], "__rowMarker__": pa.array([0, 0, 0], pa.int32())})
PARQUET = FileFormat("parquet", "snappy")


def piece(key_columns: tuple[str, ...], initial_rows: int = 0) -> TablePiece:
    facts = PieceFacts(initial=InitialLoad(rows=initial_rows))
    return TablePiece(TableRef("public", "logs"), key_columns, TABLE, ("t", 0, 0), facts)


def test_every_row_of_a_keyless_table_is_marker_free_where_a_keyed_tables_changes_carry_the_marker() -> None:
    context = CollectContext(MirrorSettings())
    assert marker_free_rows(context, PARQUET, piece(()), "public.logs") == 3
    assert marker_free_rows(context, PARQUET, piece(("id",), initial_rows=1), "public.logs") == 1
    # A rebuild's upserts are a keyed table's concern: a keyless table has no key to upsert by.
    upserting = CollectContext(MirrorSettings(), upsert_tables=frozenset({"public.logs"}))
    assert marker_free_rows(upserting, PARQUET, piece(()), "public.logs") == 3


@pytest.mark.parametrize(
    "context",
    [
        CollectContext(MirrorSettings(initial_load="upsert")),
        CollectContext(MirrorSettings(), incremental=frozenset({"public.logs"})),
    ],
)
def test_a_keyless_table_keeps_the_marker_where_its_files_already_have_it(context: CollectContext) -> None:
    assert marker_free_rows(context, PARQUET, piece(()), "public.logs") == 0
    assert marker_free_rows(CollectContext(MirrorSettings()), FileFormat("csv"), piece(()), "public.logs") == 0


def test_a_keyless_tables_marker_free_file_given_the_marker_gets_inserts() -> None:
    table = with_insert_marker(TABLE.drop_columns(["__rowMarker__"]))
    assert table.column_names[-1] == "__rowMarker__"
    assert table.column("__rowMarker__").to_pylist() == [0, 0, 0]
