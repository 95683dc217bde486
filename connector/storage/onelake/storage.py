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

Beside it: ``onelake_location`` parses the URL, ``retry`` is the HTTP retry policy, and
``onelake_lease`` keeps the writer lease that ``acquire_lease`` takes.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

import requests
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
from azure.core.pipeline.transport import RequestsTransport
from azure.storage.filedatalake import (
    ContentSettings,
    DataLakeFileClient,
    DataLakeLeaseClient,
    FileSystemClient,
)
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from connector.errors import WriterFenced
from connector.storage.azure_errors import error_code
from connector.storage.base import TEMP_PREFIX, FileInfo, Storage, WriterIdentity, join
from connector.storage.credentials import StorageIdentity, build_credential
from connector.storage.errors import (
    InvalidCredential,
    StorageAccessDenied,
    StorageError,
    StorageNotFound,
    StorageUnavailable,
)
from connector.storage.identity import CredentialConfig
from connector.storage.onelake_lease import LEASE_DURATION_S, OneLakeLease
from connector.storage.onelake_location import OneLakeLocation, parse_location
from connector.storage.retry import TRANSIENT_STATUSES, BackoffRetryPolicy, RetrySettings

_LOG = logging.getLogger(__name__)


# Error codes (x-ms-error-code) that mean the container / workspace itself is missing, as opposed to a
# path inside it. Blob-endpoint calls say ContainerNotFound, DFS calls FilesystemNotFound.
_FILESYSTEM_MISSING = frozenset({"FilesystemNotFound", "ContainerNotFound"})
_PARENT_MISSING = "RenameDestinationParentPathNotFound"

# One append carries at most this much; larger files are sent as consecutive appends before one flush.
_APPEND_CHUNK = 16 * 1024 * 1024


@dataclass(frozen=True)
class _Fingerprint:
    """What we know of a file's content: enough to recognise our own upload after a lost answer."""

    size: int
    md5: bytes | None


#: Connections kept open to OneLake: the driver renames up to ``mirror.publish_parallelism`` tables at once (16 by
#: default). The SDK's default pool keeps 10, so every request beyond them opened (and dropped) a TLS connection.
POOL_CONNECTIONS = 32


def _pooled_session() -> requests.Session:
    """A requests session keeping ``POOL_CONNECTIONS`` connections; retries are the pipeline's, not urllib3's."""
    session = requests.Session()
    no_retries = Retry(total=False, redirect=False, raise_on_status=False)
    adapter = HTTPAdapter(pool_connections=4, pool_maxsize=POOL_CONNECTIONS, max_retries=no_retries)
    for scheme in ("http://", "https://"):
        session.mount(scheme, adapter)
    return session


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
            transport=RequestsTransport(
                session=_pooled_session(),
                session_owner=True,
                connection_timeout=self.retry.connection_timeout,
                read_timeout=self.retry.read_timeout,
                connection_verify=ca_bundle or True,
            ),
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

    def write_aside(self, path: str, data: bytes) -> None:
        """Upload straight to ``path`` (create, append, flush with the MD5): no ``_tmp_`` file and no rename.

        Three round trips instead of four for every staged file. Each step is retried as ``_upload`` says; the
        name is unique to this write, so the create may replace only an earlier attempt of this same write.
        """
        full = self._full(path)
        if not full:
            msg = "write_aside needs a file path, not the storage root"
            raise ValueError(msg)
        fingerprint = _Fingerprint(len(data), hashlib.md5(data, usedforsecurity=False).digest())
        with self._call("write_aside", path):
            self._upload(full, data, fingerprint)

    def replace(self, path: str, data: bytes) -> None:
        """Upload to a ``_tmp_`` file, then rename it over ``path``: readers see old or new, never half."""
        self._write(path, data, overwrite=True, operation="replace")

    def rename_new(self, source: str, destination: str, *, size: int | None = None) -> None:
        """Rename with ``If-None-Match: *``, recognising a retry whose first answer was lost.

        Without ``size`` the source's size and MD5 are read first; with it the rename goes at once (one round
        trip per staged file less), and a lost answer shows as the source gone and the destination of that size
        (staged names are unique to one write, so nobody else moves the source).
        """
        src = self._full(source)
        dst = self._full(destination)
        with self._call("rename_new", destination):
            fingerprint = _Fingerprint(size, None) if size is not None else self._fingerprint(src)
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
                if error_code(err) in _FILESYSTEM_MISSING:
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
                if error_code(err) in _FILESYSTEM_MISSING:
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
                if error_code(err) in _FILESYSTEM_MISSING:
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
                if error_code(err) in _FILESYSTEM_MISSING or not create_root:
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
                if error_code(err) in _FILESYSTEM_MISSING:
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
                raise self._held_elsewhere(client, path, error_code(err)) from None
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
                code = error_code(err)
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
            if error_code(err) in _FILESYSTEM_MISSING:
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
        if error_code(err) in _FILESYSTEM_MISSING:
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
        code = error_code(err)
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


def _is_transient(err: BaseException) -> bool:
    """Whether an SDK error is the kind retries are for (and so the service is struggling)."""
    if isinstance(err, (ServiceRequestError, ServiceResponseError)):
        return True
    return isinstance(err, HttpResponseError) and err.status_code in TRANSIENT_STATUSES


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
        InvalidStorageURL: The URL is invalid.
        InvalidCredential: The credential settings are incomplete.
    """
    if isinstance(credential, CredentialConfig):
        config = credential
    else:
        config = CredentialConfig.model_validate({"kind": credential})
    location = parse_location(url)
    try:
        identity = build_credential(config)
    except ValueError as exc:
        raise InvalidCredential(str(exc)) from None
    return OneLakeStorage(location, identity, retry)
