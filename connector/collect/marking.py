"""Debezium ops → open-mirroring rows with ``__rowMarker__``.

c→0 (4 with replay-safe inserts), r→0 (likewise), u→1, d→2. An update that changes key columns becomes
a delete of the old key then an insert of the new one. Debezium's own key-change pair (delete with
``__debezium.newkey``, then create with ``__debezium.oldkey``) already has that shape and passes through.
Unavailable (TOASTed) placeholders are filled here, so none can reach a file.
"""

from __future__ import annotations

import base64
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from connector.debezium.envelope import ChangeEvent
from connector.errors import TableStopped, decline
from connector.events import Op, RowMarker

Row = dict[str, Any]
NEW_KEY_HEADER = "__debezium.newkey"
KeyTuple = tuple[Any, ...]

# ``rows`` runs per record: the ops it compares with, bound once (see ``Op``).
_INSERT_OPS = frozenset({Op.CREATE, Op.READ})
_UPDATE, _DELETE = Op.UPDATE, Op.DELETE


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


class ToastStore:
    """Last written value of each TOAST-able column per key, for the ``keep-last`` policy.

    Memory: one entry per live key of the table holding every string/binary column value written for it
    (roughly the table's size in those columns), plus the values of up to ``removed_limit`` keys deleted
    or moved away most recently. Only tables with ``keep-last`` keep one. Changes made by a batch go to an
    overlay that the sink merges only when the batch commits, so a replayed batch sees the same store as
    its first run.

    Why removed keys are kept: after a restart Debezium re-sends the events that followed its last offset
    flush. If those include a primary-key move K1→K2 whose K2 was later moved on or deleted, the re-sent
    create of K2 carries its TOASTed columns as placeholders, and only K1's (or K2's) last values can fill
    them.
    """

    def __init__(
        self,
        entries: dict[KeyTuple, Row] | None = None,
        removed: dict[KeyTuple, Row] | None = None,
        *,
        removed_limit: int,
    ) -> None:
        self.entries: dict[KeyTuple, Row] = entries or {}
        self.removed: dict[KeyTuple, Row] = removed or {}  # oldest first
        self.removed_limit = removed_limit
        self._overlay: dict[KeyTuple, Row | None] = {}
        self._removed_overlay: dict[KeyTuple, Row] = {}

    def get(self, key: KeyTuple) -> Row | None:
        """The last values written for ``key`` (batch overlay first; a removed key's last values last).

        An entry in an overlay wins over the committed store even when it is empty (``{}``: the key is known
        and had no TOAST-able value written); only a key absent from an overlay falls through to the store.
        """
        live = self._overlay[key] if key in self._overlay else self.entries.get(key)
        if live is not None:
            return live
        if key in self._removed_overlay:
            return self._removed_overlay[key]
        return self.removed.get(key)

    def put(self, key: KeyTuple, values: Row) -> None:
        """Record values written in the current batch."""
        self._overlay[key] = values

    def remove(self, key: KeyTuple) -> None:
        """Forget a deleted key (in the current batch), keeping its last values among the removed."""
        last = self._overlay[key] if key in self._overlay else self.entries.get(key)
        if last is not None and self.removed_limit > 0:
            self._removed_overlay.pop(key, None)
            self._removed_overlay[key] = last
        self._overlay[key] = None

    def commit(self) -> None:
        """Make the current batch's changes permanent."""
        self._apply(self.entries, self.removed)
        self._overlay.clear()
        self._removed_overlay.clear()

    def rollback(self) -> None:
        """Drop the current batch's changes."""
        self._overlay.clear()
        self._removed_overlay.clear()

    def _apply(self, entries: dict[KeyTuple, Row], removed: dict[KeyTuple, Row]) -> None:
        """The current batch's changes applied to ``entries`` and ``removed``, in place."""
        for key, values in self._overlay.items():
            if values is None:
                entries.pop(key, None)
            else:
                entries[key] = values
        for key, values in self._removed_overlay.items():
            removed.pop(key, None)  # re-inserted so the newest removals are evicted last
            removed[key] = values
        excess = len(removed) - self.removed_limit
        if excess > 0:
            for key in list(itertools.islice(removed, excess)):
                del removed[key]

    def snapshot(self) -> bytes:
        """JSON of the store with the current batch's changes applied (what a commit would keep)."""
        entries, removed = dict(self.entries), dict(self.removed)
        self._apply(entries, removed)
        return orjson.dumps(
            {
                "live": [[list(key), values] for key, values in entries.items()],
                "removed": [[list(key), values] for key, values in removed.items()],
            }
        )

    @classmethod
    def from_snapshot(cls, data: bytes, *, removed_limit: int) -> ToastStore:
        """Load a store written by ``snapshot`` (or by a version that kept live keys only, as a list)."""
        loaded = orjson.loads(data)
        if isinstance(loaded, list):
            loaded = {"live": loaded, "removed": []}
        return cls(
            {tuple(key): values for key, values in loaded["live"]},
            {tuple(key): values for key, values in loaded["removed"]},
            removed_limit=removed_limit,
        )


def placeholder_values(placeholder: str) -> tuple[str, str]:
    """The values a column holding the placeholder has: as text, and as base64 text (``bytes`` columns)."""
    return placeholder, base64.b64encode(placeholder.encode()).decode()


def placeholder_markers(placeholder: str) -> tuple[bytes, bytes]:
    """Bytes that any record holding the placeholder contains: as text, and as base64 (``bytes`` columns)."""
    return placeholder.encode(), base64.b64encode(placeholder.encode()).rstrip(b"=")


class RowMarkerMapper:
    """Turns one table's change events into marked rows."""

    def __init__(
        self,
        table_id: str,
        key_columns: tuple[str, ...],
        *,
        replay_safe_inserts: bool,
        toast_policy: str,
        placeholder: str,
        toastable_columns: frozenset[str] | None,
        toast_store: ToastStore | None,
    ) -> None:
        self.table_id = table_id
        self.key_columns = key_columns
        spec = MarkerSpec(replay_safe_inserts)
        self._insert, self._key_change = spec.insert, spec.key_change
        self._toast_policy = toast_policy
        self._placeholders: tuple[Any, ...] = (*placeholder_values(placeholder), [placeholder])
        self._raw_markers = placeholder_markers(placeholder)
        self.toastable_columns = toastable_columns
        self.toast_store = toast_store

    def rows(self, event: ChangeEvent) -> list[tuple[RowMarker, Row]]:
        """Marked rows for one change event, in the order they must be applied."""
        op = event.op
        if op in _INSERT_OPS:
            after = self._fill_placeholders(event, event.after or {}, None)
            return [(self._insert, self._remember(after))]
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


class ToastStores:
    """The sink's ``keep-last`` stores, one per table, loaded on first use and committed with the batch."""

    def __init__(self, load: Callable[[str], ToastStore], *, removed_limit: int) -> None:
        self._load = load
        self._removed_limit = removed_limit
        self.stores: dict[str, ToastStore] = {}
        self._replaced: dict[str, ToastStore | None] = {}

    def get(self, table_id: str) -> ToastStore:
        """The table's store (loaded from the checkpoint the first time)."""
        store = self.stores.get(table_id)
        if store is None:
            store = self.stores[table_id] = self._load(table_id)
        return store

    def reset(self, table_id: str) -> ToastStore:
        """An empty store for a table whose folder is recreated (undone by ``rollback``)."""
        if table_id not in self._replaced:
            self._replaced[table_id] = self.stores.get(table_id)
        store = self.stores[table_id] = ToastStore(removed_limit=self._removed_limit)
        return store

    def commit(self) -> None:
        """Keep the current batch's changes."""
        for store in self.stores.values():
            store.commit()
        self._replaced.clear()

    def rollback(self) -> None:
        """Forget the current batch's changes, including resets."""
        for table_id, previous in self._replaced.items():
            if previous is None:
                self.stores.pop(table_id, None)
            else:
                self.stores[table_id] = previous
        self._replaced.clear()
        for store in self.stores.values():
            store.rollback()


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
