"""The composition root of a writer: ``run`` and ``convert`` build the fence, storages, ledger and sink here.

One landing zone and its checkpoint have one writer at a time (``connector.publish.fence``); the fence is taken
before the ledger is read or the start-up recovery deletes anything, and everything that writes goes through the
fenced storages. ``open_mirror_writer`` does it in that order and returns the parts by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

from connector.config import ConnectorSettings
from connector.deadletter.output import open_dead_letter_writer
from connector.publish.fence import WriterFence
from connector.publish.ledger import BatchLedger
from connector.publish.rebuild import FabricTables, SnapshotSignal
from connector.sink import MirrorSink
from connector.storage.base import Storage
from connector.storage.location import StorageLocation


@dataclass
class MirrorWriter:
    """The one writer of a landing zone: its fence held, the ledger and the sink over the fenced storages.

    Attributes:
        landing_location: Where the landing zone is, and as whom (the executors open it themselves).
        fence: The writer fence, held (released by ``release``, or at exit for ``run``).
        ledger: The checkpoint's ledger, the sink's own: start-up steps (a resume, data-loss healing) commit here
            before the first batch.
        sink: The batch orchestrator, recovered already.
    """

    landing_location: StorageLocation
    fence: WriterFence
    ledger: BatchLedger
    sink: MirrorSink

    @property
    def landing(self) -> Storage:
        """The landing zone, fenced."""
        return self.fence.landing

    @property
    def checkpoint(self) -> Storage:
        """The checkpoint folder, fenced."""
        return self.fence.checkpoint

    def release(self) -> None:
        """Release the fence (``convert``; ``run`` holds it until the process exits)."""
        self.fence.release()

    def __enter__(self) -> MirrorWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.release()


def open_mirror_writer(
    settings: ConnectorSettings,
    *,
    checkpoint: StorageLocation | None = None,
    landing: Storage | None = None,
    until_exit: bool = False,
    on_fenced: Callable[[Storage], None] | None = None,
    snapshot_signal: SnapshotSignal | None = None,
    fabric_tables: FabricTables | None = None,
) -> MirrorWriter:
    """Take the fence over ``settings``' landing zone and checkpoint, then open the ledger and the sink.

    Args:
        settings: The landing zone, the mirror's rules, the source and the dead-letter output come from here.
        checkpoint: The ledger's folder; ``settings.checkpoint`` when omitted (``convert`` may use a scratch one).
        landing: ``settings``' landing zone already opened (``run`` reads it before the fence); opened when omitted.
        until_exit: Hold the fence until the interpreter exits (``run``) instead of until ``release``.
        on_fenced: Called with the fenced checkpoint once the fence is held, before the sink recovers (the job's
            status file is written there, so a failed recovery is recorded too).
        snapshot_signal: How a rebuild asks Debezium for a snapshot (``run`` with Kafka).
        fabric_tables: Which tables Fabric lists, read fresh when a rebuild asks.

    Raises:
        WriterFenced: Another instance writes this landing zone or checkpoint.
        ConfigError: The dead-letter output is misconfigured.
    """
    location = settings.landing_zone.location.absolute()
    checkpoint = checkpoint or settings.checkpoint_location
    fence = WriterFence(landing or location.open(), checkpoint.open())
    fence = fence.hold_until_exit() if until_exit else fence.acquire()
    try:
        if on_fenced is not None:
            on_fenced(fence.checkpoint)
        sink = MirrorSink(
            fence.landing,
            fence.checkpoint,
            settings.mirror,
            source=settings.source,
            dead_letters=open_dead_letter_writer(settings),
            snapshot_signal=snapshot_signal,
            fabric_tables=fabric_tables,
        )
    except BaseException:
        fence.release()
        raise
    return MirrorWriter(location, fence, sink.ledger, sink)
