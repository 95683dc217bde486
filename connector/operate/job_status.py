"""Whether the job runs, and why it last stopped: a small file beside the ledger that ``tables`` shows first.

A job-level stop (lost Kafka records with ``on_data_lost: stop``, a failed query, a refused start) ends the
process, and the ledger only knows the tables: without this record, ``tables`` afterwards shows every table
``running`` while nothing runs. It is written only by the instance that holds the writer fence, so a second
instance refused at the fence cannot overwrite the running one's status, and never fails the job (a status
that cannot be written is logged: the job's own exit code and ``error:`` line say the same).
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

import orjson

from connector.storage.base import Storage

log = logging.getLogger(__name__)

STATUS_FILE = "job-status.json"


@dataclass(frozen=True)
class JobStatus:
    """The job's last recorded state: ``running`` (since ``at``) or ``stopped`` (at ``at``, for ``reason``)."""

    state: str
    at: float
    reason: str | None = None

    def text(self) -> str:
        """``job: stopped 2026-01-02T03:04:05Z: <reason>``, the line ``tables`` prints first."""
        when = datetime.fromtimestamp(self.at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if self.state == "running":
            return f"job: running since {when}"
        return f"job: stopped {when}: {self.reason or 'no reason recorded'}"


class JobStatusRecorder:
    """Records the job's state in the checkpoint once this instance holds the writer fence (``arm``)."""

    def __init__(self) -> None:
        self._checkpoint: Storage | None = None

    def arm(self, checkpoint: Storage) -> None:
        """From now on this instance is the checkpoint's writer: its stops are the job's."""
        self._checkpoint = checkpoint

    def running(self) -> None:
        """The query started."""
        self._write(JobStatus("running", time.time()))

    def stopped(self, reason: str) -> None:
        """The job ended, for ``reason``."""
        self._write(JobStatus("stopped", time.time(), reason))

    def _write(self, status: JobStatus) -> None:
        if self._checkpoint is None:
            return
        try:
            self._checkpoint.replace(STATUS_FILE, orjson.dumps(asdict(status)))
        except Exception as exc:  # noqa: BLE001 - a status that cannot be written must not change the exit
            log.warning("could not record the job status in %s/%s: %s", self._checkpoint.url, STATUS_FILE, exc)


def read_job_status(checkpoint: Storage) -> JobStatus | None:
    """The recorded status; ``None`` when none was recorded (a checkpoint written before it was) or unreadable."""
    try:
        raw = orjson.loads(checkpoint.read_bytes(STATUS_FILE))
        return JobStatus(str(raw["state"]), float(raw["at"]), None if raw.get("reason") is None else str(raw["reason"]))
    except FileNotFoundError:
        return None
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        log.warning("the job status %s/%s is unreadable (%s)", checkpoint.url, STATUS_FILE, exc)
        return None
