"""The HTTP retry policy of the OneLake / ADLS Gen2 backend: what to retry, and how long to wait.

Throttling (429) and the transient 5xx, timeouts and dropped connections are retried with exponential
backoff and jitter, honouring the server's ``Retry-After``; ``BackoffRetryPolicy`` plugs this into the
Azure SDK pipeline in place of its stock storage retry policy.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from azure.core.exceptions import ServiceRequestError, ServiceResponseError
from azure.core.pipeline import PipelineRequest, PipelineResponse
from azure.storage.filedatalake import ExponentialRetry

from connector.secrets import redact_url

_LOG = logging.getLogger(__name__)


#: HTTP statuses worth retrying: request timeout, throttling, and the server-side 5xx that mean
#: "try again" (501/505 are permanent).
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RetrySettings:
    """How hard to try before an operation fails with ``StorageUnavailable``.

    Attributes:
        max_retries: Retries per HTTP request after the first attempt.
        initial_backoff: Backoff ceiling in seconds before the first retry; doubles each retry.
        max_backoff: Cap on the exponential backoff, in seconds.
        max_retry_after: Cap on a server's ``Retry-After``, in seconds, so one bad header cannot stall
            the job for hours.
        connection_timeout: Seconds to wait for a TCP/TLS connection.
        read_timeout: Seconds to wait for response bytes; an expired wait counts as a transient failure.
    """

    max_retries: int = 8
    initial_backoff: float = 0.5
    max_backoff: float = 30.0
    max_retry_after: float = 120.0
    connection_timeout: float = 20.0
    read_timeout: float = 120.0


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Return the wait a response asks for, in seconds, or ``None``.

    Reads ``Retry-After`` (seconds or an HTTP date), then the millisecond variants Azure services send
    (``retry-after-ms``, ``x-ms-retry-after-ms``), in the order azure-core uses.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    value = lowered.get("retry-after")
    if value:
        try:
            return max(0.0, float(value))
        except ValueError:
            try:
                when = parsedate_to_datetime(value)
            except (TypeError, ValueError):
                return None
            if when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
            return max(0.0, (when - datetime.now(UTC)).total_seconds())
    for name in ("retry-after-ms", "x-ms-retry-after-ms"):
        value = lowered.get(name)
        if value:
            try:
                return max(0.0, float(value) / 1000.0)
            except ValueError:
                return None
    return None


def retry_delay(settings: RetrySettings, retry_number: int, retry_after: float | None, rng: random.Random) -> float:
    """Seconds to wait before retry ``retry_number`` (0-based).

    Exponential backoff with "equal jitter" (half fixed, half random) so many clients throttled at once
    spread out but still back off; never shorter than the server's ``Retry-After`` (capped).
    """
    ceiling = min(settings.max_backoff, settings.initial_backoff * (2.0**retry_number))
    delay = ceiling / 2.0 + rng.uniform(0.0, ceiling / 2.0)
    if retry_after is not None:
        delay = max(delay, min(retry_after, settings.max_retry_after))
    return delay


class BackoffRetryPolicy(ExponentialRetry):
    """The SDK's storage retry policy, with the statuses and waits this connector needs.

    The stock policy does not retry 429 and ignores ``Retry-After``; throttling is the most common
    transient error on OneLake, so this subclass retries the statuses in ``TRANSIENT_STATUSES`` and
    connection / timeout errors, waiting per ``retry_delay``. It reuses the base class's bookkeeping
    (retry counters, rewinding a streamed body) so per-call options the SDK passes keep working.
    """

    def __init__(self, settings: RetrySettings) -> None:
        n = settings.max_retries
        super().__init__(retry_total=n, retry_connect=n, retry_read=n, retry_status=n)
        self._settings = settings
        self._rng = random.Random()  # noqa: S311 - jitter, not security

    def send(self, request: PipelineRequest[Any]) -> PipelineResponse[Any, Any]:
        """Send ``request``, retrying transient failures; return the last response or raise."""
        state: dict[str, Any] = self.configure_retries(request)
        retry_number = 0
        while True:
            try:
                response: PipelineResponse[Any, Any] = self.next.send(request)
            except (ServiceRequestError, ServiceResponseError) as err:
                if not self.increment(state, request=request.http_request, error=err):
                    raise
                delay = retry_delay(self._settings, retry_number, None, self._rng)
                reason = type(err).__name__
            else:
                status = response.http_response.status_code
                if status not in TRANSIENT_STATUSES or not self.increment(
                    state, request=request.http_request, response=response.http_response
                ):
                    # The storage deserialisers read these, as the base class sets them.
                    if state["history"]:
                        response.context["history"] = state["history"]
                    response.http_response.location_mode = state["mode"]
                    return response
                retry_after = parse_retry_after(response.http_response.headers)
                delay = retry_delay(self._settings, retry_number, retry_after, self._rng)
                reason = f"HTTP {status}"
            retry_number += 1
            _LOG.debug(
                "retrying %s %s after %s (retry %d of %d) in %.3fs",
                request.http_request.method,
                redact_url(request.http_request.url),
                reason,
                retry_number,
                self._settings.max_retries,
                delay,
            )
            time.sleep(delay)
