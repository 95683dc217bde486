"""A daemon thread that calls ``poll_once`` every ``interval_s`` until stopped: the status pollers' loop."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod


class PollingThread(ABC):
    """``poll_once`` at start, then every ``interval_s``; ``stop`` ends it between two polls."""

    def __init__(self, name: str, interval_s: float) -> None:
        self._interval_s = interval_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    @abstractmethod
    def poll_once(self) -> object:
        """One poll; must not raise (the job outlives its pollers)."""

    def start_polling(self) -> None:
        """Run the polling in the daemon thread."""
        self._thread.start()

    def stop(self, timeout_s: float = 15.0) -> None:
        """End the polling (at shutdown): waits for a poll in flight at most ``timeout_s``."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    @property
    def stopped(self) -> bool:
        """The thread has ended (or never started)."""
        return not self._thread.is_alive()

    def _loop(self) -> None:
        while not self._stopped.is_set():
            self.poll_once()
            if self._stopped.wait(self._interval_s):
                return
