"""What the writer puts in ``_metadata.json``: ``keyColumns`` for a keyed table, no ``keyColumns`` for a keyless one."""

from __future__ import annotations

from connector.landing_zone.metadata import effective_metadata, table_metadata


def test_a_keyless_table_is_declared_without_key_columns() -> None:
    """The seed: without keyColumns the table takes inserts only; an empty list would declare a key of nothing."""
    assert table_metadata((), {}) == {}
    assert table_metadata((), {"FileFormat": "DelimitedText"}) == {"FileFormat": "DelimitedText"}
    assert table_metadata(("id",), {}) == {"keyColumns": ["id"]}
    assert "keycolumns" not in effective_metadata(table_metadata((), {}))
