"""The last hour of the stream, kept in memory for the status page's plots (so the page needs no Prometheus).

One sample per committed batch (``record_batch``) and one per progress report of Spark's query (the Kafka offsets
behind). Bounded twice: samples older than ``window_s`` are dropped, and at most ``max_samples`` are kept (a 1 s
trigger gives 3,600 batches an hour).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

#: The series the page plots, in order, with their titles and units.
SERIES: tuple[tuple[str, str, str], ...] = (
    ("events_per_s", "Events per second", "events/s"),
    ("lag_s", "Lag behind the source", "s"),
    ("offsets_behind", "Kafka offsets behind", "records"),
    ("batch_duration_s", "Batch duration", "s"),
    ("files", "Files per batch", "files"),
)


@dataclass(frozen=True)
class BatchSample:
    """One committed batch: when it ended, the records it read, how long it took, its files, the lag after it."""

    at: float
    records: int
    duration_s: float
    files: int
    lag_s: float | None


class StatusHistory:
    """A ring buffer of batch samples and offsets-behind samples over the last ``window_s`` seconds; thread-safe."""

    def __init__(self, window_s: float = 3600.0, max_samples: int = 4000) -> None:
        self.window_s = window_s
        self._batches: deque[BatchSample] = deque(maxlen=max_samples)
        self._behind: deque[tuple[float, int]] = deque(maxlen=max_samples)
        self._lock = threading.Lock()

    def add_batch(self, sample: BatchSample) -> None:
        """Keep one committed batch."""
        with self._lock:
            self._batches.append(sample)
            self._prune(sample.at)

    def add_offsets_behind(self, total: int, at: float | None = None) -> None:
        """Keep one reading of the Kafka offsets behind (all partitions)."""
        at = time.time() if at is None else at
        with self._lock:
            self._behind.append((at, total))
            self._prune(at)

    def last_batch(self) -> BatchSample | None:
        """The newest batch sample, if any."""
        with self._lock:
            return self._batches[-1] if self._batches else None

    def offsets_behind(self) -> int | None:
        """The newest offsets-behind reading, if any."""
        with self._lock:
            return self._behind[-1][1] if self._behind else None

    def series(self, now: float | None = None) -> dict[str, list[tuple[float, float]]]:
        """Every plotted series as (epoch seconds, value) points within the window, oldest first."""
        now = time.time() if now is None else now
        with self._lock:
            self._prune(now)
            batches, behind = list(self._batches), list(self._behind)
        # Events per second over the time since the previous batch ended: from the window's second batch on.
        rates = [
            (sample.at, sample.records / (sample.at - previous.at) if sample.at > previous.at else 0.0)
            for previous, sample in zip(batches, batches[1:], strict=False)
        ]
        return {
            "events_per_s": rates,
            "lag_s": [(s.at, s.lag_s) for s in batches if s.lag_s is not None],
            "offsets_behind": [(at, float(total)) for at, total in behind],
            "batch_duration_s": [(s.at, s.duration_s) for s in batches],
            "files": [(s.at, float(s.files)) for s in batches],
        }

    def _prune(self, now: float) -> None:
        horizon = now - self.window_s
        while self._batches and self._batches[0].at < horizon:
            self._batches.popleft()
        while self._behind and self._behind[0][0] < horizon:
            self._behind.popleft()
