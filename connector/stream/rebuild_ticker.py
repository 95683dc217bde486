"""Moves table rebuilds on between batches.

Spark calls ``foreachBatch`` only when the topics have new records, so a rebuild waiting for Fabric (or for
``mirror.rebuild.wait_s``) on a quiet source would wait for the next change. The ticker advances rebuilds
every few seconds, under the sink's lock so it never runs inside a batch. Each tick also reads Debezium's
notifications of the snapshots the rebuilds asked for (``TableRebuilder`` through the snapshot signal's reader,
``connector.debezium_control.snapshot_notifications``), so a table runs again soon after its snapshot completed, and a
stalled snapshot is noticed, even while no table has new records.
"""

from __future__ import annotations

import logging
import threading

from connector.operate import metrics
from connector.sink import MirrorSink

log = logging.getLogger(__name__)


class RebuildTicker:
    """Every ``interval_s``, let the sink take rebuild requests and complete the rebuild phases it can."""

    def __init__(self, sink: MirrorSink, interval_s: float) -> None:
        self._sink = sink
        self._interval_s = interval_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="table-rebuilds", daemon=True)

    def start(self) -> RebuildTicker:
        """Run in a daemon thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """End the ticker (at shutdown); waits for a tick in progress."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join()

    def tick(self) -> None:
        """One pass, under the sink's lock; a failure is logged and tried again at the next tick."""
        with self._sink.lock:
            try:
                if self._sink.advance_rebuilds():
                    metrics.set_table_states(self._sink)
            except Exception as exc:  # noqa: BLE001 - the next tick retries; batches go on meanwhile
                log.error("table rebuilds: a step failed (%s); tried again in %.0f s", exc, self._interval_s)

    def _loop(self) -> None:
        while not self._stopped.wait(self._interval_s):
            self.tick()
