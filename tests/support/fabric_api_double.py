"""TEST DOUBLE: a local HTTP server answering the Fabric REST API's mirrored-database calls.

This is **not** Microsoft Fabric, which cannot run on this machine. It lets tests drive the real
``connector.fabric.status`` readers, ``connector.fabric.rest_api.FabricApi`` and ``connector init``
(and a whole ``run`` scraped by a live Prometheus) over real HTTP on 127.0.0.1, with the shapes of Microsoft's
REST reference and its OpenAPI source (github.com/microsoft/fabric-rest-api-specs; see the docstrings of
``connector.fabric.status_rest`` and ``connector.fabric.rest_api`` for the pages):

* ``POST /v1/workspaces/{ws}/mirroredDatabases/{id}/getTablesMirroringStatus`` ``[?continuationToken=...]`` →
  ``{"data": [...], "continuationToken"?, "continuationUri"?}``, at most ``page_size`` tables per page;
* ``POST .../getMirroringStatus`` → ``{"status": ...}``; ``POST .../startMirroring`` and ``.../stopMirroring`` →
  200 (start moves the item to ``Starting`` for ``starting_reads`` status reads, then ``Running``);
* ``GET /v1/workspaces/{ws}/mirroredDatabases`` (``value`` + ``continuationToken`` pages of ``item_page_size``),
  ``GET .../mirroredDatabases/{id}`` (with ``properties.oneLakeTablesPath``), and
  ``POST /v1/workspaces/{ws}/mirroredDatabases`` (Items - Create Mirrored Database): 201 with the item, or, with
  ``lro_polls`` > 0, 202 + ``Location`` + ``x-ms-operation-id`` + ``Retry-After``; ``GET /v1/operations/{id}``
  answers ``Running`` (with ``percentComplete``) ``lro_polls`` times, then ``Succeeded`` with ``Location`` naming
  ``/v1/operations/{id}/result``, which answers the item. A create without a decodable ``mirroring.json`` part is
  400 ``InvalidDefinition``; a display name in use is 409 ``ItemDisplayNameAlreadyInUse``;
* a bearer token is required (``Authorization: Bearer <token>``): otherwise 401 ``TokenExpired``; a workspace
  the double does not hold is 404 ``WorkspaceNotFound``; an unknown item 404 ``ItemNotFound``. The caller's
  workspace role (``roles``) decides: ``None`` refuses everything, ``Viewer`` may read but not create or
  start (403 ``InsufficientPrivileges``), Contributor, Member and Admin may do all.

Where it follows Microsoft's reference rather than this project's habits (each cited beside the code too):

* a created item reports ``Initializing`` for ``initializing_reads`` status reads, then ``Initialized``, and
  ``startMirroring`` before that is refused (400): "Mirroring can't be started while the status is Initializing"
  (https://learn.microsoft.com/fabric/mirroring/mirrored-database-rest-api, Start mirroring);
* a request with a JSON body must say ``Content-Type: application/json`` (415 otherwise): the operations consume
  ``application/json`` (https://learn.microsoft.com/rest/api/fabric/mirroreddatabase/items/create-mirrored-database);
* ``lro_error`` makes the operation end ``Failed`` with that error and no ``Location``
  (https://learn.microsoft.com/rest/api/fabric/core/long-running-operations/get-operation-state);
* ``missing_workspace_code`` is the code of an unknown workspace: ``WorkspaceNotFound``, or ``EntityNotFound``
  ("the workspace ID doesn't exist", https://learn.microsoft.com/rest/api/fabric/articles/using-fabric-apis);
* list pages carry an already URL-encoded ``continuationToken`` (``...%3D``) and the ``continuationUri`` holding it
  (https://learn.microsoft.com/rest/api/fabric/articles/pagination); a token encoded twice is 400;
* ``POST .../getDefinition`` and ``.../updateDefinition`` answer and replace the base64 ``mirroring.json`` part
  (https://learn.microsoft.com/rest/api/fabric/mirroreddatabase/items/get-mirrored-database-definition,
  .../update-mirrored-database-definition, and
  https://learn.microsoft.com/rest/api/fabric/articles/item-management/definitions/mirrored-database-definition).

Every error body is an ``ErrorResponse`` (``{"errorCode", "message", "requestId"}``). The test controls the
answers: ``set_table`` / ``remove_table``, ``database_status`` (of the default item), ``unavailable_status``
(every call answers that status; 429 with ``Retry-After: 7``), ``throttle_next`` (the next N calls answer 429
with ``Retry-After: retry_after``), ``malformed`` (200 with a non-JSON body), ``on_created`` (called with the
workspace and item id of a created item, so a test can create its OneLake folder in the DFS double as Fabric
does). Every request is recorded in ``requests``.
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from tests.support.served_http import ServedHttp

WORKSPACE_ID = "a0a0a0a0-bbbb-cccc-dddd-e1e1e1e1e1e1"
MIRRORED_DATABASE_ID = "b1b1b1b1-cccc-dddd-eeee-f2f2f2f2f2f2"
TOKEN = "fabric-double-token"  # noqa: S105 - a test double's fixed token
#: Roles that may create items and start mirroring (Items - Create Mirrored Database: contributor or higher).
WRITER_ROLES = frozenset({"Admin", "Member", "Contributor"})


@dataclass(frozen=True)
class SeenRequest:
    """One request the double answered."""

    method: str
    path: str
    continuation_token: str | None
    authorization: str | None
    body: dict[str, Any] | None = None
    content_type: str | None = None
    query: str = ""


@dataclass
class MirroredItem:
    """One open-mirrored database the double holds."""

    id: str
    display_name: str
    description: str = ""
    mirroring: dict[str, Any] = field(default_factory=dict)
    status: str = "Initialized"
    starting_reads_left: int = 0
    initializing_reads_left: int = 0


@dataclass
class _Operation:
    workspace_id: str
    item_id: str | None
    polls_left: int
    result: dict[str, Any] | None = None


class FabricApiDouble:
    """The double; use as a context manager, or ``start()`` / ``stop()``. ``api_url`` is its base URL.

    By default it holds one workspace (``workspace_id``, role Admin) with one Running item
    (``mirrored_database_id``); ``with_item=False`` starts the workspace empty, for ``init``.
    """

    def __init__(
        self,
        *,
        token: str = TOKEN,
        workspace_id: str = WORKSPACE_ID,
        mirrored_database_id: str = MIRRORED_DATABASE_ID,
        page_size: int = 100,
        item_page_size: int = 100,
        with_item: bool = True,
        role: str | None = "Admin",
    ) -> None:
        self.token = token
        self.workspace_id = workspace_id
        self.mirrored_database_id = mirrored_database_id
        self.page_size = page_size
        self.item_page_size = item_page_size
        self.unavailable_status: int | None = None
        self.malformed = False
        self.lro_polls = 0
        self.retry_after = "1"
        self.throttle_next = 0
        self.starting_reads = 0
        self.initializing_reads = 1
        self.lro_error: tuple[str, str] | None = None
        self.missing_workspace_code = "WorkspaceNotFound"
        self.on_created: Callable[[str, str], None] | None = None
        self.requests: list[SeenRequest] = []
        self.roles: dict[str, str | None] = {workspace_id: role}
        self.items: dict[tuple[str, str], MirroredItem] = {}
        self._operations: dict[str, _Operation] = {}
        self._lock = threading.Lock()
        self._tables: dict[tuple[str, str], dict[str, Any]] = {}
        self._served: ServedHttp | None = None
        if with_item:
            self.items[(workspace_id, mirrored_database_id)] = MirroredItem(
                mirrored_database_id, "Mirrored database 1", status="Running"
            )

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> FabricApiDouble:
        handler = type("_Handler", (_Handler,), {"double": self})
        self._served = ServedHttp(ThreadingHTTPServer(("127.0.0.1", 0), handler), "FabricApiDouble")
        return self

    def stop(self) -> None:
        if self._served is not None:
            self._served.close()
            self._served = None

    def __enter__(self) -> FabricApiDouble:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def api_url(self) -> str:
        assert self._served is not None, "start() the double first"
        return f"http://127.0.0.1:{self._served.port}"

    @property
    def tables_url(self) -> str:
        return (
            f"{self.api_url}/v1/workspaces/{self.workspace_id}/mirroredDatabases/{self.mirrored_database_id}"
            "/getTablesMirroringStatus"
        )

    # -- what Fabric reports ---------------------------------------------------------------------------

    @property
    def database_status(self) -> str:
        """The default item's mirroring status."""
        return self.items[(self.workspace_id, self.mirrored_database_id)].status

    @database_status.setter
    def database_status(self, status: str) -> None:
        with self._lock:
            self.items[(self.workspace_id, self.mirrored_database_id)].status = status

    def item_named(self, name: str, workspace_id: str | None = None) -> MirroredItem | None:
        workspace = workspace_id or self.workspace_id
        with self._lock:
            return next(
                (i for (ws, _), i in self.items.items() if ws == workspace and i.display_name == name),
                None,
            )

    def set_table(
        self,
        schema: str,
        table: str,
        status: str = "Replicating",
        *,
        processed_rows: int = 0,
        processed_bytes: int = 0,
        last_sync: str = "2024-10-08T05:07:11.0663362Z",
        error: tuple[str, str] | None = None,
    ) -> None:
        """Add or change a table's entry; ``error`` is ``(errorCode, message)``."""
        entry: dict[str, Any] = {
            "sourceObjectType": "Table",
            "sourceSchemaName": schema,
            "sourceTableName": table,
            "status": status,
            "metrics": {
                "processedBytes": processed_bytes,
                "processedRows": processed_rows,
                "lastSyncDateTime": last_sync,
            },
        }
        if error is not None:
            entry["error"] = {"errorCode": error[0], "message": error[1]}
        with self._lock:
            self._tables[(schema, table)] = entry

    def remove_table(self, schema: str, table: str) -> None:
        with self._lock:
            self._tables.pop((schema, table), None)

    def table_calls(self) -> list[SeenRequest]:
        return [r for r in self.requests if r.path.endswith("/getTablesMirroringStatus")]

    def calls(self, method: str, suffix: str) -> list[SeenRequest]:
        """The requests of ``method`` whose path ends with ``suffix``."""
        return [r for r in self.requests if r.method == method and r.path.endswith(suffix)]

    def _entries(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(self._tables[key]) for key in sorted(self._tables)]

    def item_body(self, workspace_id: str, item: MirroredItem) -> dict[str, Any]:
        """``MirroredDatabase`` as Items - Get Mirrored Database answers it."""
        return {
            "id": item.id,
            "displayName": item.display_name,
            "description": item.description,
            "type": "MirroredDatabase",
            "workspaceId": workspace_id,
            "properties": {
                "oneLakeTablesPath": f"https://onelake.dfs.fabric.microsoft.com/{workspace_id}/{item.id}/Tables",
                "defaultSchema": item.mirroring.get("properties", {})
                .get("target", {})
                .get("typeProperties", {})
                .get("defaultSchema", "dbo"),
            },
        }


def _error(code: str, message: str) -> dict[str, str]:
    return {"errorCode": code, "message": message, "requestId": "00000000-0000-0000-0000-000000000000"}


class _Reply(Exception):
    """An answer decided part-way through routing (an error, usually)."""

    def __init__(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        super().__init__(status)
        self.status = status
        self.body = body
        self.headers = headers or {}


class _Handler(BaseHTTPRequestHandler):
    double: FabricApiDouble

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        return

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def _handle(self, method: str) -> None:
        double = self.double
        parts = urlsplit(self.path)
        continuation = parse_qs(parts.query).get("continuationToken", [None])[0]
        authorization = self.headers.get("Authorization")
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        content_type = self.headers.get("Content-Type")
        double.requests.append(
            SeenRequest(method, parts.path, continuation, authorization, body, content_type, parts.query)
        )
        try:
            self._gate(authorization)
            if raw and (content_type or "").split(";")[0].strip().lower() != "application/json":
                # The operations consume application/json (e.g. Items - Create Mirrored Database, its OpenAPI
                # "consumes"): https://learn.microsoft.com/rest/api/fabric/mirroreddatabase/items/create-mirrored-database
                raise _Reply(415, _error("UnsupportedMediaType", "Content-Type must be application/json"))
            self._route(method, parts.path, continuation, body if isinstance(body, dict) else None)
        except _Reply as reply:
            self._reply(reply.status, reply.body, reply.headers)

    def _gate(self, authorization: str | None) -> None:
        """Outages, throttling and the token, in the order the service applies them."""
        double = self.double
        if double.unavailable_status is not None:
            headers = {"Retry-After": "7"} if double.unavailable_status == 429 else {}
            raise _Reply(double.unavailable_status, _error("ServiceUnavailable", "try again later"), headers)
        with double._lock:
            throttled = double.throttle_next > 0
            double.throttle_next -= 1 if throttled else 0
        if throttled:
            raise _Reply(
                429,
                _error("RequestBlocked", "Request is blocked by the upstream service until retry-after"),
                {"Retry-After": double.retry_after},
            )
        if authorization != f"Bearer {double.token}":
            raise _Reply(401, _error("TokenExpired", "Access token has expired, resubmit with a new access token"))

    def _route(self, method: str, path: str, continuation: str | None, body: dict[str, Any] | None) -> None:
        segments = [s for s in path.split("/") if s]
        if segments[:2] == ["v1", "operations"] and method == "GET" and len(segments) in (3, 4):
            self._operation(segments[2], result=len(segments) == 4)
            return
        if len(segments) < 4 or segments[:2] != ["v1", "workspaces"] or segments[3] != "mirroredDatabases":
            raise _Reply(404, _error("EntityNotFound", f"no API at {path}"))
        workspace = segments[2]
        role = self._role(workspace)
        if len(segments) == 4:
            if method == "GET":
                self._list(workspace, continuation)
            else:
                self._require_writer(role, workspace)
                self._create(workspace, body)
            return
        item = self._item(workspace, segments[4])
        operation = segments[5] if len(segments) == 6 else None
        if operation in ("startMirroring", "stopMirroring"):
            self._require_writer(role, workspace)
        if self.double.malformed:
            self._send(200, b"<html>proxy error</html>", "text/html")
            return
        self._item_operation(method, workspace, item, operation, continuation, body)

    def _item_operation(
        self,
        method: str,
        workspace: str,
        item: MirroredItem,
        operation: str | None,
        continuation: str | None,
        body: dict[str, Any] | None,
    ) -> None:
        double = self.double
        if operation is None and method == "GET":
            self._reply(200, double.item_body(workspace, item))
        elif operation == "getMirroringStatus" and method == "POST":
            with double._lock:
                status = item.status
                if item.status == "Initializing":
                    item.initializing_reads_left -= 1
                    if item.initializing_reads_left <= 0:
                        item.status = "Initialized"
                elif item.status == "Starting":
                    item.starting_reads_left -= 1
                    if item.starting_reads_left <= 0:
                        item.status = "Running"
            self._reply(200, {"status": status})
        elif operation == "getTablesMirroringStatus" and method == "POST":
            self._tables_page(continuation)
        elif operation in ("getDefinition", "updateDefinition") and method == "POST":
            self._definition(workspace, item, operation, body)
        elif operation == "startMirroring" and method == "POST":
            if item.status == "Initializing":
                # "Mirroring can't be started while the status is Initializing" (Start mirroring):
                # https://learn.microsoft.com/fabric/mirroring/mirrored-database-rest-api
                raise _Reply(400, _error("MirroringNotStartable", "The mirrored database is still Initializing"))
            with double._lock:
                if item.status != "Running":
                    item.status = "Starting" if double.starting_reads else "Running"
                    item.starting_reads_left = double.starting_reads
            self._reply(200, {})
        elif operation == "stopMirroring" and method == "POST":
            with double._lock:
                item.status = "Stopped"
            self._reply(200, {})
        else:
            self._reply(404, _error("UnknownOperation", f"no operation {method} {operation}"))

    def _definition(self, workspace: str, item: MirroredItem, operation: str, body: dict[str, Any] | None) -> None:
        """Get / Update Mirrored Database Definition: the ``mirroring.json`` part, base64 (``InlineBase64``).

        https://learn.microsoft.com/rest/api/fabric/mirroreddatabase/items/get-mirrored-database-definition
        https://learn.microsoft.com/rest/api/fabric/mirroreddatabase/items/update-mirrored-database-definition
        """
        self._require_writer(self._role(workspace), workspace)  # both need read and write permissions
        if operation == "getDefinition":
            payload = base64.b64encode(json.dumps(item.mirroring).encode()).decode("ascii")
            part = {"path": "mirroring.json", "payload": payload, "payloadType": "InlineBase64"}
            self._reply(200, {"definition": {"parts": [part]}})
            return
        mirroring = _mirroring_part(body)
        if mirroring is None:
            raise _Reply(400, _error("CorruptedPayload", "The provided payload is corrupted"))
        with self.double._lock:
            item.mirroring = mirroring
        self._reply(200, {})

    def _role(self, workspace: str) -> str | None:
        if workspace not in self.double.roles:
            # "EntityNotFound: the workspace ID doesn't exist" or WorkspaceNotFound, as the test chooses:
            # https://learn.microsoft.com/rest/api/fabric/articles/using-fabric-apis
            code = self.double.missing_workspace_code
            raise _Reply(404, _error(code, "The requested workspace was not found"))
        role = self.double.roles[workspace]
        if role is None:
            raise _Reply(
                403,
                _error(
                    "InsufficientPrivileges",
                    "The caller does not have sufficient permissions to access the requested resource",
                ),
            )
        return role

    def _require_writer(self, role: str | None, workspace: str) -> None:
        if role not in WRITER_ROLES:
            raise _Reply(
                403,
                _error(
                    "InsufficientPrivileges", f"The caller does not have the required role on workspace {workspace}"
                ),
            )

    def _item(self, workspace: str, item_id: str) -> MirroredItem:
        item = self.double.items.get((workspace, item_id))
        if item is None:
            raise _Reply(404, _error("ItemNotFound", "The requested item was not found"))
        return item

    def _list(self, workspace: str, continuation: str | None) -> None:
        """Pages as https://learn.microsoft.com/rest/api/fabric/articles/pagination shows them: the token is
        already URL-encoded (``...%3D``) and ``continuationUri`` carries it; a token encoded twice is refused."""
        double = self.double
        with double._lock:
            items = [double.item_body(ws, i) for (ws, _), i in sorted(double.items.items()) if ws == workspace]
        start = 0
        if continuation is not None:
            try:
                start = int(base64.b64decode(continuation, validate=True).decode())
            except (binascii.Error, ValueError):
                raise _Reply(400, _error("InvalidContinuationToken", "The continuation token is not valid")) from None
        end = start + double.item_page_size
        page: dict[str, Any] = {"value": items[start:end]}
        if end < len(items):
            token = quote(base64.b64encode(f"{end:04d}".encode()).decode("ascii"), safe="")  # "MDAwMQ%3D%3D"
            page["continuationToken"] = token
            url = f"{double.api_url}/v1/workspaces/{workspace}/mirroredDatabases"
            page["continuationUri"] = f"{url}?continuationToken={token}"
        self._reply(200, page)

    def _create(self, workspace: str, body: dict[str, Any] | None) -> None:
        double = self.double
        body = body or {}
        name = body.get("displayName")
        mirroring = _mirroring_part(body)
        if not isinstance(name, str) or not name or mirroring is None:
            raise _Reply(400, _error("InvalidDefinition", "displayName and a mirroring.json part are required"))
        if double.item_named(name, workspace) is not None:
            raise _Reply(409, _error("ItemDisplayNameAlreadyInUse", "Requested 'displayName' is already in use"))
        # A created database is Initializing first (Get Mirroring Status, mirrored-database-rest-api).
        item = MirroredItem(str(uuid.uuid4()), name, str(body.get("description") or ""), mirroring)
        if double.initializing_reads > 0:
            item.status, item.initializing_reads_left = "Initializing", double.initializing_reads
        with double._lock:
            double.items[(workspace, item.id)] = item
        if double.on_created is not None:
            double.on_created(workspace, item.id)
        if not double.lro_polls:
            self._reply(201, double.item_body(workspace, item))
            return
        operation = str(uuid.uuid4())
        with double._lock:
            double._operations[operation] = _Operation(workspace, item.id, double.lro_polls)
        self._reply(202, {}, self._operation_headers(operation))

    def _operation(self, operation_id: str, *, result: bool) -> None:
        double = self.double
        with double._lock:
            operation = double._operations.get(operation_id)
            if operation is None:
                raise _Reply(404, _error("OperationNotFound", "The requested operation was not found"))
            running = operation.polls_left > 0
            if not result and running:
                operation.polls_left -= 1
        if result:
            if running:
                raise _Reply(400, _error("OperationNotSucceeded", "The operation has not succeeded yet"))
            item = double.items[(operation.workspace_id, operation.item_id)]
            self._reply(200, double.item_body(operation.workspace_id, item))
            return
        if running:
            state = {"status": "Running", "percentComplete": 50}
            self._reply(200, state, self._operation_headers(operation_id))
            return
        if double.lro_error is not None:
            # A Failed state carries its error and no Location (Get Operation State, OperationState.error):
            # https://learn.microsoft.com/rest/api/fabric/core/long-running-operations/get-operation-state
            error = {"errorCode": double.lro_error[0], "message": double.lro_error[1]}
            self._reply(200, {"status": "Failed", "percentComplete": 100, "error": error})
            return
        headers = {
            "Location": f"{double.api_url}/v1/operations/{operation_id}/result",
            "x-ms-operation-id": operation_id,
        }
        self._reply(200, {"status": "Succeeded", "percentComplete": 100}, headers)

    def _operation_headers(self, operation_id: str) -> dict[str, str]:
        return {
            "Location": f"{self.double.api_url}/v1/operations/{operation_id}",
            "x-ms-operation-id": operation_id,
            "Retry-After": self.double.retry_after,
        }

    def _tables_page(self, continuation: str | None) -> None:
        double = self.double
        entries = double._entries()
        start = 0
        if continuation is not None:
            if not continuation.startswith("page-") or not continuation[5:].isdigit():
                self._reply(400, _error("InvalidContinuationToken", "The continuation token is not valid"))
                return
            start = int(continuation[5:])
        end = start + double.page_size
        body: dict[str, Any] = {"data": entries[start:end]}
        if end < len(entries):
            body["continuationToken"] = f"page-{end}"
            body["continuationUri"] = f"{double.tables_url}?continuationToken=page-{end}"
        self._reply(200, body)

    def _reply(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(body).encode(), "application/json", headers)

    def _send(self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


def _mirroring_part(body: dict[str, Any] | None) -> dict[str, Any] | None:
    """The decoded ``mirroring.json`` part of a create request, or ``None``."""
    parts = ((body or {}).get("definition") or {}).get("parts")
    for part in parts if isinstance(parts, list) else []:
        if (
            isinstance(part, dict)
            and part.get("path") == "mirroring.json"
            and part.get("payloadType") == "InlineBase64"
        ):
            try:
                decoded = json.loads(base64.b64decode(str(part.get("payload")), validate=True))
            except (binascii.Error, ValueError):
                return None
            return decoded if isinstance(decoded, dict) else None
    return None
