"""What an Azure SDK error means for the connector: a log-safe description, and the storage error to raise.

``describe_failure`` and ``error_code`` read an error without ever showing a request or a token (the lease uses
them too). ``ErrorTranslator`` turns an SDK error escaping a storage operation into ``StorageAccessDenied``,
``StorageNotFound``, ``StorageUnavailable`` or ``StorageError``, naming the path and the identity, with a hint fit
for OneLake or ADLS Gen2.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ServiceRequestError,
    ServiceResponseError,
)

from connector.errors import first_line
from connector.storage.errors import StorageAccessDenied, StorageError, StorageNotFound, StorageUnavailable
from connector.storage.onelake.location import LocationKind
from connector.storage.retry import TRANSIENT_STATUSES

#: Error codes (x-ms-error-code) that mean the container / workspace itself is missing, as opposed to a path
#: inside it. Blob-endpoint calls say ContainerNotFound, DFS calls FilesystemNotFound.
FILESYSTEM_MISSING = frozenset({"FilesystemNotFound", "ContainerNotFound"})


def describe_failure(err: AzureError) -> str:
    """Status and error code, or the exception type: enough to diagnose, never a request or token."""
    status = getattr(err, "status_code", None)
    return f"HTTP {status} {error_code(err)}".strip() if status else type(err).__name__


def error_code(err: AzureError) -> str:
    """The service's error code (``x-ms-error-code``), as a plain string."""
    code = getattr(err, "error_code", None)
    if code is None:
        response = getattr(err, "response", None)
        code = response.headers.get("x-ms-error-code") if response is not None else None
    return str(getattr(code, "value", code) or "")


def is_transient(err: BaseException) -> bool:
    """Whether an SDK error is the kind retries are for (and so the service is struggling)."""
    if isinstance(err, (ServiceRequestError, ServiceResponseError)):
        return True
    return isinstance(err, HttpResponseError) and err.status_code in TRANSIENT_STATUSES


@dataclass(frozen=True)
class ErrorTranslator:
    """Turns the SDK errors of one storage root into the connector's storage errors, with something to act on.

    Attributes:
        url: The root's URL, safe to log; paths are shown under it.
        kind: ``onelake``, ``adls`` or ``loopback``: which role and URL hints apply.
        identity: The identity's log-safe description.
        max_retries: How often a transient failure was retried before it is reported.
    """

    url: str
    kind: LocationKind
    identity: str
    max_retries: int

    @contextmanager
    def call(self, operation: str, path: str) -> Iterator[None]:
        """Turn SDK errors escaping ``operation`` on ``path`` into the connector's storage errors."""
        try:
            yield
        except AzureError as err:
            raise self.translate(err, operation, path) from err

    def translate(self, err: AzureError, operation: str, path: str) -> StorageError:
        """The storage error ``err`` means for ``operation`` on ``path`` (relative to the root)."""
        where = f"{self.url}/{path}" if path else self.url
        status = getattr(err, "status_code", None)
        code = error_code(err)
        detail = f"HTTP {status} {code}".strip() if status else type(err).__name__
        if isinstance(err, ClientAuthenticationError) and status is None:
            # No HTTP status: the credential could not produce a token (bad secret, no managed
            # identity, unreadable token file). azure-identity messages name the cause, not the secret.
            reason = first_line(str(err.message))
            msg = f"{operation} of {where}: could not get a token with credential {self.identity}: {reason}"
            return StorageAccessDenied(msg, path=path, operation=operation)
        if status in {401, 403}:
            msg = (
                f"access denied ({detail}) for {operation} of {where} using credential "
                f"{self.identity}. {self.role_hint()}"
            )
            return StorageAccessDenied(msg, path=path, operation=operation)
        if status == 404:
            what = "workspace" if self.kind == "onelake" else "filesystem (container)"
            if code not in FILESYSTEM_MISSING:
                what = "item or folder" if self.kind == "onelake" else "folder"
            msg = f"{what} not found ({detail}) for {operation} of {where}. {self.url_hint()}"
            return StorageNotFound(msg, path=path, operation=operation)
        if status in TRANSIENT_STATUSES or isinstance(err, (ServiceRequestError, ServiceResponseError)):
            msg = (
                f"{operation} of {where} still failing after {self.max_retries} retries ({detail}); "
                "the service is throttling or unavailable"
            )
            return StorageUnavailable(msg, path=path, operation=operation)
        msg = f"{operation} of {where} failed ({detail}): {first_line(str(getattr(err, 'message', '')))}"
        return StorageError(msg, path=path, operation=operation)

    def role_hint(self) -> str:
        """Which role the identity needs, in Fabric's or Azure Storage's words."""
        if self.kind == "onelake":
            return (
                "Give this identity the Contributor role (or higher) on the Fabric workspace, and check "
                "that service principals may use Fabric APIs in the tenant settings."
            )
        return "Give this identity 'Storage Blob Data Contributor' on the container or storage account."

    def url_hint(self) -> str:
        """Where the right URL is found."""
        if self.kind == "onelake":
            return (
                "Check the URL: copy the landing zone URL from the mirrored database's Home page "
                "(https://onelake.dfs.fabric.microsoft.com/<workspace>/<item>/Files/LandingZone); workspace "
                "and item may be GUIDs or names like Sales.MountedRelationalDatabase."
            )
        return "Check the URL: storage account, container and folder (the account needs hierarchical namespace)."
