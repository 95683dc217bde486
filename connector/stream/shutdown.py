"""Graceful stop: SIGTERM/SIGINT finish the batch in flight, start no other, and stop the query from the main thread.

A signal handler must not call into the JVM: Python runs it on the main thread in the middle of whatever
py4j call that thread is making (``awaitTermination``), and py4j refuses the reentrant call. So the
handler only records the request; the main thread's watch loop sees it within a second, waits until the
batch in flight is committed, and then stops the query itself.

A batch Spark starts after the request is refused before it touches anything (``BatchAbandoned``): Spark
does not commit its offsets, and the next start runs it again. Nothing is ever half-published either way:
the ledger completes or discards an interrupted batch on the next start.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from connector import early_stop
from connector.errors import ConnectorError

log = logging.getLogger(__name__)

STOP_SIGNALS = early_stop.STOP_SIGNALS


class BatchAbandoned(ConnectorError):
    """A batch that began after a stop was requested; refused untouched, so Spark runs it again next start."""

    def __init__(self, batch_id: int) -> None:
        super().__init__(batch_id)
        self.batch_id = batch_id

    def __str__(self) -> str:
        return f"batch {self.batch_id} abandoned untouched: the connector is stopping (it runs again on the next start)"


def _drop_refusals(record: logging.LogRecord) -> bool:
    """py4j logs every exception a callback raises with its traceback; a refused batch is expected, not an error."""
    return not (record.exc_info and isinstance(record.exc_info[1], BatchAbandoned))


class GracefulStop:
    """The stop request and the gate every batch passes through."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.signal_name: str | None = None
        # Held for the whole of a batch: the main thread takes it to wait for the batch in flight.
        self._in_batch = threading.Lock()
        self.abandoned: list[int] = []
        self._previous: dict[signal.Signals, Any] | None = None

    def request(self, reason: str) -> None:
        """Ask for a stop (a signal, or the code that watches the query)."""
        if not self.requested.is_set():
            self.signal_name = reason
            self.requested.set()

    def install(self) -> Callable[[], None]:
        """Route SIGTERM and SIGINT to :meth:`request`; returns the function that restores the first handlers found.

        ``run`` installs it first thing, so a signal during start-up (imports done, Spark not yet up) is a stop
        request too, and again once the SparkSession exists: PySpark's SparkContext replaces the SIGINT handler
        with its own, which calls into the JVM. Installing again keeps the handlers found the first time.
        """

        def handler(signum: int, frame: FrameType | None) -> None:
            # Only an Event and a log line here: no py4j call (see the module docstring).
            name = signal.Signals(signum).name
            log.warning("%s: stopping after the batch in flight", name)
            self.request(name)

        previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
        if self._previous is None:
            self._previous = previous
            logging.getLogger("py4j.clientserver").addFilter(_drop_refusals)
        # A signal ``python -m connector`` took before this handler existed (the imports, the settings).
        early = early_stop.requested()
        if early is not None and not self.requested.is_set():
            log.warning("%s: stopping (received during start-up)", early)
            self.request(early)
        return self.restore

    def restore(self) -> None:
        """Put back the handlers found at the first :meth:`install` (nothing when never installed)."""
        if self._previous is None:
            return
        for sig, old in self._previous.items():
            signal.signal(sig, old)
        self._previous = None
        logging.getLogger("py4j.clientserver").removeFilter(_drop_refusals)

    def gate(
        self, write_batch: Callable[[Any, int], None], on_refuse: Callable[[], None] | None = None
    ) -> Callable[[Any, int], None]:
        """``write_batch`` for ``foreachBatch``, refusing batches that start once a stop was requested.

        ``on_refuse`` runs before a refusal is raised (the job silences Spark's report of it there: the main
        thread may not have got that far yet when Spark starts the next batch at once).
        """

        def gated(frame: Any, batch_id: int) -> None:
            with self._in_batch:
                if self.requested.is_set():
                    self.abandoned.append(batch_id)
                    if on_refuse is not None:
                        on_refuse()
                    raise BatchAbandoned(batch_id)
                write_batch(frame, batch_id)

        return gated

    def wait_for_batch_in_flight(self) -> None:
        """Return once no batch is running (the one in flight, if any, has committed or failed)."""
        with self._in_batch:
            pass

    def explains(self, failure: object) -> bool:
        """Whether a query failure is only the refusal of a batch that began after the stop request."""
        return self.requested.is_set() and BatchAbandoned.__name__ in str(failure)
