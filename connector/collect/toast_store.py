"""The ``keep-last`` TOAST stores: per table, the last value of each TOAST-able column written per key.

Debezium sends an unchanged TOASTed column as a placeholder; with ``mirror.toast_policy: keep-last`` the marking
(``connector.collect.marking``) fills it from this store. Unlike the rest of ``collect`` this is the driver's
state, not a slice's: a keep-last table is therefore collected on the driver, the sink keeps one store per table,
persists it in the checkpoint and commits (or rolls back) the batch's changes with the batch.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import orjson

#: A row's values by column name.
Row = dict[str, Any]
#: A row's key values, in key-column order (hashable).
KeyTuple = tuple[Any, ...]


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
