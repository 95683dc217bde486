"""Fabric's status from its REST API: ``getTablesMirroringStatus`` and ``getMirroringStatus``, and their tokens.

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
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
import orjson
from azure.core.exceptions import AzureError
from pydantic import SecretStr

from connector.errors import ConfigError, first_line
from connector.fabric.status_reader import (
    FabricDatabaseStatus,
    FabricStatusReader,
    FabricStatusUnreadable,
    FabricTableStatus,
    TokenSource,
    add_entries,
    error_text,
    json_object,
)
from connector.secrets import resolve_secret_references
from connector.storage import CredentialKind
from connector.storage.credentials import build_credential
from connector.storage.identity import CredentialConfig

#: The one token scope the REST reader asks for.
FABRIC_API_SCOPE = "https://api.fabric.microsoft.com/.default"
#: A paging loop longer than this is a broken service, not a big database.
MAX_PAGES = 1000


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
            add_entries(tables, data)
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
            state=status if isinstance(status, str) and status else "Unknown", error=error_text(body.get("error"))
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
        return json_object(response.content, "the answer")

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()


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


def _describe_refusal(response: httpx.Response) -> str:
    """``HTTP 401 TokenExpired: message`` from a Fabric ``ErrorResponse`` body; never a request header."""
    text = f"HTTP {response.status_code}"
    try:
        body = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        body = None
    detail = error_text(body) if isinstance(body, dict) else None
    if detail:
        text += f" {first_line(detail)}"
    retry_after = response.headers.get("Retry-After")
    if response.status_code == 429 and retry_after:
        text += f" (retry after {retry_after}s)"
    return text
