"""A table's initial load on the driver: where it ends, and whether Debezium started its snapshot again.

While every event published for a table is a read of Debezium's initial snapshot, its files are whole-file
inserts without ``__rowMarker__`` (``mirror.initial_load: marker-free``; ``connector.collect.staging`` splits a
piece at its first other event). That is only right if each row is read once. Debezium killed during its
initial snapshot starts the snapshot again from the first row of the first table (seen on Postgres and MariaDB:
``source.snapshot`` ``first`` again), and the changes made between the two passes reach Kafka only as the
second pass's reads: rows of the first pass deleted in between would stay, and re-read rows would be
inserted twice. So a table whose initial load sees a second pass is rebuilt (``table_stops.begin_rebuild``:
folder deleted, Fabric waited for, an incremental snapshot of the table), whichever ``initial_load`` is set.

A pass begins at a read marked ``first`` or ``first_in_data_collection``, or at any read after the table's
read marked ``last``/``last_in_data_collection`` (a one-row table's only read is marked ``last...``). A pass
beginning after rows of an earlier one, in this batch or published before, is a second pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from connector.collect.ordering import Position
from connector.collect.pieces import TablePiece
from connector.publish.ledger import TableState


@dataclass(frozen=True)
class InitialLoadCheck:
    """What a batch's pieces of one table say about its initial load."""

    second_pass: Position | None = None  # the first record of a piece where a second snapshot pass begins
    ended: bool = False  # an event other than an initial-snapshot read came: the initial load is over
    pass_ended: bool = False  # the last initial-load read is the last read of a pass


def check_initial_load(pieces: Sequence[TablePiece], state: TableState) -> InitialLoadCheck:
    """Follow the table's initial load through ``pieces`` (in Kafka order), from ``state`` (the ledger's)."""
    if state.initial_load_ended:
        return InitialLoadCheck(ended=True)
    had_reads = state.rows_published > 0
    pass_ended = state.snapshot_pass_ended
    for piece in pieces:
        initial = piece.initial
        if initial.rows:
            starts = initial.pass_starts
            if (had_reads and (pass_ended or 0 in starts)) or any(row > 0 for row in starts):
                return InitialLoadCheck(second_pass=piece.first, pass_ended=pass_ended)
            had_reads = True
            pass_ended = initial.ends_pass
        if not initial.complete:
            return InitialLoadCheck(ended=True, pass_ended=pass_ended)
    return InitialLoadCheck(pass_ended=pass_ended)
