"""OneLake / ADLS Gen2 backend: a landing zone (or checkpoint) reached over the DFS API.

OneLake speaks the ADLS Gen2 API, so one backend serves the Fabric landing zone and a user's own ADLS
Gen2 account. It is built on ``azure-storage-file-datalake``; the publish protocol and the failure
handling are ours:

* **Never a partial or overwritten file.** ``create`` uploads to ``_tmp_<random>.part`` in the same
  folder (open mirroring ignores underscore-prefixed names), flushes it with the content MD5, then
  renames it onto the final name with ``If-None-Match: *``: the service refuses the rename when the
  destination exists, so a published file is never replaced, even by a second writer.
* **Retries that cannot lie.** 429, 5xx, timeouts and dropped connections are retried with exponential
  backoff and jitter, honouring ``Retry-After``. A rename is not idempotent on the wire: if its first
  attempt succeeded but the answer was lost, the retry sees "destination exists" or "source missing".
  Both are checked against the state (source gone, destination with our size and MD5) and treated as
  success, instead of reporting a conflict that never happened.
* **Fail fast with something to act on.** 401/403 raise ``StorageAccessDenied`` naming the path and the
  identity (never a secret); a missing workspace, container or item raises ``StorageNotFound`` with a
  hint to check the URL; exhausted retries raise ``StorageUnavailable``.

Reads and property look-ups go through the SDK's Blob endpoint (``onelake.blob.fabric.microsoft.com`` /
``<account>.blob.core.windows.net``), as the SDK does; OneLake supports both.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import random
import re
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any, Literal, NoReturn
from urllib.parse import quote, unquote, urlsplit

from azure.core import MatchConditions
from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.core.pipeline import PipelineRequest, PipelineResponse
from azure.storage.filedatalake import (
    ContentSettings,
    DataLakeFileClient,
    DataLakeLeaseClient,
    ExponentialRetry,
    FileSystemClient,
)

from connector.errors import WriterFenced
from connector.storage.base import TEMP_PREFIX, FileInfo, Storage, WriterIdentity, WriterLease, join
from connector.storage.credentials import CredentialConfig, StorageIdentity, build_credential
from connector.storage.errors import (
    InvalidStorageURL,
    StorageAccessDenied,
    StorageError,
    StorageNotFound,
    StorageUnavailable,
)

_LOG = logging.getLogger(__name__)


#: HTTP statuses worth retrying: request timeout, throttling, and the server-side 5xx that mean
#: "try again" (501/505 are permanent).
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})

# Error codes (x-ms-error-code) that mean the container / workspace itself is missing, as opposed to a
# path inside it. Blob-endpoint calls say ContainerNotFound, DFS calls FilesystemNotFound.
_FILESYSTEM_MISSING = frozenset({"FilesystemNotFound", "ContainerNotFound"})
_PARENT_MISSING = "RenameDestinationParentPathNotFound"

#: How long a writer lease lasts without renewal (the service allows 15-60 s, or infinite). Finite, so
#: the lease of an instance that died without releasing it frees itself; long, so a slow renewal is fine.
LEASE_DURATION_S = 60
#: Stop writing this long before an unrenewed lease would expire, for requests already on their way.
LEASE_SAFETY_MARGIN_S = 10.0
# Answers to a renewal that mean the lease is gone for good (another holder, broken, file deleted).
_LEASE_GONE_STATUSES = frozenset({404, 409, 412})

# One append carries at most this much; larger files are sent as consecutive appends before one flush.
_APPEND_CHUNK = 16 * 1024 * 1024

_ONELAKE_HOST = re.compile(r"^(?:[a-z0-9-]+-)?onelake\.dfs\.fabric\.microsoft\.com$", re.IGNORECASE)
_ADLS_HOST = re.compile(r"^[a-z0-9]{3,24}\.dfs\.core\.[a-z0-9.-]+$", re.IGNORECASE)
_BLOB_HOST = re.compile(r"(^|\.)blob\.(core|fabric)\.", re.IGNORECASE)
# The SDK addresses these hosts path-style (``/<account>/<filesystem>/...``), the emulator convention.
_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost"})

LocationKind = Literal["onelake", "adls", "loopback"]

_URL_FORMS = (
    "https://onelake.dfs.fabric.microsoft.com/<workspace>/<item>/Files/LandingZone, "
    "https://<region>-onelake.dfs.fabric.microsoft.com/..., "
    "abfss://<workspace>@onelake.dfs.fabric.microsoft.com/<item>/Files/..., "
    "abfss://<container>@<account>.dfs.core.windows.net/<path>, "
    "https://<account>.dfs.core.windows.net/<container>/<path>, "
    "or http(s)://127.0.0.1:<port>/<account>/<container>/<path> for a local emulator"
)


@dataclass(frozen=True)
class OneLakeLocation:
    """Where a storage root lives, split the way the DFS API addresses it.

    Attributes:
        account_url: The endpoint the SDK talks to: ``https://onelake.dfs.fabric.microsoft.com``,
            ``https://<account>.dfs.core.windows.net`` or ``http(s)://127.0.0.1:<port>/<account>``.
        filesystem: The workspace (OneLake) or container (ADLS Gen2).
        root: The folder inside the filesystem that paths are relative to (no leading or trailing
            slash; ``""`` for the filesystem root). For OneLake it starts with the item.
        kind: ``onelake``, ``adls`` or ``loopback`` (a path-style endpoint on this machine).
    """

    account_url: str
    filesystem: str
    root: str
    kind: LocationKind

    @property
    def url(self) -> str:
        """The location as an ``https`` URL, safe to log (no credentials, no query)."""
        parts = [self.account_url.rstrip("/"), quote(self.filesystem)]
        if self.root:
            parts.append(quote(self.root))
        return "/".join(parts)


def parse_location(url: str) -> OneLakeLocation:
    """Split a landing-zone or ADLS Gen2 URL into endpoint, filesystem and root folder.

    Accepts the landing-zone URL exactly as the mirrored database's Home page shows it (workspace and
    item as GUIDs or names such as ``Sales.MountedRelationalDatabase``, percent-encoded or not),
    regional OneLake hosts, ``abfss://`` URLs, ADLS Gen2 ``https`` URLs, and path-style loopback URLs
    (``http(s)://127.0.0.1:<port>/<account>/<filesystem>/<path>``), which is how the SDK addresses a
    local emulator.

    Args:
        url: The URL from the connector config.

    Returns:
        The parsed location.

    Raises:
        InvalidStorageURL: (a ``ValueError`` and a ``ConfigError``) The URL is not a URL, has another
            form, carries a query (SAS tokens are not supported: use an identity), or points at a OneLake
            item without its ``Files`` folder.
    """
    text = url.strip()
    try:
        parts = urlsplit(text)
        port = f":{parts.port}" if parts.port else ""
    except ValueError as exc:  # an unclosed IPv6 bracket, a port that is no number or out of range
        msg = f"storage URL {_redact(text)} is malformed: {exc}"
        raise InvalidStorageURL(msg) from None
    scheme = parts.scheme.lower()
    if parts.query or parts.fragment:
        msg = f"storage URL must not have a query or fragment (SAS tokens are not supported): {_redact(text)}"
        raise InvalidStorageURL(msg)
    host = (parts.hostname or "").lower()
    segments = [unquote(s) for s in parts.path.split("/") if s]
    if any(s in {".", ".."} for s in segments):
        msg = f"storage URL must not contain '.' or '..' segments: {text}"
        raise InvalidStorageURL(msg)

    kind: LocationKind
    if scheme in {"abfss", "abfs"}:
        if scheme == "abfs":
            msg = f"use abfss:// (TLS); abfs:// is not supported: {text}"
            raise InvalidStorageURL(msg)
        filesystem = unquote(parts.username or "")
        if not filesystem:
            msg = f"abfss URL needs <filesystem>@<host>: {text}"
            raise InvalidStorageURL(msg)
        kind = _remote_kind(host, text)
        account_url = f"https://{host}{port}"
    elif scheme in {"https", "http"}:
        if host in _LOOPBACK_HOSTS:
            if len(segments) < 2:
                msg = f"loopback URL needs /<account>/<filesystem>[/<path>]: {text}"
                raise InvalidStorageURL(msg)
            kind = "loopback"
            account_url = f"{scheme}://{host}{port}/{quote(segments[0])}"
            segments = segments[1:]
        else:
            kind = _remote_kind(host, text)
            if scheme != "https":
                msg = f"OneLake and ADLS Gen2 need https: {text}"
                raise InvalidStorageURL(msg)
            account_url = f"https://{host}{port}"
        if not segments:
            msg = f"storage URL needs a filesystem (workspace or container) after the host: {text}"
            raise InvalidStorageURL(msg)
        filesystem, segments = segments[0], segments[1:]
    else:
        msg = f"unsupported storage URL {text!r}; expected one of: {_URL_FORMS}"
        raise InvalidStorageURL(msg)

    if kind == "onelake" and (len(segments) < 2 or segments[1] != "Files"):
        msg = (
            f"OneLake URL must point into an item's Files folder, like "
            f"https://onelake.dfs.fabric.microsoft.com/<workspace>/<item>/Files/LandingZone "
            f"(copy it from the mirrored database's Home page): {text}"
        )
        raise InvalidStorageURL(msg)
    return OneLakeLocation(account_url=account_url, filesystem=filesystem, root="/".join(segments), kind=kind)


def _remote_kind(host: str, text: str) -> LocationKind:
    if _ONELAKE_HOST.match(host):
        return "onelake"
    if _ADLS_HOST.match(host):
        return "adls"
    if _BLOB_HOST.search(host):
        msg = f"use the DFS endpoint (.dfs. instead of .blob.) for {text}"
        raise InvalidStorageURL(msg)
    msg = f"unsupported storage host {host!r} in {text}; expected one of: {_URL_FORMS}"
    raise InvalidStorageURL(msg)


def _redact(url: str) -> str:
    """Drop the query and fragment of a URL before it goes into an error message (a SAS signature)."""
    return url.split("?", 1)[0].split("#", 1)[0]


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
                _redact(request.http_request.url),
                reason,
                retry_number,
                self._settings.max_retries,
                delay,
            )
            time.sleep(delay)


@dataclass(frozen=True)
class _Fingerprint:
    """What we know of a file's content: enough to recognise our own upload after a lost answer."""

    size: int
    md5: bytes | None


class OneLakeStorage(Storage):
    """A folder in OneLake or ADLS Gen2, with the never-overwrite publish protocol.

    Thread-safe as far as the SDK is: each call builds its own light path client over one shared
    connection pool.
    """

    def __init__(
        self,
        location: OneLakeLocation,
        identity: StorageIdentity,
        retry: RetrySettings | None = None,
        *,
        ca_bundle: str | None = None,
    ) -> None:
        """Connect lazily to ``location``; nothing is sent until the first operation or ``check``.

        Args:
            location: Where the root folder lives (see ``parse_location``).
            identity: The credential and its log-safe description.
            retry: Backoff and timeout settings; defaults suit OneLake throttling.
            ca_bundle: PEM bundle of the CAs to trust instead of the default store, for TLS-inspecting
                proxies or private endpoints with an internal CA.
        """
        self.location = location
        self.identity = identity
        self.retry = retry or RetrySettings()
        self.url = location.url
        self._root = location.root
        self._fs = FileSystemClient(
            location.account_url,
            location.filesystem,
            credential=identity.credential,
            retry_policy=BackoffRetryPolicy(self.retry),
            connection_timeout=self.retry.connection_timeout,
            read_timeout=self.retry.read_timeout,
            connection_verify=ca_bundle or True,
        )

    def __repr__(self) -> str:
        return f"OneLakeStorage({self.url!r}, identity={self.identity.description!r})"

    def close(self) -> None:
        """Close the HTTP connection pool (the identity is left to its owner)."""
        self._fs.close()

    def __enter__(self) -> OneLakeStorage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- Storage interface ------------------------------------------------------------------------

    def read_bytes(self, path: str) -> bytes:
        """Download the whole file (through the Blob endpoint, as the SDK does)."""
        full = self._full(path)
        with self._call("read", path):
            try:
                data: bytes = self._fs.get_file_client(full).download_file().readall()
            except ResourceNotFoundError as err:
                self._raise_missing(err, path)
            return data

    def create(self, path: str, data: bytes) -> None:
        """Upload to a ``_tmp_`` file, then rename it into place with ``If-None-Match: *``."""
        self._write(path, data, overwrite=False, operation="create")

    def replace(self, path: str, data: bytes) -> None:
        """Upload to a ``_tmp_`` file, then rename it over ``path``: readers see old or new, never half."""
        self._write(path, data, overwrite=True, operation="replace")

    def rename_new(self, source: str, destination: str) -> None:
        """Rename with ``If-None-Match: *``; the source's size and MD5 are read first to recognise a lost answer."""
        src = self._full(source)
        dst = self._full(destination)
        with self._call("rename_new", destination):
            fingerprint = self._fingerprint(src)
            if fingerprint is None:
                raise self._not_found(source)
            self._rename(src, dst, fingerprint, overwrite=False, source=source, destination=destination)

    def size(self, path: str) -> int | None:
        """Read the size from the path's properties (0 for a directory)."""
        full = self._full(path)
        with self._call("size", path):
            fingerprint = self._fingerprint(full)
        return None if fingerprint is None else fingerprint.size

    def list_dir(self, path: str) -> list[FileInfo]:
        """List one folder level (List Paths, following continuation tokens)."""
        folder = self._full(path)
        with self._call("list", path):
            try:
                entries = list(self._fs.get_paths(path=folder or None, recursive=False))
            except ResourceNotFoundError as err:
                if _code(err) in _FILESYSTEM_MISSING:
                    raise
                return []
        out = [
            FileInfo(self._relative(e.name), 0 if e.is_directory else int(e.content_length or 0), bool(e.is_directory))
            for e in entries
        ]
        return sorted(out, key=lambda info: info.path)

    def delete(self, path: str) -> None:
        """Delete one file; a missing file (or a retried delete) is not an error."""
        full = self._full(path)
        if not full:
            msg = "delete needs a file path, not the storage root"
            raise ValueError(msg)
        with self._call("delete", path):
            try:
                self._fs.get_file_client(full).delete_file()
            except ResourceNotFoundError as err:
                if _code(err) in _FILESYSTEM_MISSING:
                    raise

    def delete_tree(self, path: str) -> None:
        """Delete a folder recursively in one call; at the root, delete its children instead."""
        full = self._full(path)
        with self._call("delete_tree", path):
            if not full:
                # The filesystem root cannot be deleted; empty it instead.
                for child in self.list_dir(""):
                    self.delete_tree(child.path)
                return
            try:
                self._fs.get_directory_client(full).delete_directory()
            except ResourceNotFoundError as err:
                if _code(err) in _FILESYSTEM_MISSING:
                    raise

    # -- OneLake-specific operations ----------------------------------------------------------------

    def check(self, *, create_root: bool = False, probe_write: bool = True) -> None:
        """Fail fast at start-up when the URL or the identity is wrong.

        Lists the root folder (which proves the workspace / container, the item and read access) and,
        with ``probe_write``, creates and deletes a temporary file (which proves write access, so a
        Viewer-only identity is caught before the first batch instead of after it).

        Args:
            create_root: Create the root folder when missing (for checkpoint / ledger folders); the
                landing zone itself must already exist.
            probe_write: Also prove write access.

        Raises:
            StorageNotFound: The filesystem, item or root folder does not exist.
            StorageAccessDenied: The identity may not read (or, with ``probe_write``, write) here.
            StorageUnavailable: The service did not answer.
        """
        with self._call("check", ""):
            try:
                next(iter(self._fs.get_paths(path=self._root or None, recursive=False, max_results=1)), None)
            except ResourceNotFoundError as err:
                if _code(err) in _FILESYSTEM_MISSING or not create_root:
                    raise
                self._fs.get_directory_client(self._root).create_directory()
            if probe_write:
                probe = join(self._root, f"{TEMP_PREFIX}probe_{uuid.uuid4().hex}.part")
                self._fs.get_file_client(probe).create_file()
                self._discard(probe)

    def cleanup_temporary(self, prefix: str = "", *, older_than: timedelta | None = None) -> list[str]:
        """Delete ``_tmp_*`` files a crashed upload left under folder ``prefix`` (recursively).

        Called on start, when no upload of this connector is in flight. ``older_than`` protects uploads
        of another instance still running (e.g. during a rolling restart).

        Returns:
            The deleted paths, relative to the root.
        """
        folder = self._full(prefix)
        cutoff = None if older_than is None else datetime.now(UTC) - older_than
        deleted: list[str] = []
        with self._call("cleanup_temporary", prefix):
            try:
                entries = list(self._fs.get_paths(path=folder or None, recursive=True))
            except ResourceNotFoundError as err:
                if _code(err) in _FILESYSTEM_MISSING:
                    raise
                return []
            for entry in entries:
                name = str(entry.name)
                if entry.is_directory or not name.rsplit("/", 1)[-1].startswith(TEMP_PREFIX):
                    continue
                modified = entry.last_modified
                if modified is not None and modified.tzinfo is None:
                    modified = modified.replace(tzinfo=UTC)  # the listing's RFC 1123 dates are GMT
                if cutoff is not None and modified is not None and modified > cutoff:
                    continue
                self._discard(name)
                deleted.append(self._relative(name))
        if deleted:
            _LOG.info("deleted %d stale temporary file(s) under %s/%s", len(deleted), self.url, prefix)
        return deleted

    def acquire_lease(self, path: str, holder: WriterIdentity, *, duration_s: int = LEASE_DURATION_S) -> OneLakeLease:
        """Take a blob lease on the file ``path`` (created if missing) and record ``holder`` in its metadata.

        The lease lasts ``duration_s`` and is renewed by a daemon thread every third of it, so it ends
        within ``duration_s`` of the process dying without a release. The holder is written as the
        file's metadata under the lease (a write other instances cannot make), and read back by an
        instance that is refused, to name the holder.

        Raises:
            WriterFenced: Another instance holds the lease.
        """
        full = self._full(path)
        if not full:
            msg = "acquire_lease needs a file path, not the storage root"
            raise ValueError(msg)
        client = self._fs.get_file_client(full)
        with self._call("acquire_lease", path):
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
                raise self._held_elsewhere(client, path, _code(err)) from None
            try:
                client.set_metadata(holder.as_fields(), lease=lease)
            except BaseException:
                # Not started as the writer: give the lease back rather than block the next start for a minute.
                with contextlib.suppress(AzureError):
                    lease.release()
                raise
        _LOG.info("holding the writer lease on %s as %s", self._display(path), holder.describe())
        return OneLakeLease(self._display(path), client, lease, holder, duration_s, requested)

    def _held_elsewhere(self, client: DataLakeFileClient, path: str, code: str) -> WriterFenced:
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
        return WriterFenced(self._display(path), who, reason)

    # -- internals ----------------------------------------------------------------------------------

    def _write(self, path: str, data: bytes, *, overwrite: bool, operation: str) -> None:
        full = self._full(path)
        if not full:
            msg = f"{operation} needs a file path, not the storage root"
            raise ValueError(msg)
        parent = full.rpartition("/")[0]
        temp = join(parent, f"{TEMP_PREFIX}{uuid.uuid4().hex}.part")
        fingerprint = _Fingerprint(len(data), hashlib.md5(data, usedforsecurity=False).digest())
        with self._call(operation, path):
            try:
                self._upload(temp, data, fingerprint)
                self._rename(temp, full, fingerprint, overwrite=overwrite, source=None, destination=path)
            except BaseException as err:
                # When the service is down, a full retry budget here would double the time to report
                # the real error: try once, and leave the rest to cleanup_temporary.
                self._discard(temp, retries=1 if _is_transient(err) else None)
                raise

    def _upload(self, full: str, data: bytes, fingerprint: _Fingerprint) -> None:
        """Write ``data`` to ``full`` (a temporary path) and commit it with its MD5.

        Every step is safe to retry: create overwrites our own temporary file, appends are addressed
        by position, and a flush at the final position commits the same bytes again.
        """
        client = self._fs.get_file_client(full)
        client.create_file()
        view = memoryview(data)
        for offset in range(0, len(data), _APPEND_CHUNK):
            chunk = view[offset : offset + _APPEND_CHUNK].tobytes() if len(data) > _APPEND_CHUNK else data
            # validate_content sends the chunk's MD5 so the service rejects a corrupted transfer.
            client.append_data(chunk, offset=offset, length=len(chunk), validate_content=True)
        try:
            md5 = ContentSettings(content_md5=bytearray(fingerprint.md5 or b""))
            client.flush_data(len(data), content_settings=md5)
        except (HttpResponseError, ResourceModifiedError) as err:
            # A flush whose first attempt committed but whose answer was lost can be refused on retry;
            # the file then already holds exactly our bytes.
            if err.status_code not in {400, 409, 412} or self._fingerprint(full) != fingerprint:
                raise

    def _rename(
        self,
        src: str,
        dst: str,
        fingerprint: _Fingerprint,
        *,
        overwrite: bool,
        source: str | None,
        destination: str,
    ) -> None:
        """Move ``src`` onto ``dst`` (full paths); without ``overwrite`` never replace an existing file."""
        # IfMissing alone sends If-None-Match: *; an etag keyword here would leak into the transport.
        conditions: dict[str, Any] = {} if overwrite else {"match_condition": MatchConditions.IfMissing}
        client = self._fs.get_file_client(src)
        new_name = f"{self.location.filesystem}/{dst}"
        created_parent = False
        while True:
            try:
                client.rename_file(new_name, **conditions)
                return
            except (ResourceExistsError, ResourceModifiedError) as err:
                # 409 PathAlreadyExists (412 on some endpoints): the destination is there. If our source
                # is gone and the destination holds our bytes, an earlier attempt whose answer was lost
                # did the move; otherwise it is a real conflict.
                if err.status_code not in {409, 412} or overwrite:
                    raise
                if self._landed(src, dst, fingerprint):
                    return
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), self._display(destination)) from None
            except ResourceNotFoundError as err:
                code = _code(err)
                if code == _PARENT_MISSING and not created_parent:
                    self._fs.get_directory_client(dst.rpartition("/")[0]).create_directory()
                    created_parent = True
                    continue
                if code in _FILESYSTEM_MISSING:
                    raise
                if self._landed(src, dst, fingerprint):
                    return
                if source is None:
                    msg = f"temporary upload for {self._display(destination)} vanished before it was renamed"
                    raise StorageError(msg, path=destination, operation="rename") from None
                raise self._not_found(source) from None

    def _landed(self, src: str, dst: str, fingerprint: _Fingerprint) -> bool:
        """Whether a move of ``src`` (with ``fingerprint``) to ``dst`` has already happened."""
        if self._fingerprint(src) is not None:
            return False
        found = self._fingerprint(dst)
        if found is None or found.size != fingerprint.size:
            return False
        return fingerprint.md5 is None or found.md5 is None or found.md5 == fingerprint.md5

    def _fingerprint(self, full: str) -> _Fingerprint | None:
        try:
            props = self._fs.get_file_client(full).get_file_properties()
        except ResourceNotFoundError as err:
            if _code(err) in _FILESYSTEM_MISSING:
                raise
            return None
        md5 = props.content_settings.content_md5
        return _Fingerprint(int(props.size or 0), bytes(md5) if md5 else None)

    def _discard(self, full: str, retries: int | None = None) -> None:
        """Delete a temporary file, best effort: ``cleanup_temporary`` catches what this misses."""
        options: dict[str, Any] = {} if retries is None else {"retry_total": retries}
        try:
            self._fs.get_file_client(full).delete_file(**options)
        except (AzureError, OSError) as err:
            if not isinstance(err, ResourceNotFoundError):
                where = self._display(self._relative(full))
                _LOG.warning("could not delete temporary file %s: %s", where, type(err).__name__)

    def _full(self, path: str) -> str:
        rel = path.strip("/")
        parts = [p for p in rel.split("/") if p]
        if any(p in {".", ".."} for p in parts):
            msg = f"path {path!r} escapes the storage root {self.url}"
            raise ValueError(msg)
        return join(self._root, "/".join(parts))

    def _relative(self, full: str) -> str:
        if not self._root:
            return full
        return full[len(self._root) + 1 :] if full.startswith(self._root + "/") else full

    def _display(self, path: str) -> str:
        return f"{self.url}/{path}" if path else self.url

    def _not_found(self, path: str) -> FileNotFoundError:
        return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), self._display(path))

    def _raise_missing(self, err: ResourceNotFoundError, path: str) -> NoReturn:
        if _code(err) in _FILESYSTEM_MISSING:
            raise err
        raise self._not_found(path) from None

    @contextmanager
    def _call(self, operation: str, path: str) -> Iterator[None]:
        """Turn SDK errors escaping ``operation`` into the connector's storage errors."""
        try:
            yield
        except AzureError as err:
            raise self._translate(err, operation, path) from err

    def _translate(self, err: AzureError, operation: str, path: str) -> StorageError:
        where = self._display(path)
        status = getattr(err, "status_code", None)
        code = _code(err)
        detail = f"HTTP {status} {code}".strip() if status else type(err).__name__
        if isinstance(err, ClientAuthenticationError) and status is None:
            # No HTTP status: the credential could not produce a token (bad secret, no managed
            # identity, unreadable token file). azure-identity messages name the cause, not the secret.
            reason = _first_line(str(err.message))
            msg = f"{operation} of {where}: could not get a token with credential {self.identity.description}: {reason}"
            return StorageAccessDenied(msg, path=path, operation=operation)
        if status in {401, 403}:
            msg = (
                f"access denied ({detail}) for {operation} of {where} using credential "
                f"{self.identity.description}. {self._role_hint()}"
            )
            return StorageAccessDenied(msg, path=path, operation=operation)
        if status == 404:
            what = "workspace" if self.location.kind == "onelake" else "filesystem (container)"
            if code not in _FILESYSTEM_MISSING:
                what = "item or folder" if self.location.kind == "onelake" else "folder"
            msg = f"{what} not found ({detail}) for {operation} of {where}. {self._url_hint()}"
            return StorageNotFound(msg, path=path, operation=operation)
        if status in TRANSIENT_STATUSES or isinstance(err, (ServiceRequestError, ServiceResponseError)):
            msg = (
                f"{operation} of {where} still failing after {self.retry.max_retries} retries ({detail}); "
                "the service is throttling or unavailable"
            )
            return StorageUnavailable(msg, path=path, operation=operation)
        msg = f"{operation} of {where} failed ({detail}): {_first_line(str(getattr(err, 'message', '')))}"
        return StorageError(msg, path=path, operation=operation)

    def _role_hint(self) -> str:
        if self.location.kind == "onelake":
            return (
                "Give this identity the Contributor role (or higher) on the Fabric workspace, and check "
                "that service principals may use Fabric APIs in the tenant settings."
            )
        return "Give this identity 'Storage Blob Data Contributor' on the container or storage account."

    def _url_hint(self) -> str:
        if self.location.kind == "onelake":
            return (
                "Check the URL: copy the landing zone URL from the mirrored database's Home page "
                "(https://onelake.dfs.fabric.microsoft.com/<workspace>/<item>/Files/LandingZone); workspace "
                "and item may be GUIDs or names like Sales.MountedRelationalDatabase."
            )
        return "Check the URL: storage account, container and folder (the account needs hierarchical namespace)."


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
                    self._lost = f"HTTP {err.status_code} {_code(err)}".strip()
                _LOG.error("lost the writer lease on %s: %s; publishing stops", self.location, self._lost)
                return
            _LOG.warning("could not renew the writer lease on %s: %s", self.location, _describe_failure(err))
        except AzureError as err:
            _LOG.warning("could not renew the writer lease on %s: %s", self.location, _describe_failure(err))
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
            _LOG.warning("could not release the writer lease on %s: %s", self.location, _describe_failure(err))

    def _keep_alive(self) -> None:
        interval = self.duration_s / 3
        while not self._stop.wait(interval):
            self.renew()
            with self._lock:
                if self._lost is not None:
                    return


def _describe_failure(err: AzureError) -> str:
    """Status and error code, or the exception type: enough to diagnose, never a request or token."""
    status = getattr(err, "status_code", None)
    return f"HTTP {status} {_code(err)}".strip() if status else type(err).__name__


def _is_transient(err: BaseException) -> bool:
    """Whether an SDK error is the kind retries are for (and so the service is struggling)."""
    if isinstance(err, (ServiceRequestError, ServiceResponseError)):
        return True
    return isinstance(err, HttpResponseError) and err.status_code in TRANSIENT_STATUSES


def _code(err: AzureError) -> str:
    """The service's error code (``x-ms-error-code``), as a plain string."""
    code = getattr(err, "error_code", None)
    if code is None:
        response = getattr(err, "response", None)
        code = response.headers.get("x-ms-error-code") if response is not None else None
    return str(getattr(code, "value", code) or "")


def _first_line(text: str, limit: int = 300) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:limit]


def open_onelake(
    url: str, credential: CredentialConfig | str = "default", retry: RetrySettings | None = None
) -> OneLakeStorage:
    """Open the OneLake / ADLS Gen2 folder at ``url`` with the identity ``credential`` describes.

    Args:
        url: A landing-zone or ADLS Gen2 URL (see ``parse_location``).
        credential: A full credential config, or just its kind (``default``, ``managed_identity``, …)
            with everything else taken from the ``AZURE_*`` environment variables.
        retry: Backoff and timeout settings; production defaults when omitted.

    Raises:
        ValueError: The URL or the credential settings are invalid.
    """
    if isinstance(credential, CredentialConfig):
        config = credential
    else:
        config = CredentialConfig.model_validate({"kind": credential})
    return OneLakeStorage(parse_location(url), build_credential(config), retry)
