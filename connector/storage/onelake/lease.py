"""The writer fence on OneLake / ADLS Gen2: a finite blob lease, renewed in the background.

``take_lease`` (behind ``OneLakeStorage.acquire_lease``) takes the lease; ``OneLakeLease`` keeps it alive and
refuses writing the moment it is lost, released, or may have lapsed, so two connector instances never publish
into the same landing zone at once.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

from azure.core import MatchConditions
from azure.core.exceptions import AzureError, HttpResponseError, ResourceExistsError, ResourceModifiedError
from azure.storage.filedatalake import DataLakeFileClient, DataLakeLeaseClient

from connector.errors import WriterFenced
from connector.storage.base import WriterIdentity, WriterLease
from connector.storage.onelake.azure_errors import describe_failure, error_code

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


def take_lease(client: DataLakeFileClient, location: str, holder: WriterIdentity, duration_s: int) -> OneLakeLease:
    """Take a blob lease on the file of ``client`` (created if missing) and record ``holder`` in its metadata.

    The lease lasts ``duration_s`` and is renewed by a daemon thread every third of it, so it ends
    within ``duration_s`` of the process dying without a release. The holder is written as the
    file's metadata under the lease (a write other instances cannot make), and read back by an
    instance that is refused, to name the holder.

    Args:
        client: The lease file's client.
        location: The lease file's URL, safe to log.
        holder: Who takes it (this process).
        duration_s: How long the lease lasts unrenewed.

    Raises:
        WriterFenced: Another instance holds the lease.
        AzureError: The service failed otherwise (the storage translates it).
    """
    # Already there (409), or there and leased (412): either way the lease below decides.
    with contextlib.suppress(ResourceExistsError, ResourceModifiedError):
        client.create_file(match_condition=MatchConditions.IfMissing)
    lease = DataLakeLeaseClient(client)
    requested = time.monotonic()
    try:
        lease.acquire(lease_duration=duration_s)
    except HttpResponseError as err:
        if err.status_code != 409:
            raise
        raise _held_elsewhere(client, location, error_code(err)) from None
    try:
        client.set_metadata(holder.as_fields(), lease=lease)
    except BaseException:
        # Not started as the writer: give the lease back rather than block the next start for a minute.
        with contextlib.suppress(AzureError):
            lease.release()
        raise
    return OneLakeLease(location, client, lease, holder, duration_s, requested)


def _held_elsewhere(client: DataLakeFileClient, location: str, code: str) -> WriterFenced:
    """The refusal of a lease another instance holds, naming it from the lease file's metadata."""
    try:
        current = WriterIdentity.from_fields(dict(client.get_file_properties().metadata or {}))
    except AzureError:
        current = None
    who = current.describe() if current is not None else "an instance that has not recorded itself yet"
    reason = (
        f"another connector instance holds the writer lease ({code or 'lease present'}): {who}. Only one "
        "instance may use a landing zone; stop that one first. If it is gone without releasing the "
        f"lease, the lease expires within {LEASE_DURATION_S} s of its last renewal: start again then"
    )
    return WriterFenced(location, who, reason)
