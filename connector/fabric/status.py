"""Fabric's own per-table status of the open-mirrored database: what mirroring made of our files.

The connector knows what it published; only Fabric knows whether it applied it. This module reads Fabric's
view, one table per entry, for the ``cdc_mirror_fabric_*`` metrics, the ``tables`` command and table
rebuilds (which wait until Fabric no longer lists a table whose folder was deleted). Reading is best
effort: a status that cannot be read is ``None`` and one warning naming the URL, never an exception, so
neither the streaming job nor a command fails because Fabric's status API does.

Two sources, chosen by ``fabric_status.kind``:

``rest``: the Fabric REST API, ``POST {api}/v1/workspaces/{workspaceId}/mirroredDatabases/
{mirroredDatabaseId}/getTablesMirroringStatus`` (optionally ``?continuationToken=...``), with an Entra
token for ``https://api.fabric.microsoft.com/.default``. Shapes relied on, from Microsoft's REST reference
("Mirroring - Get Tables Mirroring Status", learn.microsoft.com/rest/api/fabric/mirroreddatabase/mirroring)
and its OpenAPI source (github.com/microsoft/fabric-rest-api-specs, ``mirroredDatabase/definitions.json``
and ``common/definitions.json``)::

    200 TablesMirroringStatusResponse = {
        "data": [TableMirroringStatusResponse, ...],       # required
        "continuationToken": str, "continuationUri": str,  # absent on the last page
    }
    TableMirroringStatusResponse = {
        "sourceObjectType": "Table" | "View",
        "sourceSchemaName": str, "sourceTableName": str,
        "status": "Initialized" | "Snapshotting" | "Replicating" | "Reseeding" | "Stopped" | "Failed",
                  # "additional types may be added over time": any string is kept as it is
        "metrics": {"processedBytes": int64, "processedRows": int64,
                    "lastSyncDateTime": "date-time", "lastSyncLatencyInSeconds": int32 (optional)},
        "error": ErrorResponse (optional, "set if error happens in mirroring for this table"),
    }
    ErrorResponse = {"errorCode": str, "message": str, "requestId"?: uuid, "moreDetails"?: [...],
                     "isRetriable"?: bool}   # also the body of every non-200 answer; 429 adds Retry-After

The database-wide ``POST .../getMirroringStatus`` ("Mirroring - Get Mirroring Status", same reference) is read
beside it (``FabricStatusReader.database``): ``200 {"status": "Initializing" | "Initialized" | "Starting" |
"Running" | "Paused" | "Stopping" | "Stopped", "error"?: ErrorResponse}``. Per-table state cannot tell a
stopped or paused database from tables that are merely slow: files pile up unread either way. Only
``Running`` without an error counts as up (``cdc_mirror_fabric_database_up``, ``/readyz``).

``monitoring``: the status files mirroring writes into the mirrored database's OneLake item, beside the
landing zone: ``<item>/Files/Monitoring/replicator.json`` (the database) and
``<item>/Files/Monitoring/tables.json`` (the tables). Provenance: Microsoft's open-mirroring Python SDK
(github.com/microsoft/fabric-toolbox, ``tools/OpenMirroringPythonSDK/openmirroring_operations.py``,
``get_mirrored_database_status`` and ``get_table_status``), which reads exactly these two files and
filters ``tables.json`` as ``{"tables": [{"sourceSchemaName": ..., "sourceTableName": ..., ...}]}``.
That much is confirmed; the other fields of an entry are not documented anywhere we found, so an entry is
read with the REST API's field names (``status``, ``metrics.processedRows`` …, ``error``) and whatever is
absent stays ``None`` (a missing ``status`` reads as ``Unknown``). The fields of ``replicator.json`` are not
documented at all, so this source reports no database status (``database()`` is ``None``).

Table ids are ours (``connector.landing_zone.TableRef.id``): ``schema.table``, or ``table`` for an entry
without a schema. A table published without a schema folder may be listed by Fabric under the mirrored
database's default schema (``dbo``); this module does not guess, it reports what Fabric says.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx
import orjson
from azure.core.exceptions import AzureError
from pydantic import SecretStr

from connector.errors import ConfigError, ConnectorError, first_line
from connector.landing_zone.layout import TableRef
from connector.secrets import resolve_secret_references
from connector.storage import CredentialKind, Storage
from connector.storage.credentials import build_credential
from connector.storage.errors import StorageError
from connector.storage.identity import CredentialConfig
from connector.storage.location import StorageLocation

if TYPE_CHECKING:
    from connector.config import ConnectorSettings

log = logging.getLogger(__name__)

#: The one token scope the REST reader asks for.
FABRIC_API_SCOPE = "https://api.fabric.microsoft.com/.default"
#: Table states that mean Fabric stopped applying the table's files (compared case-insensitively).
FAILED_STATES = frozenset({"failed", "error"})
#: The table file of the monitoring folder.
MONITORING_TABLES_FILE = "tables.json"
#: A paging loop longer than this is a broken service, not a big database.
MAX_PAGES = 1000

#: Returns a bearer token for the REST API; raises ``FabricStatusUnreadable`` when there is none.
TokenSource = Callable[[], str]


@dataclass(frozen=True)
class FabricTableStatus:
    """One table as Fabric reports it.

    Attributes:
        table: Our table id: ``schema.table``, or ``table`` without a schema.
        state: Fabric's state as reported (``Replicating``, ``Failed``, …; ``Unknown`` when absent).
        processed_rows: Rows Fabric has applied (``metrics.processedRows``), when reported.
        processed_bytes: Bytes Fabric has applied (``metrics.processedBytes``), when reported.
        last_sync: When Fabric last applied changes (``metrics.lastSyncDateTime``, ISO 8601 UTC), when reported.
        error: Fabric's error for the table (``errorCode: message``), when it reports one.
    """

    table: str
    state: str
    processed_rows: int | None
    processed_bytes: int | None
    last_sync: str | None
    error: str | None

    @property
    def failed(self) -> bool:
        """Whether Fabric stopped applying this table's files (state Failed or Error)."""
        return self.state.lower() in FAILED_STATES


@dataclass(frozen=True)
class FabricDatabaseStatus:
    """The mirrored database as a whole, from ``getMirroringStatus``.

    Attributes:
        state: ``Running``, ``Stopped``, ``Paused``, … as reported (``Unknown`` when absent).
        error: Fabric's error for the database (``errorCode: message``), when it reports one.
    """

    state: str
    error: str | None

    @property
    def up(self) -> bool:
        """Whether mirroring reads the landing zone now: ``Running`` and no error."""
        return self.state.lower() == "running" and self.error is None

    def describe(self) -> str:
        """``Stopped`` or ``Running (error: Code: message)``, for log lines and ``/readyz``."""
        return self.state + (f" (error: {self.error})" if self.error else "")


class FabricStatusUnreadable(ConnectorError):
    """Why one read of the status failed; ``FabricStatusReader.tables`` turns it into a warning.

    ``status`` is the HTTP status when the API answered (a 404 or 403 is a wrong id or a missing role,
    not an outage).
    """

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message, status)
        self.status = status

    def __str__(self) -> str:
        return str(self.args[0])


class FabricStatusReader(ABC):
    """Reads Fabric's per-table status; ``tables()`` never raises for an unreadable status.

    Attributes:
        location: Where the status is read (a URL or path), safe to log.
    """

    location: str

    def __init__(self) -> None:
        self._problem: str | None = None
        self._database_problem: str | None = None

    def tables(self) -> dict[str, FabricTableStatus] | None:
        """Fabric's tables by table id, or ``None`` when the status cannot be read now.

        An unreadable status logs one warning (no traceback) naming the location and the reason; a reader
        polled repeatedly warns again only when the reason changes, and says when the status is readable again.
        """
        try:
            tables = self._read()
        except FabricStatusUnreadable as exc:
            problem = str(exc)
            if problem != self._problem:
                log.warning("Fabric status %s cannot be read: %s", self.location, problem)
            else:
                log.debug("Fabric status %s still cannot be read: %s", self.location, problem)
            self._problem = problem
            return None
        if self._problem is not None:
            log.info("Fabric status %s is readable again (%d tables)", self.location, len(tables))
            self._problem = None
        return tables

    def database(self) -> FabricDatabaseStatus | None:
        """The database's own status, or ``None`` when it cannot be read now (or this source has none).

        Warns like ``tables()``: once per distinct reason, and once when readable again.
        """
        try:
            status = self.read_database()
        except FabricStatusUnreadable as exc:
            problem = str(exc)
            if problem != self._database_problem:
                log.warning("Fabric database status %s cannot be read: %s", self.location, problem)
            self._database_problem = problem
            return None
        if self._database_problem is not None and status is not None:
            log.info("Fabric database status %s is readable again: %s", self.location, status.describe())
            self._database_problem = None
        return status

    def read_database(self) -> FabricDatabaseStatus | None:
        """Read the database's status once; ``None`` when this source does not report it.

        Raises:
            FabricStatusUnreadable: with a one-line reason (and the HTTP status, when there was an answer).
        """
        return None

    @abstractmethod
    def _read(self) -> dict[str, FabricTableStatus]:
        """Read the whole status once.

        Raises:
            FabricStatusUnreadable: with a one-line reason that holds no secret.
        """

    def close(self) -> None:  # noqa: B027 - optional hook: most readers hold no connection
        """Release connections (the default has none)."""


class RestFabricStatus(FabricStatusReader):
    """``getTablesMirroringStatus`` of the Fabric REST API, all pages."""

    def __init__(
        self,
        api_url: str,
        workspace_id: str,
        mirrored_database_id: str,
        token: TokenSource,
        *,
        timeout_s: float = 10.0,
    ) -> None:
        super().__init__()
        item = (
            f"{api_url.rstrip('/')}/v1/workspaces/{quote(workspace_id, safe='')}"
            f"/mirroredDatabases/{quote(mirrored_database_id, safe='')}"
        )
        self.location = f"{item}/getTablesMirroringStatus"
        self.database_location = f"{item}/getMirroringStatus"
        self._token = token
        self._client = httpx.Client(timeout=timeout_s, follow_redirects=False)

    def _read(self) -> dict[str, FabricTableStatus]:
        headers = {"Authorization": f"Bearer {self._token()}", "Accept": "application/json"}
        tables: dict[str, FabricTableStatus] = {}
        continuation: str | None = None
        seen: set[str] = set()
        for _ in range(MAX_PAGES):
            params = {"continuationToken": continuation} if continuation else None
            body = self._post(self.location, headers, params)
            data = body.get("data")
            if not isinstance(data, list):
                msg = "the answer has no 'data' list"
                raise FabricStatusUnreadable(msg)
            _add_entries(tables, data)
            token = body.get("continuationToken")
            if not token:
                return tables
            continuation = str(token)
            if continuation in seen:
                msg = "the API returned the same continuationToken twice"
                raise FabricStatusUnreadable(msg)
            seen.add(continuation)
        msg = f"more than {MAX_PAGES} pages"
        raise FabricStatusUnreadable(msg)

    def read_database(self) -> FabricDatabaseStatus:
        """``getMirroringStatus``, once."""
        headers = {"Authorization": f"Bearer {self._token()}", "Accept": "application/json"}
        body = self._post(self.database_location, headers)
        status = body.get("status")
        return FabricDatabaseStatus(
            state=status if isinstance(status, str) and status else "Unknown", error=_error_text(body.get("error"))
        )

    def _post(self, url: str, headers: dict[str, str], params: dict[str, str] | None = None) -> dict[str, Any]:
        """One status request's JSON object; a transport error, a refusal or a body that is no object is unreadable."""
        try:
            response = self._client.post(url, params=params, headers=headers, content=b"")
        except httpx.HTTPError as exc:
            msg = f"{type(exc).__name__}: {first_line(str(exc))}"
            raise FabricStatusUnreadable(msg) from None
        if response.status_code != 200:
            raise FabricStatusUnreadable(_describe_refusal(response), response.status_code)
        return _json_object(response.content, "the answer")

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()


class MonitoringFabricStatus(FabricStatusReader):
    """``tables.json`` of the mirrored database's ``Files/Monitoring`` folder, through a ``Storage``."""

    def __init__(self, folder: Storage) -> None:
        super().__init__()
        self._folder = folder
        self.location = f"{folder.url.rstrip('/')}/{MONITORING_TABLES_FILE}"

    def _read(self) -> dict[str, FabricTableStatus]:
        try:
            raw = self._folder.read_bytes(MONITORING_TABLES_FILE)
        except FileNotFoundError:
            msg = "the file does not exist (mirroring has not started, or monitoring_url is wrong)"
            raise FabricStatusUnreadable(msg) from None
        except (StorageError, OSError) as exc:
            raise FabricStatusUnreadable(first_line(str(exc)) or type(exc).__name__) from None
        entries = _json_object(raw, "the file").get("tables")
        if not isinstance(entries, list):
            msg = "the file has no 'tables' list"
            raise FabricStatusUnreadable(msg)
        tables: dict[str, FabricTableStatus] = {}
        _add_entries(tables, entries)
        return tables


def open_fabric_status(settings: ConnectorSettings) -> FabricStatusReader | None:
    """The reader ``settings.fabric_status`` describes; ``None`` for kind ``none``.

    Nothing is contacted here: a wrong id, token or URL shows up as ``tables()`` returning ``None`` with a
    warning.

    Raises:
        ConfigError: A required setting is missing or invalid; the message names it.
    """
    config = settings.fabric_status
    if config.kind == "none":
        return None
    if config.kind == "rest":
        workspace, database = config.workspace_id, config.mirrored_database_id
        if not workspace or not database:
            missing = [
                name for name, value in (("workspace_id", workspace), ("mirrored_database_id", database)) if not value
            ]
            msg = f"fabric_status.kind rest needs {' and '.join('fabric_status.' + m for m in missing)}"
            raise ConfigError(msg)
        token = (
            static_token(config.bearer_token)
            if config.bearer_token is not None
            else identity_token(config.credential, "fabric_status.credential")
        )
        return RestFabricStatus(config.api_url, workspace, database, token, timeout_s=config.request_timeout_s)
    url = config.monitoring_url or monitoring_url_beside(settings.landing_zone.url)
    if url is None:
        msg = (
            "fabric_status.kind monitoring needs fabric_status.monitoring_url (the mirrored database's "
            "Files/Monitoring folder); it is found by itself only when landing_zone.url ends in /LandingZone"
        )
        raise ConfigError(msg)
    try:
        folder = StorageLocation(url, config.identity, "fabric_status.monitoring_url").open()
    except ValueError as exc:
        msg = f"fabric_status.monitoring_url: {exc}"
        raise ConfigError(msg) from None
    return MonitoringFabricStatus(folder)


def monitoring_url_beside(landing_zone_url: str) -> str | None:
    """``…/Files/LandingZone`` → ``…/Files/Monitoring`` (where mirroring writes its status); else ``None``."""
    stripped = landing_zone_url.rstrip("/")
    head, _, last = stripped.rpartition("/")
    if not head or last.lower() != "landingzone":
        return None
    return f"{head}/Monitoring"


def static_token(secret: SecretStr) -> TokenSource:
    """A fixed bearer token (``${env:X}`` / ``${file:P}`` references resolved at each request)."""

    def token() -> str:
        try:
            return resolve_secret_references(secret.get_secret_value(), "fabric_status.bearer_token")
        except ConfigError as exc:
            raise FabricStatusUnreadable(str(exc)) from None

    return token


def identity_token(kind: CredentialKind, setting: str) -> TokenSource:
    """Tokens for the Fabric REST API from the azure-identity credential of ``kind`` (``AZURE_*`` variables).

    Raises:
        ConfigError: The identity's settings are incomplete (``setting`` is named).
    """
    try:
        identity = build_credential(CredentialConfig.of(kind), scope=FABRIC_API_SCOPE)
    except ValueError as exc:
        msg = f"{setting}: {exc}"
        raise ConfigError(msg) from None

    def token() -> str:
        try:
            return identity.credential.get_token(FABRIC_API_SCOPE).token
        except AzureError as exc:
            msg = f"no token for the Fabric API from identity {identity.description}: {first_line(str(exc))}"
            raise FabricStatusUnreadable(msg) from None

    return token


def _add_entries(tables: dict[str, FabricTableStatus], entries: list[Any]) -> None:
    skipped = 0
    for raw in entries:
        entry = _entry(raw)
        if entry is None:
            skipped += 1
        else:
            tables[entry.table] = entry
    if skipped:
        log.debug("Fabric status: %d entries without a table name were skipped", skipped)


def _entry(raw: Any) -> FabricTableStatus | None:
    """One ``TableMirroringStatusResponse`` (or ``tables.json`` entry); ``None`` when it names no table."""
    if not isinstance(raw, dict):
        return None
    name = raw.get("sourceTableName")
    if not isinstance(name, str) or not name:
        return None
    schema = raw.get("sourceSchemaName")
    status = raw.get("status")
    metrics = raw.get("metrics")
    metrics = metrics if isinstance(metrics, dict) else {}
    last_sync = metrics.get("lastSyncDateTime")
    return FabricTableStatus(
        table=TableRef(schema if isinstance(schema, str) and schema else None, name).id,
        state=status if isinstance(status, str) and status else "Unknown",
        processed_rows=_count(metrics.get("processedRows")),
        processed_bytes=_count(metrics.get("processedBytes")),
        last_sync=last_sync if isinstance(last_sync, str) and last_sync else None,
        error=_error_text(raw.get("error")),
    )


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)


def _error_text(error: Any) -> str | None:
    """``errorCode: message`` of an ``ErrorResponse`` (a plain string is kept as it is)."""
    if isinstance(error, str):
        return error or None
    if not isinstance(error, dict):
        return None
    code, message = error.get("errorCode"), error.get("message")
    parts = [str(p) for p in (code, message) if p]
    return ": ".join(parts) if parts else None


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        msg = f"{what} is not JSON: {first_line(raw[:200].decode('utf-8', 'replace'))!r}"
        raise FabricStatusUnreadable(msg) from None
    if not isinstance(body, dict):
        msg = f"{what} is a JSON {type(body).__name__}, not an object"
        raise FabricStatusUnreadable(msg)
    return body


def _describe_refusal(response: httpx.Response) -> str:
    """``HTTP 401 TokenExpired: message`` from a Fabric ``ErrorResponse`` body; never a request header."""
    text = f"HTTP {response.status_code}"
    try:
        body = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        body = None
    detail = _error_text(body) if isinstance(body, dict) else None
    if detail:
        text += f" {first_line(detail)}"
    retry_after = response.headers.get("Retry-After")
    if response.status_code == 429 and retry_after:
        text += f" (retry after {retry_after}s)"
    return text
