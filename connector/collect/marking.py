"""Debezium ops → open-mirroring rows with ``__rowMarker__``.

c→0 (4 with replay-safe inserts), r→0 (likewise), u→1, d→2. An update that changes key columns becomes
a delete of the old key then an insert of the new one. Debezium's own key-change pair (delete with
``__debezium.newkey``, then create with ``__debezium.oldkey``) already has that shape and passes through.
Unavailable (TOASTed) placeholders are filled here, so none can reach a file.

A table without a key (``key_columns`` empty) is mirrored without ``keyColumns``: Fabric can only insert into
it, so its creates and reads are inserts (0) and an update or delete, which no row marker can express without
a key, raises ``keyless_change`` (a rebuild, or a stop under ``mirror.keyless_changes: stop``).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from connector.collect.toast_store import KeyTuple, Row, ToastStore
from connector.debezium.envelope import ChangeEvent
from connector.errors import TableReset, TableStopped, decline, rebuild_hint
from connector.events import Op, RowMarker

NEW_KEY_HEADER = "__debezium.newkey"

# ``rows`` runs per record: the ops it compares with, bound once (see ``Op``).
_INSERT_OPS = frozenset({Op.CREATE, Op.READ})
_UPDATE, _DELETE = Op.UPDATE, Op.DELETE


#: ``TableReset.cause`` of an update or delete of a keyless table (the ``cdc_mirror_table_resets_total`` label).
KEYLESS_CHANGE = "keyless_change"


def keyless_change(table_id: str, event: ChangeEvent, policy: str) -> TableStopped:
    """The one line for an update or delete of a table without a key: its rebuild (``TableReset``), or its stop."""
    record = event.record
    what = "an update" if event.op == _UPDATE else "a delete"
    head = (
        f"{record.position}: {what} of table {table_id}, which has no key (no primary key, no "
        f"mirror.tables[{record.topic!r}].key_columns): open mirroring mirrors it without keyColumns, inserts only"
    )
    if policy == "stop":
        return TableStopped(
            table_id, f"{head}; stopped (mirror.keyless_changes: stop): give it a key, then {rebuild_hint(table_id)}"
        )
    return TableReset(
        table_id,
        f"{head}; rebuilding it (mirror.keyless_changes: rebuild): folder deleted, Fabric waited for, then re-read "
        "by a Debezium blocking snapshot",
        KEYLESS_CHANGE,
    )


class MarkerSpec:
    """Debezium op → row marker: the one mapping the record path (``RowMarkerMapper``) and the columnar lane use.

    c and r → ``insert`` (0, or 4 with replay-safe inserts), u → 1, d → 2; an update that changes the key
    becomes ``key_change``: a delete (2) of the old key, then ``insert`` of the new one.
    """

    def __init__(self, replay_safe_inserts: bool) -> None:
        self.insert = RowMarker.UPSERT if replay_safe_inserts else RowMarker.INSERT
        self.key_change = (RowMarker.DELETE, self.insert)
        self.by_op: dict[Op, RowMarker] = {
            Op.CREATE: self.insert,
            Op.READ: self.insert,
            Op.UPDATE: RowMarker.UPDATE,
            Op.DELETE: RowMarker.DELETE,
        }

    def of_ops(self, ops: np.ndarray, key_changed: np.ndarray) -> np.ndarray:
        """The marker of each event's last row, vectorised: ``by_op``, and ``insert`` for a key-changing update."""
        markers = np.full(len(ops), int(self.insert), dtype=np.int32)
        for op, marker in self.by_op.items():
            if marker != self.insert:
                markers[ops == op.value] = int(marker)
        markers[key_changed] = int(self.insert)
        return markers


def key_tuple(values: Mapping[str, Any], key_columns: Iterable[str]) -> KeyTuple:
    """Hashable key of a row (nested values become their JSON text)."""
    return tuple(
        v if not isinstance(v, (dict, list)) else orjson.dumps(v).decode() for v in (values.get(c) for c in key_columns)
    )


def placeholder_values(placeholder: str) -> tuple[str, str]:
    """The values a column holding the placeholder has: as text, and as base64 text (``bytes`` columns)."""
    return placeholder, base64.b64encode(placeholder.encode()).decode()


def placeholder_markers(placeholder: str) -> tuple[bytes, bytes]:
    """Bytes that any record holding the placeholder contains: as text, and as base64 (``bytes`` columns)."""
    return placeholder.encode(), base64.b64encode(placeholder.encode()).rstrip(b"=")


@dataclass(frozen=True)
class ToastHandling:
    """How one table's unchanged TOASTed values are handled.

    Attributes:
        policy: ``toast_policy``: what a placeholder in an update becomes.
        placeholder: The text Debezium sends for a value it did not read (``unavailable_value_placeholder``).
        toastable_columns: The columns Postgres can send as the placeholder; ``None`` when the schema is unknown.
        store: The ``keep-last`` store of the table's last values; ``None`` under another policy.
    """

    policy: str
    placeholder: str
    toastable_columns: frozenset[str] | None = None
    store: ToastStore | None = None


class RowMarkerMapper:
    """Turns one table's change events into marked rows."""

    def __init__(
        self,
        table_id: str,
        key_columns: tuple[str, ...],
        *,
        replay_safe_inserts: bool,
        toast: ToastHandling,
        keyless_changes: str = "rebuild",
    ) -> None:
        self.table_id = table_id
        self.key_columns = key_columns
        # Without keyColumns an upsert has no key to match: insert is the one operation Fabric defines there.
        spec = MarkerSpec(replay_safe_inserts and bool(key_columns))
        self._keyless_changes = keyless_changes if not key_columns else None
        self._insert, self._key_change = spec.insert, spec.key_change
        self._toast_policy = toast.policy
        self._placeholders: tuple[Any, ...] = (*placeholder_values(toast.placeholder), [toast.placeholder])
        self._raw_markers = placeholder_markers(toast.placeholder)
        self.toastable_columns = toast.toastable_columns
        self.toast_store = toast.store

    def rows(self, event: ChangeEvent) -> list[tuple[RowMarker, Row]]:
        """Marked rows for one change event, in the order they must be applied."""
        op = event.op
        if op in _INSERT_OPS:
            after = self._fill_placeholders(event, event.after or {}, None)
            return [(self._insert, self._remember(after))]
        if self._keyless_changes is not None and op in (_UPDATE, _DELETE):
            raise keyless_change(self.table_id, event, self._keyless_changes)
        if op == _UPDATE:
            before = event.before
            after = event.after or {}
            after = self._fill_placeholders(event, after, before)
            if before is not None and self._key_changed(before, after):
                old = self._delete_row(event, before)
                deleted, inserted = self._key_change
                return [(deleted, old), (inserted, self._remember(after))]
            return [(RowMarker.UPDATE, self._remember(after))]
        if op == _DELETE:
            return [(RowMarker.DELETE, self._delete_row(event, event.before))]
        msg = f"op {op!r} has no row marker"
        raise ValueError(msg)

    def _key_changed(self, before: Row, after: Row) -> bool:
        return any(c in before and before[c] != after.get(c) for c in self.key_columns)

    def _delete_row(self, event: ChangeEvent, before: Row | None) -> Row:
        """A delete row: every key column, and whatever else ``before`` holds (placeholders nulled)."""
        row: Row = {}
        if before:
            row = {c: (None if self._is_placeholder(v) else v) for c, v in before.items()}
        key = event.key or {}
        for column in self.key_columns:
            if row.get(column) is None and column in key:
                row[column] = key[column]
        if self.toast_store is not None:
            old_key = key_tuple(row, self.key_columns)
            new_key = self._new_key(event)
            remembered = self.toast_store.get(old_key)
            if new_key is not None and remembered is not None:
                # A primary-key update: Debezium's create for the new key carries unchanged TOASTed
                # columns as placeholders, so what was written for the old key moves to the new one.
                self.toast_store.put(key_tuple(new_key, self.key_columns), remembered)
            self.toast_store.remove(old_key)
        return row

    @staticmethod
    def _new_key(event: ChangeEvent) -> dict[str, Any] | None:
        for name, value in event.record.headers:
            if name == NEW_KEY_HEADER and value:
                try:
                    parsed = orjson.loads(value)
                except orjson.JSONDecodeError:
                    return None
                if isinstance(parsed, dict) and "payload" in parsed and "schema" in parsed:
                    parsed = parsed["payload"]
                return parsed if isinstance(parsed, dict) else None
        return None

    def _is_placeholder(self, value: Any) -> bool:
        return isinstance(value, (str, list)) and value in self._placeholders

    def _fill_placeholders(self, event: ChangeEvent, after: Row, before: Row | None) -> Row:
        value = event.record.value or b""
        text_marker, base64_marker = self._raw_markers
        if text_marker not in value and base64_marker not in value:
            return after  # the cheap byte test rules out placeholders for almost every event
        filled = dict(after)
        remembered: Row | None = None
        for column, current in after.items():
            if not self._is_placeholder(current):
                continue
            if before is not None and column in before and not self._is_placeholder(before[column]):
                filled[column] = before[column]
                continue
            key = key_tuple(after, self.key_columns)
            if self._toast_policy == "keep-last" and self.toast_store is not None:
                if remembered is None:
                    remembered = self.toast_store.get(key) or {}
                if column in remembered:
                    filled[column] = remembered[column]
                    continue
                reason = (
                    "no value was written for it since the connector's store began, nor among the last "
                    "mirror.keep_last_removed_keys keys deleted or moved"
                )
            else:
                reason = "toast_policy is 'fail' (set it to 'keep-last', or use REPLICA IDENTITY FULL)"
            raise TableStopped(
                self.table_id,
                f"{event.record.position}: column {column!r} of key {dict(zip(self.key_columns, key, strict=True))} "
                f"is an unavailable TOASTed value and before does not hold it; {reason}",
            )
        return filled

    def _remember(self, row: Row) -> Row:
        if self.toast_store is not None:
            key = key_tuple(row, self.key_columns)
            columns = self.toastable_columns
            # Schemaless events do not say which columns are TOAST-able: remember them all.
            self.toast_store.put(key, dict(row) if columns is None else {c: row[c] for c in columns if c in row})
        return row


def mark_parsed(
    parsed: pa.Table, row_columns: Sequence[str], key_columns: tuple[str, ...], spec: MarkerSpec
) -> tuple[np.ndarray, dict[str, pa.Array]]:
    """Row markers and row columns of a topic parsed in bulk, as ``RowMarkerMapper`` makes them record by record.

    ``parsed`` holds ``op`` and the ``before`` / ``after`` structs of ``row_columns``; an update that changes
    the key becomes two rows. What the record path would do differently (no ``after`` row, a delete without
    its key in ``before``) calls ``decline``.
    """
    ops = parsed.column("op").combine_chunks()
    before = parsed.column("before").combine_chunks()
    after = parsed.column("after").combine_chunks()
    is_delete = pc.equal(ops, Op.DELETE.value)
    is_update = pc.equal(ops, Op.UPDATE.value)
    if pc.any(pc.and_(pc.invert(is_delete), pc.is_null(after))).as_py():
        decline("a create or update has no 'after' row")
    before_columns = dict(zip(row_columns, before.flatten(), strict=True))
    after_columns = dict(zip(row_columns, after.flatten(), strict=True))
    missing = [c for c in key_columns if c not in row_columns]
    if missing:
        decline(f"key columns {missing} are not row columns")
    has_before = pc.is_valid(before)
    key_changed = pa.array(np.zeros(len(ops), dtype=bool))
    for column in key_columns:
        old, new = before_columns[column], after_columns[column]
        same = pc.or_(pc.fill_null(pc.equal(old, new), False), pc.and_(pc.is_null(old), pc.is_null(new)))
        key_changed = pc.or_(key_changed, pc.invert(same))
        # A delete row (or the delete half of a key change) without its key would need the record key.
        needs_key = pc.and_(pc.is_null(old), pc.or_(is_delete, pc.and_(is_update, has_before)))
        if pc.any(needs_key).as_py():
            decline("a delete row lacks a key column in 'before'")
    split = pc.and_(pc.and_(is_update, has_before), key_changed).to_numpy(zero_copy_only=False)
    op_codes = ops.to_numpy(zero_copy_only=False)
    markers = spec.of_ops(op_codes, split)
    deletes = is_delete.to_numpy(zero_copy_only=False)
    rows: dict[str, pa.Array] = {}
    if not split.any():
        for name in row_columns:
            old, new = before_columns[name], after_columns[name]
            rows[name] = pc.if_else(is_delete, old, new) if deletes.any() else new
        return markers, rows
    # An update that changes the key: a delete of the old row, then an insert of the new one.
    per_record = 1 + split.astype(np.int64)
    take = np.repeat(np.arange(len(op_codes)), per_record)
    starts = np.cumsum(per_record) - per_record
    from_before = np.repeat(deletes, per_record)
    from_before[starts[split]] = True
    expanded = np.repeat(markers, per_record)
    expanded[starts[split]] = int(spec.key_change[0])
    indices = pa.array(take)
    mask = pa.array(from_before)
    for name in row_columns:
        rows[name] = pc.if_else(mask, before_columns[name].take(indices), after_columns[name].take(indices))
    return expanded, rows


def holds_placeholder(parsed: pa.Table, placeholder: str) -> bool:
    """Whether a ``before`` or ``after`` value of ``parsed`` equals the placeholder (text or base64).

    The record path fills or refuses such values per row (``RowMarkerMapper``); the lane leaves them to it.
    """
    values = pa.array(placeholder_values(placeholder), pa.string())
    for side in ("before", "after"):
        for column in parsed.column(side).chunk(0).flatten():
            if column.type == pa.string() and pc.any(pc.is_in(column, value_set=values)).as_py():
                return True
    return False
