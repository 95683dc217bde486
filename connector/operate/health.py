"""The job's health as /healthz and /readyz report it: alive once started; ready while it makes progress."""

from __future__ import annotations

import time
from collections.abc import Callable

from connector.operate.metrics import KAFKA_REACHABLE


class HealthState:
    """What /healthz and /readyz report: alive once started; ready while the job makes progress.

    Ready means: the query runs, the last batch succeeded, a Kafka broker answers, Fabric's mirrored
    database runs (when its status is read), and the job is not stalled (offsets behind, yet no batch
    completed for ``stall_after_s``). During a broker outage Spark's Kafka source just waits, and a stopped
    mirrored database leaves files unread, so without these checks a pod would look ready for as long as
    either lasts.
    """

    def __init__(self, stall_after_s: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.ready = False
        self.reason = "starting"
        self.stall_after_s = stall_after_s
        self._clock = clock
        self._last_progress = clock()
        self._offsets_behind = 0
        self._broker_problem: str | None = None
        self._database_problem: str | None = None

    def set(self, ready: bool, reason: str) -> None:
        """Change readiness; a successful batch also counts as progress."""
        self.ready = ready
        self.reason = reason
        if ready:
            self._last_progress = self._clock()

    def offsets_behind(self, total: int) -> None:
        """The Kafka backlog from the query's last progress report."""
        self._offsets_behind = total

    def broker(self, problem: str | None) -> None:
        """The broker check's outcome: ``None`` when a broker answered, else what went wrong."""
        self._broker_problem = problem
        KAFKA_REACHABLE.set(0 if problem else 1)

    def fabric_database(self, problem: str | None) -> None:
        """The mirrored database's last known status: ``None`` when Running, else its state (Stopped, …)."""
        self._database_problem = problem

    def status(self) -> tuple[bool, str]:
        """(ready, reason) as /readyz reports it now."""
        if not self.ready:
            return False, self.reason
        if self._broker_problem is not None:
            return False, f"kafka unreachable: {self._broker_problem}"
        if self._database_problem is not None:
            return False, f"fabric mirrored database not running: {self._database_problem}"
        idle = self._clock() - self._last_progress
        if self.stall_after_s is not None and self._offsets_behind and idle > self.stall_after_s:
            return False, (
                f"stalled: {self._offsets_behind} offsets behind and no batch completed for {idle:.0f}s "
                f"(metrics.stall_after_s={self.stall_after_s:g})"
            )
        return True, self.reason
