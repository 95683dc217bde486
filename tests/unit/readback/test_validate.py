from __future__ import annotations

import datetime as dt
import io
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from connector.commands.cli import main
from connector.events import ROW_MARKER_COLUMN
from connector.landing_zone.layout import discover_tables
from connector.landing_zone.metadata import table_format
from connector.readback.landing_reader import list_data_files, read_data_file
from connector.readback.validate import Problem, validate_landing_zone
from connector.storage.local import LocalStorage

TABLE = "dbo.schema/orders"


def parquet_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def put_parquet(storage: LocalStorage, path: str, table: pa.Table) -> None:
    storage.create(path, parquet_bytes(table))


def put_json(storage: LocalStorage, path: str, content: Any) -> None:
    storage.create(path, json.dumps(content).encode())


def name(number: int, extension: str = "parquet") -> str:
    return f"{number:020d}.{extension}"


def rows(ids: list[int | None], markers: list[int | None] | None = None, **extra: pa.Array) -> pa.Table:
    columns: dict[str, pa.Array] = {"id": pa.array(ids, pa.int64()), "name": [f"n{i}" for i in range(len(ids))]}
    columns.update(extra)
    if markers is not None:
        columns[ROW_MARKER_COLUMN] = pa.array(markers, pa.int32())
    return pa.table(columns)


@pytest.fixture
def storage(tmp_path: Path) -> LocalStorage:
    return LocalStorage(tmp_path)


@pytest.fixture
def zone(storage: LocalStorage) -> LocalStorage:
    """A clean landing zone: a schema table with history in both processed folders, and a plain table."""
    put_json(storage, "_partnerEvents.json", {"partnerName": "acme", "sourceInfo": {"sourceType": "PostgreSQL"}})
    put_json(storage, f"{TABLE}/_metadata.json", {"keyColumns": ["id"]})
    put_parquet(storage, f"{TABLE}/_FilesReadyToDelete/{name(1)}", rows([1, 2]))
    put_parquet(storage, f"{TABLE}/_ProcessedFiles/{name(2)}", rows([1, 2], [1, 2]))
    put_parquet(storage, f"{TABLE}/{name(3)}", rows([3], [0], extra=pa.array(["x"])))
    put_json(storage, "plain/_metadata.json", {"KeyColumns": ["id"]})
    put_parquet(storage, f"plain/{name(1)}", rows([1], [0]))
    return storage


def messages(problems: list[Problem]) -> list[str]:
    return [str(problem) for problem in problems]


def only(problems: list[Problem]) -> Problem:
    assert len(problems) == 1, messages(problems)
    return problems[0]


def test_clean_landing_zone_has_no_problem(zone: LocalStorage) -> None:
    assert validate_landing_zone(zone) == []


def test_empty_landing_zone_has_no_problem(storage: LocalStorage) -> None:
    assert validate_landing_zone(storage) == []


def test_problem_prints_as_path_and_message() -> None:
    assert str(Problem("t/x.parquet", "is bad")) == "t/x.parquet: is bad"


def test_discovery_finds_schema_and_plain_tables_and_skips_underscore_folders(zone: LocalStorage) -> None:
    put_json(zone, "_state/_metadata.json", {"keyColumns": ["id"]})
    put_json(zone, "dbo.schema/_internal/_metadata.json", {"keyColumns": ["id"]})
    assert [table.id for table in discover_tables(zone)] == ["dbo.orders", "plain"]


def test_history_includes_processed_folders_in_number_order(zone: LocalStorage) -> None:
    (table,) = [t for t in discover_tables(zone) if t.id == "dbo.orders"]
    files = list_data_files(zone, table)
    assert [(f.number, f.location) for f in files] == [(1, "_FilesReadyToDelete"), (2, "_ProcessedFiles"), (3, "")]


# -- _metadata.json -----------------------------------------------------------------------------------


def test_missing_metadata(zone: LocalStorage) -> None:
    zone.delete(f"{TABLE}/_metadata.json")
    problem = only(validate_landing_zone(zone))
    assert problem.path == TABLE
    assert "_metadata.json is missing" in problem.message


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"{not json", "is not valid JSON"),
        (b"[1, 2]", "is not a JSON object"),
        (b'{"keyColumns": []}', "keyColumns must be a non-empty list"),
        (b'{"keyColumns": "id"}', "keyColumns must be a non-empty list"),
        (b'{"keyColumns": ["id", 3]}', "keyColumns must be a non-empty list"),
        (b'{"KeyColumns": [""]}', "KeyColumns must be a non-empty list"),
        (b'{"keyColumns": ["id", "id"]}', "lists a column more than once"),
        (b'{"keyColumns": ["id"], "KeyColumns": ["name"]}', "both present and differ"),
    ],
)
def test_invalid_metadata(storage: LocalStorage, content: bytes, expected: str) -> None:
    storage.create("t/_metadata.json", content)
    put_parquet(storage, f"t/{name(1)}", rows([1], [0]))
    problem = only(validate_landing_zone(storage))
    assert problem.path == "t/_metadata.json"
    assert expected in problem.message


def test_a_table_without_key_columns_is_valid_with_inserts_only(storage: LocalStorage) -> None:
    """The seed allows a table without keyColumns: marker-free files, duplicates and inserts (0) are fine."""
    put_json(storage, "_partnerEvents.json", {"partnerName": "acme", "sourceInfo": {"sourceType": "PostgreSQL"}})
    put_json(storage, "logs/_metadata.json", {})
    put_parquet(storage, f"logs/{name(1)}", rows([1, 1, 2]))
    put_parquet(storage, f"logs/{name(2)}", rows([3, 3], [0, 0]))
    assert validate_landing_zone(storage) == []


def test_a_table_without_key_columns_refuses_updates_deletes_and_upserts(storage: LocalStorage) -> None:
    put_json(storage, "_partnerEvents.json", {"partnerName": "acme", "sourceInfo": {"sourceType": "PostgreSQL"}})
    put_json(storage, "logs/_metadata.json", {})
    put_parquet(storage, f"logs/{name(1)}", rows([1, 2, 3, 4], [0, 1, 2, 4]))
    problem = only(validate_landing_zone(storage))
    assert problem.path == f"logs/{name(1)}"
    assert "3 rows are not inserts (0), but the table declares no keyColumns" in problem.message


def test_key_columns_spelled_like_the_delimited_text_example_are_accepted(storage: LocalStorage) -> None:
    put_json(storage, "t/_metadata.json", {"KeyColumns": ["id"]})
    put_parquet(storage, f"t/{name(1)}", rows([None], [0]))
    assert "key column 'id' is null in 1 rows" in only(validate_landing_zone(storage)).message


# -- delimited text -----------------------------------------------------------------------------------


def csv_metadata(**overrides: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "keyColumns": ["id"],
        "SchemaDefinition": {
            "Columns": [
                {"Name": "id", "DataType": "Int64"},
                {"Name": "amount", "DataType": "String"},
                {"Name": "at", "DataType": "DateTime"},
                {"Name": ROW_MARKER_COLUMN, "DataType": "Int32"},
            ]
        },
        "FileFormat": "DelimitedText",
        "FileExtension": "tsv",
        "FileFormatTypeProperties": {
            "FirstRowAsHeader": True,
            "RowSeparator": "\n",
            "ColumnSeparator": "\t",
            "QuoteCharacter": '"',
            "EscapeCharacter": '"',
            "NullValue": "N/A",
            "Encoding": "UTF-8",
        },
    }
    metadata.update(overrides)
    return {key: value for key, value in metadata.items() if value is not None}


TSV = 'id\tamount\tat\t__rowMarker__\n1\t"12.50"\t2024-01-02 03:04:05.123456Z\t0\n2\tN/A\tN/A\t2\n'


def test_clean_delimited_table(storage: LocalStorage) -> None:
    put_json(storage, "t/_metadata.json", csv_metadata())
    storage.create(f"t/{name(1, 'tsv')}", TSV.encode())
    assert validate_landing_zone(storage) == []


def test_delimited_text_is_typed_from_the_schema_definition(storage: LocalStorage) -> None:
    put_json(storage, "t/_metadata.json", csv_metadata())
    storage.create(f"t/{name(1, 'tsv')}", TSV.encode())
    table = read_data_file(storage, f"t/{name(1, 'tsv')}", table_format(csv_metadata()))
    assert table.schema == pa.schema(
        [
            ("id", pa.int64()),
            ("amount", pa.string()),
            ("at", pa.timestamp("us", "UTC")),
            (ROW_MARKER_COLUMN, pa.int32()),
        ]
    )
    assert table.column("amount").to_pylist() == ["12.50", None]
    assert table.column("at").null_count == 1


def test_csv_written_by_pyarrow_reads_back_exactly(storage: LocalStorage) -> None:
    source = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int32()),
            "text": pa.array(["", None, "a,b"], pa.string()),
            "day": pa.array([19000, None, 1], pa.date32()),
            "ok": pa.array([True, False, None]),
            "ratio": pa.array([0.5, None, 1.25], pa.float64()),
            ROW_MARKER_COLUMN: pa.array([0, 1, 4], pa.int32()),
        }
    )
    sink = io.BytesIO()
    pacsv.write_csv(source, sink, pacsv.WriteOptions(quoting_style="needed"))
    metadata = csv_metadata(
        SchemaDefinition={
            "Columns": [
                {"Name": "id", "DataType": "Int32"},
                {"Name": "text", "DataType": "String"},
                {"Name": "day", "DataType": "IDate"},
                {"Name": "ok", "DataType": "Boolean"},
                {"Name": "ratio", "DataType": "Double"},
                {"Name": ROW_MARKER_COLUMN, "DataType": "Int32"},
            ]
        },
        FileExtension="csv",
        FileFormatTypeProperties={"ColumnSeparator": ",", "NullValue": "", "EscapeCharacter": '"'},
    )
    put_json(storage, "t/_metadata.json", metadata)
    storage.create(f"t/{name(1, 'csv')}", sink.getvalue())
    assert read_data_file(storage, f"t/{name(1, 'csv')}", table_format(metadata)).equals(source)
    assert validate_landing_zone(storage) == []


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"FileExtension": None}, "FileExtension is required"),
        ({"SchemaDefinition": None}, "SchemaDefinition is required"),
        ({"SchemaDefinition": {"Columns": []}}, "SchemaDefinition.Columns must be a non-empty list"),
        ({"FileFormat": "Excel"}, "FileFormat must be"),
        ({"FileFormatTypeProperties": {"FirstRowAsHeader": False}}, "FirstRowAsHeader must be true"),
        ({"FileFormatTypeProperties": {"ColumnSeparator": ":"}}, "ColumnSeparator ':' is not one of"),
    ],
)
def test_invalid_delimited_metadata(storage: LocalStorage, overrides: dict[str, Any], expected: str) -> None:
    put_json(storage, "t/_metadata.json", csv_metadata(**overrides))
    problems = validate_landing_zone(storage)
    assert any(p.path == "t/_metadata.json" and expected in p.message for p in problems), messages(problems)


def test_unsupported_delimited_data_type(storage: LocalStorage) -> None:
    metadata = csv_metadata(SchemaDefinition={"Columns": [{"Name": "id", "DataType": "Decimal"}]})
    put_json(storage, "t/_metadata.json", metadata)
    assert "has DataType 'Decimal', not one of" in only(validate_landing_zone(storage)).message


def test_delimited_value_that_does_not_match_its_type(storage: LocalStorage) -> None:
    put_json(storage, "t/_metadata.json", csv_metadata())
    storage.create(f"t/{name(1, 'tsv')}", b"id\tamount\tat\t__rowMarker__\nabc\t1\tN/A\t0\n")
    problem = only(validate_landing_zone(storage))
    assert problem.path == f"t/{name(1, 'tsv')}"
    assert "column 'id' is declared Int64" in problem.message


def test_delimited_column_missing_from_schema_definition(storage: LocalStorage) -> None:
    put_json(storage, "t/_metadata.json", csv_metadata())
    storage.create(f"t/{name(1, 'tsv')}", b"id\textra\t__rowMarker__\n1\tx\t0\n")
    assert "column 'extra' is not declared" in only(validate_landing_zone(storage)).message


# -- names and numbers --------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["1.parquet", f"{1:019d}.parquet", f"{1:021d}.parquet", f"{1:020d}", "notes.txt"])
def test_name_that_is_not_a_data_file_name(zone: LocalStorage, bad: str) -> None:
    zone.create(f"{TABLE}/{bad}", b"x")
    problem = only(validate_landing_zone(zone))
    assert problem.path == f"{TABLE}/{bad}"
    assert "exactly 20 digits and .parquet" in problem.message


def test_unexpected_folder_in_a_table_folder(zone: LocalStorage) -> None:
    zone.create(f"{TABLE}/archive/x", b"x")
    assert only(validate_landing_zone(zone)).path == f"{TABLE}/archive"


def test_wrong_extension_for_the_table_format(zone: LocalStorage) -> None:
    zone.create(f"{TABLE}/{name(4, 'csv')}", b"id\n1\n")
    problem = only(validate_landing_zone(zone))
    assert problem.path == f"{TABLE}/{name(4, 'csv')}"
    assert "has extension .csv, but the table's files are .parquet" in problem.message


def test_gap_in_numbers(zone: LocalStorage) -> None:
    put_parquet(zone, f"{TABLE}/{name(6)}", rows([4], [0]))
    put_parquet(zone, f"{TABLE}/{name(8)}", rows([5], [0]))
    assert messages(validate_landing_zone(zone)) == [
        f"{TABLE}: numbers 4 to 5 are missing: file numbers must be continuous, and open mirroring waits for the "
        "next one",
        f"{TABLE}: number 7 is missing: file numbers must be continuous, and open mirroring waits for the next one",
    ]


def test_gap_between_processed_files_and_table_folder(zone: LocalStorage) -> None:
    zone.delete(f"{TABLE}/_ProcessedFiles/{name(2)}")
    assert "number 2 is missing" in only(validate_landing_zone(zone)).message


def test_numbers_must_start_at_one_without_processed_folders(storage: LocalStorage) -> None:
    put_json(storage, "t/_metadata.json", {"keyColumns": ["id"]})
    put_parquet(storage, f"t/{name(2)}", rows([1], [0]))
    put_parquet(storage, f"t/{name(3)}", rows([1], [1]))
    problem = only(validate_landing_zone(storage))
    assert problem.path == "t"
    assert "lowest file number is 2, expected 1" in problem.message


def test_numbers_may_start_later_once_the_service_has_cleaned_up(storage: LocalStorage) -> None:
    put_json(storage, "t/_metadata.json", {"keyColumns": ["id"]})
    (storage.root / "t" / "_ProcessedFiles").mkdir(parents=True)
    put_parquet(storage, f"t/{name(7)}", rows([1], [1]))
    assert validate_landing_zone(storage) == []


def test_number_zero_is_invalid(storage: LocalStorage) -> None:
    put_json(storage, "t/_metadata.json", {"keyColumns": ["id"]})
    put_parquet(storage, f"t/{name(0)}", rows([1], [0]))
    put_parquet(storage, f"t/{name(1)}", rows([1], [0]))
    assert "file number 0 is not valid" in only(validate_landing_zone(storage)).message


def test_same_number_in_two_places_with_different_content(zone: LocalStorage) -> None:
    put_parquet(zone, f"{TABLE}/_ProcessedFiles/{name(3)}", rows([3, 4], [0, 0]))
    problem = only(validate_landing_zone(zone))
    assert "number 3 is used by files of different content" in problem.message


def test_same_number_in_two_places_mid_move_is_fine(zone: LocalStorage) -> None:
    zone.create(f"{TABLE}/_ProcessedFiles/{name(3)}", zone.read_bytes(f"{TABLE}/{name(3)}"))
    assert validate_landing_zone(zone) == []


@pytest.mark.parametrize(
    "leftover",
    [f"{TABLE}/_staged_7_{1:020d}.parquet", f"{TABLE}/_tmp_abc.part", "_tmp_x.part", "dbo.schema/_tmp_y.part"],
)
def test_leftover_staged_and_temporary_files(zone: LocalStorage, leftover: str) -> None:
    zone.create(leftover, b"x")
    problem = only(validate_landing_zone(zone))
    assert problem.path == leftover
    assert "leftover" in problem.message


def test_partner_events_in_a_table_folder(zone: LocalStorage) -> None:
    put_json(zone, f"{TABLE}/_partnerEvents.json", {"partnerName": "acme", "sourceInfo": {"sourceType": "x"}})
    assert "belongs at the landing-zone root" in only(validate_landing_zone(zone)).message


# -- file contents ------------------------------------------------------------------------------------


def test_unreadable_file(zone: LocalStorage) -> None:
    zone.create(f"{TABLE}/{name(4)}", b"not parquet")
    problem = only(validate_landing_zone(zone))
    assert problem.path == f"{TABLE}/{name(4)}"
    assert "is unreadable" in problem.message


def test_row_marker_must_be_last(zone: LocalStorage) -> None:
    table = pa.table({ROW_MARKER_COLUMN: pa.array([0], pa.int32()), "id": pa.array([4], pa.int64())})
    put_parquet(zone, f"{TABLE}/{name(4)}", table)
    assert "__rowMarker__ is column 1 of 2: it must be the last column" in only(validate_landing_zone(zone)).message


def test_row_marker_must_be_an_integer(zone: LocalStorage) -> None:
    put_parquet(zone, f"{TABLE}/{name(4)}", pa.table({"id": [4], ROW_MARKER_COLUMN: ["0"]}))
    assert "__rowMarker__ has type string: it must be an integer" in only(validate_landing_zone(zone)).message


def test_row_marker_values_outside_the_table(zone: LocalStorage) -> None:
    put_parquet(zone, f"{TABLE}/{name(4)}", rows([4, 5, 6, 7], [3, 0, 5, 3]))
    assert "has 3 rows with values outside 0/1/2/4: [3, 5]" in only(validate_landing_zone(zone)).message


def test_row_marker_never_null(zone: LocalStorage) -> None:
    put_parquet(zone, f"{TABLE}/{name(4)}", rows([4, 5], [None, 0]))
    assert "__rowMarker__ is null in 1 rows" in only(validate_landing_zone(zone)).message


def test_file_without_marker_after_one_with_it(zone: LocalStorage) -> None:
    put_parquet(zone, f"{TABLE}/{name(4)}", rows([4]))
    put_parquet(zone, f"{TABLE}/{name(5)}", rows([5], [0]))
    problem = only(validate_landing_zone(zone))
    assert problem.path == f"{TABLE}/{name(4)}"
    assert f"has no __rowMarker__ column but {name(2)} had one" in problem.message


def test_key_column_missing(zone: LocalStorage) -> None:
    put_parquet(zone, f"{TABLE}/{name(4)}", pa.table({"name": ["x"], ROW_MARKER_COLUMN: pa.array([2], pa.int32())}))
    problem = only(validate_landing_zone(zone))
    assert "key column 'id' is missing" in problem.message


def test_key_column_null_in_a_delete_row(zone: LocalStorage) -> None:
    put_parquet(zone, f"{TABLE}/{name(4)}", rows([4, None], [0, 2]))
    assert "key column 'id' is null in 1 rows" in only(validate_landing_zone(zone)).message


def test_column_type_change_names_column_types_and_file(zone: LocalStorage) -> None:
    table = pa.table({"id": pa.array([4], pa.int64()), "name": [1], ROW_MARKER_COLUMN: pa.array([0], pa.int32())})
    put_parquet(zone, f"{TABLE}/{name(4)}", table)
    put_parquet(zone, f"{TABLE}/{name(5)}", table)  # the same new type again: reported once
    problem = only(validate_landing_zone(zone))
    assert problem.path == f"{TABLE}/{name(4)}"
    assert problem.message.startswith(f"column 'name' changed type from string (in {name(1)}) to int64")


def test_new_column_in_a_later_file_is_fine(zone: LocalStorage) -> None:
    put_parquet(zone, f"{TABLE}/{name(4)}", rows([4], [1], added=pa.array([1.5])))
    assert validate_landing_zone(zone) == []


def test_problems_of_one_table_do_not_hide_another(zone: LocalStorage) -> None:
    zone.delete(f"{TABLE}/_metadata.json")
    put_parquet(zone, f"plain/{name(2)}", rows([None], [2]))
    assert [p.path for p in validate_landing_zone(zone)] == [TABLE, f"plain/{name(2)}"]


# -- _partnerEvents.json ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"nope", ["is not valid JSON"]),
        (b"[]", ["is not a JSON object"]),
        (b"{}", ["partnerName must be a string", "sourceInfo must be a JSON object"]),
        (b'{"partnerName": "a", "sourceInfo": {}}', ["sourceInfo.sourceType must be a string"]),
        (b'{"partnerName": 1, "sourceInfo": {"sourceType": "x"}}', ["partnerName must be a string"]),
    ],
)
def test_invalid_partner_events(zone: LocalStorage, content: bytes, expected: list[str]) -> None:
    zone.delete("_partnerEvents.json")
    zone.create("_partnerEvents.json", content)
    problems = validate_landing_zone(zone)
    assert [p.path for p in problems] == ["_partnerEvents.json"] * len(expected)
    assert all(text in p.message for p, text in zip(problems, expected, strict=True)), messages(problems)


def test_partner_events_are_optional(zone: LocalStorage) -> None:
    zone.delete("_partnerEvents.json")
    assert validate_landing_zone(zone) == []


def test_types_delta_and_fabric_cannot_hold_are_reported_once_naming_file_and_column(storage: LocalStorage) -> None:
    put_json(storage, "t/_metadata.json", {"keyColumns": ["id"]})
    unsafe = {
        "at": pa.array([dt.time(1, 2, 3)], pa.time64("us")),
        "big": pa.array([Decimal("1.5")], pa.decimal256(65, 30)),
        "nanos": pa.array([1], pa.timestamp("ns")),
        "count": pa.array([1], pa.uint32()),
        "nested": pa.array([{"a": 1}], pa.struct([("a", pa.int64())])),
        "tags": pa.array([["x"]], pa.list_(pa.string())),
        "doc": pa.array(['{"a": 1}'], pa.string()),  # JSON text: what the format asks for complex values
        "at_ok": pa.array([1], pa.timestamp("us", "UTC")),
        "money": pa.array([Decimal("1.5")], pa.decimal128(38, 2)),
    }
    put_parquet(storage, f"t/{name(1)}", rows([1], [0], **unsafe))
    put_parquet(storage, f"t/{name(2)}", rows([2], [0], **unsafe))
    problems = validate_landing_zone(storage)
    reported = {problem.message.split(" has type")[0]: problem for problem in problems}
    assert sorted(reported) == [
        "column 'at'",
        "column 'big'",
        "column 'count'",
        "column 'nanos'",
        "column 'nested'",
        "column 'tags'",
    ]
    assert len(problems) == 6  # once per column, not once per file
    assert all(problem.path == f"t/{name(1)}" for problem in problems)
    assert "has type time64[us], which Delta/Fabric cannot hold" in reported["column 'at'"].message
    assert "decimal256(65, 30)" in reported["column 'big'"].message
    assert "at most 38 digits" in reported["column 'big'"].message


def test_validate_of_a_missing_landing_zone_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no-such-zone"
    assert main(["validate", str(missing)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.strip() == f"error: landing zone {missing} does not exist"


def test_hidden_folders_are_not_tables(storage: LocalStorage) -> None:
    put_json(storage, "t/_metadata.json", {"keyColumns": ["id"]})
    put_parquet(storage, f"t/{name(1)}", rows([1]))
    storage.create(".state/state.json", b"{}")
    assert [table.id for table in discover_tables(storage)] == ["t"]
    assert validate_landing_zone(storage) == []
