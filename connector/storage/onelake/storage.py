"""The ``Storage`` operations of a OneLake / ADLS Gen2 folder, over the DFS API.

OneLake speaks the ADLS Gen2 API, so one backend serves the Fabric landing zone and a user's own ADLS Gen2
account. It is built on ``azure-storage-file-datalake``; the publish protocol and the failure handling are ours,
each in its own module of this package:

* **Never a partial or overwritten file**, and **retries that cannot lie** (``transfer``): ``create`` uploads to
  ``_tmp_<random>.part`` in the same folder (open mirroring ignores underscore-prefixed names), flushes it with the
  content MD5, then renames it onto the final name with ``If-None-Match: *``; a retried rename whose first answer
  was lost is recognised by the files' fingerprints. 429, 5xx, timeouts and dropped connections are retried with
  exponential backoff and jitter, honouring ``Retry-After`` (``connector.storage.retry``, set up in ``client``).
* **Fail fast with something to act on** (``azure_errors``): 401/403 raise ``StorageAccessDenied`` naming the path
  and the identity (never a secret); a missing workspace, container or item raises ``StorageNotFound`` with a hint
  to check the URL; exhausted retries raise ``StorageUnavailable``.

Reads and property look-ups go through the SDK's Blob endpoint (``onelake.blob.fabric.microsoft.com`` /
``<account>.blob.core.windows.net``), as the SDK does; OneLake supports both. ``location`` parses the URL, ``paths``
maps the root's relative paths, and ``lease`` keeps the writer lease that ``acquire_lease`` takes.
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime, timedelta

from azure.core.exceptions import ResourceNotFoundError

from connector.storage import CredentialKind
from connector.storage.base import TEMP_PREFIX, FileInfo, Storage, WriterIdentity, join
from connector.storage.credentials import StorageIdentity, build_credential
from connector.storage.errors import InvalidCredential
from connector.storage.identity import CredentialConfig
from connector.storage.onelake.azure_errors import FILESYSTEM_MISSING, ErrorTranslator, error_code
from connector.storage.onelake.client import filesystem_client
from connector.storage.onelake.lease import LEASE_DURATION_S, OneLakeLease, take_lease
from connector.storage.onelake.location import OneLakeLocation
from connector.storage.onelake.paths import RootedPaths
from connector.storage.onelake.transfer import AtomicTransfer, Fingerprint
from connector.storage.retry import RetrySettings

_LOG = logging.getLogger(__name__)


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
        self._fs = filesystem_client(location, identity.credential, self.retry, ca_bundle)
        self._paths = RootedPaths(location.url, location.root)
        self._errors = ErrorTranslator(location.url, location.kind, identity.description, self.retry.max_retries)
        self._transfer = AtomicTransfer(self._fs, self._paths)

    def __repr__(self) -> str:
        return f"OneLakeStorage({self.url!r}, identity={self.identity.description!r})"

    def close(self) -> None:
        """Close the HTTP connection pool (the identity is left to its owner)."""
        self._fs.close()

    # -- Storage interface ------------------------------------------------------------------------

    def read_bytes(self, path: str) -> bytes:
        """Download the whole file (through the Blob endpoint, as the SDK does)."""
        full = self._paths.full(path)
        with self._errors.call("read", path):
            try:
                data: bytes = self._fs.get_file_client(full).download_file().readall()
            except ResourceNotFoundError as err:
                if error_code(err) in FILESYSTEM_MISSING:
                    raise
                raise self._paths.not_found(path) from None
            return data

    def create(self, path: str, data: bytes) -> None:
        """Upload to a ``_tmp_`` file, then rename it into place with ``If-None-Match: *``."""
        full = self._paths.file(path, "create")
        with self._errors.call("create", path):
            self._transfer.write(full, data, overwrite=False, destination=path)

    def write_aside(self, path: str, data: bytes) -> None:
        """Upload straight to ``path`` (create, append, flush with the MD5): no ``_tmp_`` file and no rename.

        Three round trips instead of four for every staged file. Each step is retried as ``upload`` says; the
        name is unique to this write, so the create may replace only an earlier attempt of this same write.
        """
        full = self._paths.file(path, "write_aside")
        with self._errors.call("write_aside", path):
            self._transfer.upload(full, data, Fingerprint.of(data))

    def replace(self, path: str, data: bytes) -> None:
        """Upload to a ``_tmp_`` file, then rename it over ``path``: readers see old or new, never half."""
        full = self._paths.file(path, "replace")
        with self._errors.call("replace", path):
            self._transfer.write(full, data, overwrite=True, destination=path)

    def rename_new(self, source: str, destination: str, *, size: int | None = None) -> None:
        """Rename with ``If-None-Match: *``, recognising a retry whose first answer was lost.

        Without ``size`` the source's size and MD5 are read first; with it the rename goes at once (one round
        trip per staged file less), and a lost answer shows as the source gone and the destination of that size
        (staged names are unique to one write, so nobody else moves the source).
        """
        src = self._paths.full(source)
        dst = self._paths.full(destination)
        with self._errors.call("rename_new", destination):
            fingerprint = Fingerprint(size, None) if size is not None else self._transfer.fingerprint(src)
            if fingerprint is None:
                raise self._paths.not_found(source)
            self._transfer.rename(src, dst, fingerprint, overwrite=False, source=source, destination=destination)

    def size(self, path: str) -> int | None:
        """Read the size from the path's properties (0 for a directory)."""
        full = self._paths.full(path)
        with self._errors.call("size", path):
            fingerprint = self._transfer.fingerprint(full)
        return None if fingerprint is None else fingerprint.size

    def list_dir(self, path: str) -> list[FileInfo]:
        """List one folder level (List Paths, following continuation tokens)."""
        folder = self._paths.full(path)
        with self._errors.call("list", path):
            try:
                entries = list(self._fs.get_paths(path=folder or None, recursive=False))
            except ResourceNotFoundError as err:
                if error_code(err) in FILESYSTEM_MISSING:
                    raise
                return []
        out = [
            FileInfo(
                self._paths.relative(e.name), 0 if e.is_directory else int(e.content_length or 0), bool(e.is_directory)
            )
            for e in entries
        ]
        return sorted(out, key=lambda info: info.path)

    def delete(self, path: str) -> None:
        """Delete one file; a missing file (or a retried delete) is not an error."""
        full = self._paths.file(path, "delete")
        with self._errors.call("delete", path):
            try:
                self._fs.get_file_client(full).delete_file()
            except ResourceNotFoundError as err:
                if error_code(err) in FILESYSTEM_MISSING:
                    raise

    def delete_tree(self, path: str) -> None:
        """Delete a folder recursively in one call; at the root, delete its children instead."""
        full = self._paths.full(path)
        with self._errors.call("delete_tree", path):
            if not full:
                # The filesystem root cannot be deleted; empty it instead.
                for child in self.list_dir(""):
                    self.delete_tree(child.path)
                return
            try:
                self._fs.get_directory_client(full).delete_directory()
            except ResourceNotFoundError as err:
                if error_code(err) in FILESYSTEM_MISSING:
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
        root = self.location.root
        with self._errors.call("check", ""):
            try:
                next(iter(self._fs.get_paths(path=root or None, recursive=False, max_results=1)), None)
            except ResourceNotFoundError as err:
                if error_code(err) in FILESYSTEM_MISSING or not create_root:
                    raise
                self._fs.get_directory_client(root).create_directory()
            if probe_write:
                probe = join(root, f"{TEMP_PREFIX}probe_{uuid.uuid4().hex}.part")
                self._fs.get_file_client(probe).create_file()
                self._transfer.discard(probe)

    def cleanup_temporary(self, prefix: str = "", *, older_than: timedelta | None = None) -> list[str]:
        """Delete ``_tmp_*`` files a crashed upload left under folder ``prefix`` (recursively).

        Called on start, when no upload of this connector is in flight. ``older_than`` protects uploads
        of another instance still running (e.g. during a rolling restart).

        Returns:
            The deleted paths, relative to the root.
        """
        folder = self._paths.full(prefix)
        cutoff = None if older_than is None else datetime.now(UTC) - older_than
        deleted: list[str] = []
        with self._errors.call("cleanup_temporary", prefix):
            try:
                entries = list(self._fs.get_paths(path=folder or None, recursive=True))
            except ResourceNotFoundError as err:
                if error_code(err) in FILESYSTEM_MISSING:
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
                self._transfer.discard(name)
                deleted.append(self._paths.relative(name))
        if deleted:
            _LOG.info("deleted %d stale temporary file(s) under %s/%s", len(deleted), self.url, prefix)
        return deleted

    def acquire_lease(self, path: str, holder: WriterIdentity, *, duration_s: int = LEASE_DURATION_S) -> OneLakeLease:
        """Take a blob lease on the file ``path`` (created if missing) and record ``holder`` in it (``take_lease``).

        Raises:
            WriterFenced: Another instance holds the lease.
        """
        full = self._paths.file(path, "acquire_lease")
        with self._errors.call("acquire_lease", path):
            lease = take_lease(self._fs.get_file_client(full), self._paths.display(path), holder, duration_s)
        _LOG.info("holding the writer lease on %s as %s", self._paths.display(path), holder.describe())
        return lease


def open_onelake(
    location: OneLakeLocation,
    credential: CredentialConfig | CredentialKind = "default",
    retry: RetrySettings | None = None,
) -> OneLakeStorage:
    """Open the OneLake / ADLS Gen2 folder at ``location`` with the identity ``credential`` describes.

    Args:
        location: The folder's parsed URL (``StorageLocation.address``, parsed once where the setting is read).
        credential: A full credential config, or just its kind (``default``, ``managed_identity``, …)
            with everything else taken from the ``AZURE_*`` environment variables.
        retry: Backoff and timeout settings; production defaults when omitted.

    Raises:
        InvalidCredential: The credential settings are incomplete.
    """
    try:
        identity = build_credential(CredentialConfig.of(credential))
    except ValueError as exc:
        raise InvalidCredential(str(exc)) from None
    return OneLakeStorage(location, identity, retry)
