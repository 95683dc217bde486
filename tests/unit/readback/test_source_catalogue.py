"""The catalogue's rows become tables with their columns in order and their primary key in key order."""

from __future__ import annotations

from connector.debezium.catalogue_types import CatalogueColumn
from connector.readback.source_catalogue import catalogue_tables, dialect


def test_columns_and_keys_are_grouped_by_table_in_catalogue_order() -> None:
    rows = [
        ("public", "a", "id", "integer", 32, 0, None, None, ""),
        ("public", "a", "amount", "numeric", 12, 2, None, None, ""),
        ("public", "log", "line", "text", None, None, None, None, ""),
    ]
    keys = [("public", "a", "id"), ("public", "gone", "id")]
    tables = catalogue_tables(rows, keys)
    assert [(t.id, t.key_columns) for t in tables] == [("public.a", ["id"]), ("public.log", [])]
    assert tables[0].columns[1] == CatalogueColumn("amount", "numeric", 12, 2)


def test_the_url_names_the_dialect() -> None:
    assert dialect("mariadb://u:p@h:3306/shop") == "mysql"
    assert dialect("postgresql://u@h/db") == "postgres"
