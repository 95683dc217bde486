"""The writer fence on OneLake / ADLS Gen2: a finite blob lease, renewed in the background.

``OneLakeStorage.acquire_lease`` takes the lease; ``OneLakeLease`` keeps it alive and refuses writing
the moment it is lost, released, or may have lapsed, so two connector instances never publish into the
same landing zone at once.
"""

from __future__ import annotations

import logging
import threading
import time

from azure.core.exceptions import AzureError, HttpResponseError
from azure.storage.filedatalake import DataLakeFileClient, DataLakeLeaseClient

from connector.errors import WriterFenced
from connector.storage.azure_errors import describe_failure, error_code
from connector.storage.base import WriterIdentity, WriterLease

_LOG = logging.getLogger(__name__)

#: How long a writer lease lasts without renewal (the service allows 15-60 s, or infinite). Finite, so
#: the lease of an instance that died without releasing it frees itself; long, so a slow renewal is fine.
LEASE_DURATION_S = 60
#: Stop writing this long before an unrenewed lease would expire, for requests already on their way.
LEASE_SAFETY_MARGIN_S = 10.0
# Answers to a renewal that mean the lease is gone for good (another holder, broken, file deleted).
_LEASE_GONE_STATUSES = frozenset({404, 409, 412})


class OneLakeLease(WriterLease):
    """A finite blob lease kept alive by a daemon thread; writing stops the moment it may have lapsed.

    A renewal the service refuses (another lease id, a broken lease, the file gone) loses the lease for
    good. A renewal that merely fails (throttling, an outage) is retried at the next tick; meanwhile
    ``check`` refuses once the last successful renewal is about to run out, because from then on
    another instance could take the lease over and start writing.
    """

    def __init__(
        self,
        location: str,
        client: DataLakeFileClient,
        lease: DataLakeLeaseClient,
        holder: WriterIdentity,
        duration_s: int,
        acquired_at: float,
    ) -> None:
        """Start renewing ``lease``, acquired by a request sent at ``acquired_at`` (``time.monotonic``)."""
        self.location = location
        self.holder = holder
        self.duration_s = duration_s
        self._client = client
        self._lease = lease
        self._lock = threading.Lock()
        self._valid_until = acquired_at + duration_s
        self._lost: str | None = None
        self._released = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep_alive, name="writer-lease-renewal", daemon=True)
        self._thread.start()

    def renew(self) -> None:
        """Renew the lease now; the renewal thread calls this every third of the lease's duration."""
        sent = time.monotonic()
        try:
            self._lease.renew()
        except HttpResponseError as err:
            if err.status_code in _LEASE_GONE_STATUSES:
                with self._lock:
                    self._lost = f"HTTP {err.status_code} {error_code(err)}".strip()
                _LOG.error("lost the writer lease on %s: %s; publishing stops", self.location, self._lost)
                return
            _LOG.warning("could not renew the writer lease on %s: %s", self.location, describe_failure(err))
        except AzureError as err:
            _LOG.warning("could not renew the writer lease on %s: %s", self.location, describe_failure(err))
        else:
            with self._lock:
                self._valid_until = sent + self.duration_s

    def check(self) -> None:
        """Refuse when the lease is lost, released, or too close to lapsing unrenewed."""
        with self._lock:
            lost, released, valid_until = self._lost, self._released, self._valid_until
        who = self.holder.describe()
        if released:
            raise WriterFenced(self.location, who, f"the writer lease of {who} was released; refusing to write")
        if lost is not None:
            reason = (
                f"the writer lease of {who} was lost ({lost}): another instance may be writing now, so this "
                "one stops publishing; restart it once the other instance is stopped"
            )
            raise WriterFenced(self.location, who, reason)
        left = valid_until - time.monotonic()
        if left < LEASE_SAFETY_MARGIN_S:
            reason = (
                f"the writer lease of {who} could not be renewed and ends in {max(left, 0.0):.0f} s; another "
                "instance could take it over, so this one stops publishing"
            )
            raise WriterFenced(self.location, who, reason)

    def release(self) -> None:
        """Stop renewing and release the lease, best effort: an unreleased lease expires by itself."""
        with self._lock:
            if self._released:
                return
            self._released = True
            lost = self._lost is not None
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
        if lost:
            return
        try:
            # Forget the holder while the lease still guards the record, as the local lock file does.
            self._client.set_metadata({}, lease=self._lease)
            self._lease.release()
        except AzureError as err:
            _LOG.warning("could not release the writer lease on %s: %s", self.location, describe_failure(err))

    def _keep_alive(self) -> None:
        interval = self.duration_s / 3
        while not self._stop.wait(interval):
            self.renew()
            with self._lock:
                if self._lost is not None:
                    return
