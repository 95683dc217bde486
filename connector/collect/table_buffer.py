"""One table's rows of one batch, in Kafka order, and their Arrow form.

Rows are kept as the raw JSON values Debezium sent; the Arrow table is built column by column at the
end (one conversion per column, not per value), with the table's established column types so that files
of one table never disagree on a type.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from connector.collect.toast_store import Row
from connector.debezium.arrow_values import ConversionError, to_arrow
from connector.debezium.schemaless import inferred_type, kind_of_value
from connector.debezium.types import ColumnType, Wire, declared_decimal, type_name
from connector.errors import SchemaChanged, TableStopped, rebuild_hint
from connector.events import ROW_MARKER_COLUMN, KafkaRecord

MARKER_TYPE = pa.int32()


def column_order(established: pa.Schema | None, *seen: Iterable[str]) -> list[str]:
    """A piece's column order, in both collecting paths: the established columns, then new ones as first seen."""
    names: list[str] = list(established.names) if established is not None else []
    known = set(names)
    for name in itertools.chain.from_iterable(seen):
        if name not in known:
            names.append(name)
            known.add(name)
    return names


def marked_table(fields: list[pa.Field], arrays: list[pa.Array], markers: Sequence[int] | np.ndarray) -> pa.Table:
    """A piece's table: the data columns (all nullable), then ``__rowMarker__`` (int32, never null) last."""
    return pa.Table.from_arrays(
        [*arrays, pa.array(markers, type=MARKER_TYPE)],
        schema=pa.schema([*fields, pa.field(ROW_MARKER_COLUMN, MARKER_TYPE, nullable=False)]),
    )


@dataclass(frozen=True)
class DeclaredDecimal:
    """A column declared in ``mirror.decimal_columns``: decimal(precision, scale), and the setting's name."""

    precision: int
    scale: int
    setting: str


@dataclass
class TableBatch:
    """Rows of one table collected from a batch, with the record each came from."""

    table_id: str
    key_columns: tuple[str, ...]
    markers: list[int] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    records: list[KafkaRecord] = field(default_factory=list)
    columns: dict[str, ColumnType] = field(default_factory=dict)
    _last_schema: Mapping[str, ColumnType] | None = None

    def merge_columns(self, schema: Mapping[str, ColumnType] | None, record: KafkaRecord) -> None:
        """Union the event's columns into the batch's; a changed type stops the table.

        Raises:
            TableStopped: a column arrived with a different type than earlier in the batch.
        """
        if schema is None or schema is self._last_schema:
            return
        for name, ctype in schema.items():
            known = self.columns.get(name)
            if known is None:
                self.columns[name] = ctype
            elif known.arrow != ctype.arrow:
                raise SchemaChanged(
                    self.table_id,
                    f"{record.position}: column {name!r} changed type from {type_name(known.arrow)} to "
                    f"{type_name(ctype.arrow)}; open mirroring cannot change a column type: "
                    f"{rebuild_hint(self.table_id)}",
                    "type_changed",
                )
        self._last_schema = schema

    def __len__(self) -> int:
        return len(self.rows)

    def to_arrow(self, established: pa.Schema | None, declared: Mapping[str, DeclaredDecimal]) -> pa.Table:
        """Build the batch's Arrow table: established columns first, new ones after, ``__rowMarker__`` last.

        ``established`` is the table's schema from earlier batches; ``declared`` holds config-declared
        decimal columns. Schemaless columns take the established type, else a type inferred from their
        values; all-null columns of unknown type are left out (mirroring stores NULL). Every column is
        nullable, key columns too: a later file may lack a dropped column, and open mirroring accepts a
        missing column only when it is nullable.

        Raises:
            TableStopped: a value does not convert, a column's type is refused by the type policy
                (whatever the poison policy), or a column's type differs from the established one.
        """
        names = column_order(established, self.columns, itertools.chain.from_iterable(self.rows))
        arrays: list[pa.Array] = []
        fields: list[pa.Field] = []
        for name in names:
            values = [row.get(name) for row in self.rows]
            ctype = self._column_type(name, values, established, declared)
            if ctype is None:
                continue
            if ctype.refusal is not None:
                first = self.records[next((i for i, v in enumerate(values) if v is not None), 0)]
                raise TableStopped(self.table_id, f"{first.position}: column {name!r}: {ctype.refusal}")
            try:
                array = to_arrow(values, ctype)
            except ConversionError as exc:
                record = self.records[exc.row]
                raise TableStopped(self.table_id, f"{record.position}: column {name!r}: {exc.reason}") from exc
            arrays.append(array)
            fields.append(pa.field(name, ctype.arrow, nullable=True))
        return marked_table(fields, arrays, self.markers)

    def _column_type(
        self, name: str, values: list[Any], established: pa.Schema | None, declared: Mapping[str, DeclaredDecimal]
    ) -> ColumnType | None:
        ctype = self.columns.get(name)
        if name in declared:
            spec = declared[name]
            return declared_decimal(ctype, spec.precision, spec.scale, spec.setting)
        if ctype is not None:
            return ctype
        if established is not None and name in established.names:
            return established_type(established.field(name).type)
        return _infer(values)


def established_type(arrow: pa.DataType) -> ColumnType:
    """Conversion for a schemaless column whose type an earlier batch fixed."""
    if pa.types.is_binary(arrow):
        return ColumnType(arrow, Wire.BASE64)
    if pa.types.is_string(arrow):
        return ColumnType(arrow, Wire.JSON)  # passes strings through, writes nested values as JSON text
    return ColumnType(arrow, Wire.PLAIN)


def _infer(values: list[Any]) -> ColumnType | None:
    """Type of a schemaless column from its values (``connector.debezium.schemaless``'s rule)."""
    return inferred_type({kind_of_value(v) for v in values if v is not None})
