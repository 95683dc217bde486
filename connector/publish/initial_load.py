"""Debezium's snapshot passes of one table on the driver: its initial load, and a new snapshot after it.

While every event published for a table is a read of Debezium's initial snapshot, its files are whole-file
inserts without ``__rowMarker__`` (``mirror.initial_load: marker-free``; ``connector.collect.staging`` splits a
piece at its first other event). That is only right if each row is read once. Debezium killed during its
initial snapshot starts the snapshot again from the first row of the first table (seen on Postgres and MariaDB:
``source.snapshot`` ``first`` again), and the changes made between the two passes reach Kafka only as the
second pass's reads: rows of the first pass deleted in between would stay, and re-read rows would be
inserted twice. So a table whose initial load sees a second pass is rebuilt (``Lifecycle.begin_rebuild``:
folder deleted, Fabric waited for, an incremental snapshot of the table), whichever ``initial_load`` is set.

After the initial load the same holds for a new initial (or blocking) snapshot: Debezium takes one when its
replication slot or its offsets are lost (a failover, a slot dropped, the connector registered under a new name,
``snapshot.mode: always``/``when_needed``, MariaDB's binlog purged). The changes made meanwhile were never
streamed, and a row deleted meanwhile shows only by its absence from the new snapshot, which upserts cannot
express: the table is rebuilt. The connector itself only asks for incremental snapshots, whose reads are changes
like any other (``source.snapshot`` ``incremental``), so every initial-snapshot read after the initial load is
Debezium's own doing.

A pass begins at a read marked ``first`` or ``first_in_data_collection``, or at any read after the table's
read marked ``last``/``last_in_data_collection`` (a one-row table's only read is marked ``last...``), or after
any other event (a snapshot's reads of one table are contiguous in its partition). During the initial load a
pass beginning after rows of an earlier one, in this batch or published before, is a second pass; after it,
every pass that begins is a new snapshot. ``TableState.snapshot_pass_ended`` carries across batches whether the
table's last event closed its pass (a rebuilt table starts with a pass open: the rest of the snapshot that began
its rebuild continues it and begins nothing).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from connector.collect.ordering import Position
from connector.collect.pieces import TablePiece
from connector.errors import TableReset
from connector.publish.ledger_state import TableState


@dataclass(frozen=True)
class InitialLoadCheck:
    """What a batch's pieces of one table say about its initial load and the snapshots after it."""

    second_pass: Position | None = None  # the first record of a piece where a second snapshot pass begins
    new_snapshot: Position | None = None  # past the initial load: the first record of a piece where a pass begins
    ended: bool = False  # an event other than an initial-snapshot read came: the initial load is over
    pass_ended: bool = False  # the table's last initial-snapshot read ended its pass (or another event came after)


def check_initial_load(pieces: Sequence[TablePiece], state: TableState) -> InitialLoadCheck:
    """Follow the table's snapshot passes through ``pieces`` (in Kafka order), from ``state`` (the ledger's).

    A keyless table's rebuild asks for a blocking snapshot (``TableState.snapshot_expected``): its reads may follow
    inserts streamed before Debezium paused for it, and are that snapshot, not a reset.
    """
    check = _followed(pieces, state)
    if state.snapshot_expected and (check.second_pass is not None or check.new_snapshot is not None):
        open_after = next((p.initial.passes.ends_open for p in reversed(pieces) if p.rows), False)
        return InitialLoadCheck(ended=True, pass_ended=not open_after)
    return check


def snapshot_read_in(pieces: Sequence[TablePiece]) -> bool:
    """Whether a piece holds a read of an initial or blocking snapshot (the expected snapshot has begun)."""
    return any(p.initial.rows or p.initial.passes.opens or p.initial.passes.begins for p in pieces)


def _followed(pieces: Sequence[TablePiece], state: TableState) -> InitialLoadCheck:
    loading = not state.initial_load_ended
    had_reads = state.rows_published > 0
    pass_ended = state.snapshot_pass_ended
    for piece in pieces:
        initial = piece.initial
        if loading:
            if initial.rows:
                starts = initial.pass_starts
                if (had_reads and (pass_ended or 0 in starts)) or any(row > 0 for row in starts):
                    return InitialLoadCheck(second_pass=piece.first, pass_ended=pass_ended)
                had_reads = True
                pass_ended = initial.ends_pass
            if initial.complete:
                continue
            loading = False
            if initial.passes.after_load:
                return InitialLoadCheck(new_snapshot=piece.first, ended=True, pass_ended=pass_ended)
        elif initial.passes.begins or (initial.passes.opens and pass_ended):
            return InitialLoadCheck(new_snapshot=piece.first, ended=True, pass_ended=pass_ended)
        if piece.rows:  # past the initial load (in this piece at the latest): whether a pass is left open
            pass_ended = not initial.passes.ends_open
    return InitialLoadCheck(ended=not loading, pass_ended=pass_ended)


def snapshot_reset(table: str, check: InitialLoadCheck) -> TableReset | None:
    """The rebuild a second pass or a new snapshot calls for, with its one line; ``None`` when neither came."""
    if check.second_pass is not None:
        topic, partition, offset = check.second_pass
        reason = (
            f"{topic}[{partition}]@{offset}: Debezium started its snapshot of {table} again during the table's "
            "initial load (a second snapshot pass: the first pass's rows may be gone or changed in the source); "
            "rebuilding the table"
        )
        return TableReset(table, reason, "snapshot_restart")
    if check.new_snapshot is not None:
        topic, partition, offset = check.new_snapshot
        reason = (
            f"{topic}[{partition}]@{offset} or after: Debezium took a new snapshot of {table} after its initial "
            "load, which the mirror did not ask for (its replication slot or offsets were lost: changes made "
            "meanwhile were never streamed, and rows deleted meanwhile are gone only from the new snapshot); "
            "rebuilding the table"
        )
        return TableReset(table, reason, "new_snapshot")
    return None
