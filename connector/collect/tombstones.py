"""Tombstones: noise after their key's delete, the delete itself when compaction removed that delete.

Debezium follows each delete event with a tombstone (same key, null value; ``tombstones.on.delete``, the
default). On a compacted topic (``cleanup.policy=compact``) the cleaner removes every record that a later one
of the same key supersedes, so the delete event goes and the tombstone is all that says the row is gone. The
one rule both collecting paths apply: a tombstone whose key's previous record in the slice (same topic and
partition, same key bytes) is a delete or a tombstone adds nothing and is skipped; any other tombstone is
written as the key's delete row. Writing it when the delete was in an earlier slice is harmless: a delete
(marker 2) of a key the mirror does not hold is "no data change, no validation/exception" in open mirroring
(the landing-zone format's ``__rowMarker__`` table), and it sits at the tombstone's place in Kafka order, so
the key's later rows still follow it.

A delete row carries every key column with its type (invariant 5, docs/guarantees.md), so a tombstone is written only
when the table's key columns are all in the Kafka key and their types are known (the key's own schema, the slice's
events or the table's established schema); otherwise it is counted as ``tombstone_unwritable`` and logged with its
position, never dropped silently.
"""

from __future__ import annotations

import logging
from collections.abc import Container, Iterable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connector.debezium.envelope import ChangeEvent, KeyLayout, tombstone_delete
from connector.events import KafkaRecord, Op

#: ``cdc_mirror_records_skipped_total{kind}``: a tombstone after its key's delete (nothing to add).
SKIPPED = "tombstone"
#: The same metric: a tombstone that stands for a delete the connector cannot write (the line says why).
UNWRITABLE = "tombstone_unwritable"

_DELETE = Op.DELETE.value


class DeletedKeys:
    """The keys of one slice whose latest record is a delete or a tombstone, by topic and partition."""

    def __init__(self) -> None:
        self._deleted: set[tuple[str, int, bytes | None]] = set()

    def saw(self, record: KafkaRecord, op: str) -> None:
        """Note a change event of ``record``'s key."""
        position = (record.topic, record.partition, record.key)
        if op == _DELETE:
            self._deleted.add(position)
        else:
            self._deleted.discard(position)

    def follows_delete(self, tombstone: KafkaRecord) -> bool:
        """Whether the tombstone's key was deleted by its previous record; the key is deleted from now on."""
        position = (tombstone.topic, tombstone.partition, tombstone.key)
        if position in self._deleted:
            return True
        self._deleted.add(position)
        return False


def as_delete(
    tombstone: KafkaRecord, key: KeyLayout, key_columns: Iterable[str] | None, typed: Container[str]
) -> ChangeEvent | str:
    """The delete ``tombstone`` stands for, or why it cannot be written (a line naming its position).

    ``key_columns`` are the table's mirror key columns (``None``: none known); ``typed`` the columns whose
    type is known besides the key's own schema (``key.types``).
    """
    where = tombstone.position
    if key.values is None:
        return f"{where}: a tombstone without a key cannot say which row was deleted"
    if key_columns is None:
        return f"{where}: the table has no key columns, so the tombstone's delete cannot be written"
    columns = tuple(key_columns)
    missing = [c for c in columns if c not in key.values]
    if missing:
        return (
            f"{where}: the table's key columns {missing} are not in the Kafka key {list(key.values)}, so the "
            "tombstone's delete cannot be written"
        )
    own = key.types or {}
    untyped = [c for c in columns if c not in own and c not in typed]
    if untyped:
        return (
            f"{where}: the types of key columns {untyped} are not known yet (the key carries no schema and the "
            "table has no earlier rows), so the tombstone's delete cannot be written"
        )
    return tombstone_delete(tombstone, key)


#: Why a tombstone of a table the mirror holds nothing of is not written (a delete there changes nothing).
NO_ROWS_YET = "the mirror holds no rows of the table yet (no schema known), so the tombstone's delete is not written"


@dataclass
class TombstoneTally:
    """A slice's tombstones written as deletes, and those that could not be: one log line per table, not per record."""

    written: int = 0
    _unwritable: dict[str, tuple[str, int]] = field(default_factory=dict)  # table → (first reason, count)

    def unwritable(self, table_id: str, reason: str) -> None:
        """Count a tombstone of ``table_id`` whose delete cannot be written; ``reason`` names its position."""
        first, count = self._unwritable.get(table_id, (reason, 0))
        self._unwritable[table_id] = (first, count + 1)

    def log(self, logger: logging.Logger) -> None:
        """One info line for the deletes written, one warning per table for those that were not."""
        if self.written:
            logger.info("%d tombstones written as deletes (their delete events were compacted away)", self.written)
        for table_id, (reason, count) in self._unwritable.items():
            more = f" (and {count - 1} more tombstones of the table in this slice)" if count > 1 else ""
            logger.warning(
                "table %s: %s%s; cdc_mirror_records_skipped_total{kind=%s} counts them. If a delete event was "
                "compacted away the mirror may still hold that key: rebuild the table (python -m connector rebuild "
                "%s) if it does",
                table_id,
                reason,
                more,
                UNWRITABLE,
                table_id,
            )


def tombstones_follow_deletes(
    partitions: pa.Array | pa.ChunkedArray,
    offsets: pa.Array | pa.ChunkedArray,
    keys: pa.Array | pa.ChunkedArray,
    tombstone: np.ndarray,
    deletes: np.ndarray,
) -> bool:
    """``DeletedKeys``' rule for a whole topic at once: whether every tombstone follows its key's delete.

    ``tombstone`` and ``deletes`` flag each record (a tombstone; a delete event). The columnar lane leaves a
    topic with any other tombstone to the record path, which writes its delete.
    """
    if pc.any(pc.is_null(pc.filter(keys, pa.array(tombstone)))).as_py():
        return False
    order = pc.sort_indices(
        pa.table({"p": partitions, "k": keys, "o": offsets}),
        sort_keys=[("p", "ascending"), ("k", "ascending"), ("o", "ascending")],
    )
    sorted_keys = pc.take(keys, order)
    sorted_partitions = pc.take(partitions, order).to_numpy()
    index = order.to_numpy()
    same_key = np.zeros(len(index), dtype=bool)
    if len(index) > 1:
        equal = pc.equal(sorted_keys.slice(1), sorted_keys.slice(0, len(index) - 1))
        same_key[1:] = pc.fill_null(equal, False).to_numpy(zero_copy_only=False)
        same_key[1:] &= sorted_partitions[1:] == sorted_partitions[:-1]
    gone = (tombstone | deletes)[index]
    previous_gone = np.zeros(len(index), dtype=bool)
    previous_gone[1:] = gone[:-1]
    orphans = tombstone[index] & ~(same_key & previous_gone)
    return not bool(orphans.any())
