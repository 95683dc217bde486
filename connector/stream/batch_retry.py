"""Retrying a micro-batch that failed for a transient reason, before the query fails.

A batch that fails stops Spark's query; the pod then restarts and Spark runs the batch again, a minute of
JVM start-up later. For a ``TransientError`` (OneLake, the schema registry or the dead-letter topic
unavailable after their own retries) the batch is tried again in the process first: the sink undoes what a
failed batch learnt and recovers its plan on the next call, so a retry publishes each file exactly once.
Anything else (bad input, a fenced writer, a corrupt ledger) fails at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from connector.errors import TransientError

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Seconds before each retry: three retries in about half a minute, inside the pod's termination grace.
BACKOFF_S = (2.0, 6.0, 15.0)


def retry_transient(
    attempt: Callable[[], T],
    what: str,
    *,
    backoff_s: tuple[float, ...] = BACKOFF_S,
    stop: threading.Event | None = None,
) -> T:
    """Run ``attempt``; on a ``TransientError`` wait and run it again, ``len(backoff_s)`` times at most.

    ``stop`` (a graceful stop was asked for) ends the waiting: the last error is raised at once.
    """
    for delay in backoff_s:
        try:
            return attempt()
        except TransientError as exc:
            log.warning("%s failed for a transient reason (%s); retrying in %.0f s", what, exc, delay)
            if (stop or threading.Event()).wait(delay):
                raise
    return attempt()
