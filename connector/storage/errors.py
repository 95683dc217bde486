"""Errors a remote storage backend raises when the problem is not about one file.

Missing or already-present files keep the builtin ``FileNotFoundError`` / ``FileExistsError`` of the
``Storage`` contract, because callers branch on them. These classes are for everything else: the
identity is not allowed in, the workspace or item does not exist, or the service stayed unavailable
after every retry. The retry decision lives in the type (a ``TransientError`` or not), as in dlt, so callers
never parse messages.

They cross Spark's process boundary, so they pickle, and they carry only strings: never a response
object, a request (which holds the bearer token) or a credential.
"""

from __future__ import annotations

from connector.errors import ConfigError, ConnectorError, TransientError


class StorageError(ConnectorError):
    """A storage operation failed for a reason that is not a missing or existing file.

    A ``ConnectorError``, so the command line prints the message (which names the path and, for access
    problems, the identity) as one ``error:`` line instead of a traceback.

    Attributes:
        path: The storage path (relative to the backend's root) the operation was about, or ``""``.
        operation: A short name of the operation (``create``, ``rename_new``, …), or ``""``.
    """

    @property
    def transient(self) -> bool:
        """Whether retrying later may succeed (a ``TransientError``); ``False`` means a person has to act."""
        return isinstance(self, TransientError)

    def __init__(self, message: str, *, path: str = "", operation: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.operation = operation

    def __reduce__(self) -> tuple[object, ...]:
        # Exception's default reduce drops keyword-only arguments; rebuild them explicitly so a
        # worker's error arrives on the driver unchanged.
        return (_rebuild, (type(self), self.message, self.path, self.operation))

    def __str__(self) -> str:
        return self.message


class StorageAccessDenied(StorageError):
    """The service refused the identity (HTTP 401/403), or no token could be obtained for it.

    Retrying does not help: a role assignment, a secret or a federated credential has to change.
    """


class StorageNotFound(StorageError):
    """The filesystem (workspace / container) or the item / root folder does not exist.

    Almost always a wrong URL, so the message carries a hint to check it; retrying does not help.
    """


class StorageUnavailable(StorageError, TransientError):
    """The service kept answering 429/5xx, timing out or dropping connections until retries ran out.

    The operation may succeed later: the streaming job retries the batch, then lets the job restart.
    """


class InvalidStorageURL(ConfigError, ValueError):
    """A storage URL has no form the backends accept: garbage, no host, no workspace or container, a SAS query.

    A ``ConfigError`` (the command line prints it as one ``error:`` line and exits 2), and a ``ValueError``
    for callers of ``parse_location`` that catch that. The message names the URL without its query.
    """


class InvalidCredential(ConfigError, ValueError):
    """The credential settings are incomplete (a missing tenant, client id, secret or certificate).

    Raised when the storage is opened, before any token is asked for; a ``ConfigError`` like
    ``InvalidStorageURL``, so every command reports it as one ``error:`` line.
    """


def _rebuild(cls: type[StorageError], message: str, path: str, operation: str) -> StorageError:
    """Recreate a pickled storage error (module-level so pickle can import it)."""
    return cls(message, path=path, operation=operation)
