"""Uploads and renames that never leave a partial or overwritten file, and retries that cannot lie.

A file is uploaded (create, append, flush with its MD5), then renamed onto its final name with
``If-None-Match: *``: the service refuses the rename when the destination exists, so a published file is never
replaced, even by a second writer. A rename is not idempotent on the wire: if its first attempt succeeded but the
answer was lost, the retry sees "destination exists" or "source missing". Both are checked against the state
(source gone, destination with our size and MD5: the file's ``Fingerprint``) and taken as success, instead of
reporting a conflict that never happened.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import uuid
from dataclasses import dataclass
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import (
    AzureError,
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
)
from azure.storage.filedatalake import ContentSettings, FileSystemClient

from connector.storage.base import TEMP_PREFIX, join
from connector.storage.errors import StorageError
from connector.storage.onelake.azure_errors import FILESYSTEM_MISSING, error_code, is_transient
from connector.storage.onelake.paths import RootedPaths

_LOG = logging.getLogger(__name__)

_PARENT_MISSING = "RenameDestinationParentPathNotFound"

# One append carries at most this much; larger files are sent as consecutive appends before one flush.
_APPEND_CHUNK = 16 * 1024 * 1024


@dataclass(frozen=True)
class Fingerprint:
    """What we know of a file's content: enough to recognise our own upload after a lost answer."""

    size: int
    md5: bytes | None

    @classmethod
    def of(cls, data: bytes) -> Fingerprint:
        """The size and MD5 of ``data``."""
        return cls(len(data), hashlib.md5(data, usedforsecurity=False).digest())


class AtomicTransfer:
    """The upload and rename steps of one filesystem, on full paths (``RootedPaths.full``).

    The caller turns SDK errors into storage errors (``ErrorTranslator.call``); this class decides which of
    them mean "already done" after a lost answer.
    """

    def __init__(self, fs: FileSystemClient, paths: RootedPaths) -> None:
        self._fs = fs
        self._paths = paths

    def write(self, full: str, data: bytes, *, overwrite: bool, destination: str) -> None:
        """Upload ``data`` to a ``_tmp_`` file beside ``full``, then rename it into place.

        Args:
            full: The final file's full path.
            data: The content.
            overwrite: Replace an existing file (checkpoint state); otherwise ``FileExistsError`` when it exists.
            destination: ``full`` relative to the root, for errors.
        """
        temp = join(full.rpartition("/")[0], f"{TEMP_PREFIX}{uuid.uuid4().hex}.part")
        fingerprint = Fingerprint.of(data)
        try:
            self.upload(temp, data, fingerprint)
            self.rename(temp, full, fingerprint, overwrite=overwrite, source=None, destination=destination)
        except BaseException as err:
            # When the service is down, a full retry budget here would double the time to report
            # the real error: try once, and leave the rest to cleanup_temporary.
            self.discard(temp, retries=1 if is_transient(err) else None)
            raise

    def upload(self, full: str, data: bytes, fingerprint: Fingerprint) -> None:
        """Write ``data`` to ``full`` and commit it with its MD5.

        Every step is safe to retry: create overwrites our own file, appends are addressed
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
            if err.status_code not in {400, 409, 412} or self.fingerprint(full) != fingerprint:
                raise

    def rename(
        self, src: str, dst: str, fingerprint: Fingerprint, *, overwrite: bool, source: str | None, destination: str
    ) -> None:
        """Move ``src`` onto ``dst`` (full paths); without ``overwrite`` never replace an existing file.

        ``source`` and ``destination`` are the same paths relative to the root, for errors (``source`` is ``None``
        for our own temporary upload).
        """
        # IfMissing alone sends If-None-Match: *; an etag keyword here would leak into the transport.
        conditions: dict[str, Any] = {} if overwrite else {"match_condition": MatchConditions.IfMissing}
        client = self._fs.get_file_client(src)
        new_name = f"{self._fs.file_system_name}/{dst}"
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
                if self.landed(src, dst, fingerprint):
                    return
                shown = self._paths.display(destination)
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), shown) from None
            except ResourceNotFoundError as err:
                code = error_code(err)
                if code == _PARENT_MISSING and not created_parent:
                    self._fs.get_directory_client(dst.rpartition("/")[0]).create_directory()
                    created_parent = True
                    continue
                if code in FILESYSTEM_MISSING:
                    raise
                if self.landed(src, dst, fingerprint):
                    return
                if source is None:
                    msg = f"temporary upload for {self._paths.display(destination)} vanished before it was renamed"
                    raise StorageError(msg, path=destination, operation="rename") from None
                raise self._paths.not_found(source) from None

    def landed(self, src: str, dst: str, fingerprint: Fingerprint) -> bool:
        """Whether a move of ``src`` (with ``fingerprint``) to ``dst`` has already happened."""
        if self.fingerprint(src) is not None:
            return False
        found = self.fingerprint(dst)
        if found is None or found.size != fingerprint.size:
            return False
        return fingerprint.md5 is None or found.md5 is None or found.md5 == fingerprint.md5

    def fingerprint(self, full: str) -> Fingerprint | None:
        """The size and MD5 of the file at ``full``; ``None`` when it does not exist."""
        try:
            props = self._fs.get_file_client(full).get_file_properties()
        except ResourceNotFoundError as err:
            if error_code(err) in FILESYSTEM_MISSING:
                raise
            return None
        md5 = props.content_settings.content_md5
        return Fingerprint(int(props.size or 0), bytes(md5) if md5 else None)

    def discard(self, full: str, retries: int | None = None) -> None:
        """Delete a temporary file, best effort: ``cleanup_temporary`` catches what this misses."""
        options: dict[str, Any] = {} if retries is None else {"retry_total": retries}
        try:
            self._fs.get_file_client(full).delete_file(**options)
        except (AzureError, OSError) as err:
            if not isinstance(err, ResourceNotFoundError):
                where = self._paths.display(self._paths.relative(full))
                _LOG.warning("could not delete temporary file %s: %s", where, type(err).__name__)
