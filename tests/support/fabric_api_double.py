"""TEST DOUBLE: a local HTTP server answering the Fabric REST API's mirroring-status calls.

This is **not** Microsoft Fabric, which cannot run on this machine. It lets tests drive the real
``connector.operate.fabric_status.RestFabricStatus`` (and a whole ``run`` scraped by a live Prometheus) over real
HTTP on 127.0.0.1, with the shapes of Microsoft's REST reference (see the ``connector.operate.fabric_status``
docstring for the provenance):

* ``POST /v1/workspaces/{workspaceId}/mirroredDatabases/{mirroredDatabaseId}/getTablesMirroringStatus``
  ``[?continuationToken=...]`` → ``{"data": [...], "continuationToken"?, "continuationUri"?}``, at most
  ``page_size`` tables per page;
* ``POST .../getMirroringStatus`` → ``{"status": database_status}``;
* a bearer token is required (``Authorization: Bearer <token>``): otherwise 401 with an ``ErrorResponse``
  (``{"errorCode", "message"}``); unknown workspace or item → 404 ``ItemNotFound``.

The test controls the answer: ``set_table`` / ``remove_table`` (states such as ``Failed`` with an error),
``unavailable_status`` (every call answers that status, 429 with ``Retry-After``), ``malformed`` (200 with
a non-JSON body). Every request is recorded in ``requests``.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.support.served_http import ServedHttp

WORKSPACE_ID = "a0a0a0a0-bbbb-cccc-dddd-e1e1e1e1e1e1"
MIRRORED_DATABASE_ID = "b1b1b1b1-cccc-dddd-eeee-f2f2f2f2f2f2"
TOKEN = "fabric-double-token"  # noqa: S105 - a test double's fixed token


@dataclass(frozen=True)
class SeenRequest:
    """One request the double answered."""

    method: str
    path: str
    continuation_token: str | None
    authorization: str | None


class FabricApiDouble:
    """The double; use as a context manager, or ``start()`` / ``stop()``. ``api_url`` is its base URL."""

    def __init__(
        self,
        *,
        token: str = TOKEN,
        workspace_id: str = WORKSPACE_ID,
        mirrored_database_id: str = MIRRORED_DATABASE_ID,
        page_size: int = 100,
    ) -> None:
        self.token = token
        self.workspace_id = workspace_id
        self.mirrored_database_id = mirrored_database_id
        self.page_size = page_size
        self.database_status = "Running"
        self.unavailable_status: int | None = None
        self.malformed = False
        self.requests: list[SeenRequest] = []
        self._lock = threading.Lock()
        self._tables: dict[tuple[str, str], dict[str, Any]] = {}
        self._served: ServedHttp | None = None

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

    def _entries(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(self._tables[key]) for key in sorted(self._tables)]


def _error(code: str, message: str) -> dict[str, str]:
    return {"errorCode": code, "message": message, "requestId": "00000000-0000-0000-0000-000000000000"}


class _Handler(BaseHTTPRequestHandler):
    double: FabricApiDouble

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        return

    def do_GET(self) -> None:
        self._reply(405, _error("MethodNotAllowed", "use POST"))

    def do_POST(self) -> None:
        double = self.double
        parts = urlsplit(self.path)
        continuation = parse_qs(parts.query).get("continuationToken", [None])[0]
        authorization = self.headers.get("Authorization")
        double.requests.append(SeenRequest("POST", parts.path, continuation, authorization))
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        if double.unavailable_status is not None:
            headers = {"Retry-After": "7"} if double.unavailable_status == 429 else {}
            self._reply(double.unavailable_status, _error("ServiceUnavailable", "try again later"), headers)
            return
        if authorization != f"Bearer {double.token}":
            self._reply(401, _error("TokenExpired", "Access token has expired, resubmit with a new access token"))
            return
        prefix = f"/v1/workspaces/{double.workspace_id}/mirroredDatabases/{double.mirrored_database_id}/"
        if not parts.path.startswith(prefix):
            self._reply(404, _error("ItemNotFound", "The requested item was not found"))
            return
        operation = parts.path[len(prefix) :]
        if double.malformed:
            self._send(200, b"<html>proxy error</html>", "text/html")
            return
        if operation == "getMirroringStatus":
            self._reply(200, {"status": double.database_status})
        elif operation == "getTablesMirroringStatus":
            self._tables_page(continuation)
        else:
            self._reply(404, _error("UnknownOperation", f"no operation {operation}"))

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
