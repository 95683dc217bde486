"""TEST DOUBLE: an in-process schema registry speaking the Confluent REST subset the connector uses.

This is **not** a schema registry anyone should run. It lets the unit tests drive the real
``confluent_kafka.schema_registry.SchemaRegistryClient`` (inside ``AvroDecoder``) over real HTTP without a
JVM, and inject the failures a production registry has. It implements, in memory:

* ``GET /schemas/ids/{id}`` → ``{"schema": ..., "schemaType"?}``; unknown id → 404 with Confluent's
  ``error_code`` 40403 (``Schema not found``), as Confluent Schema Registry and Apicurio's ccompat API do;
* ``POST /subjects/{subject}/versions`` (register; the same schema text gets the same id everywhere),
  ``GET /subjects``, ``GET /subjects/{subject}/versions``, ``GET /subjects/{subject}/versions/{n|latest}``;
* optional authentication: HTTP basic (``require_basic``) or a bearer token (``require_bearer``),
  answering 401 ``error_code`` 40101 otherwise.

Faults switched on at runtime: ``unavailable_status`` answers every request with that status (503, 500,
429, …) and an error body; ``malformed`` answers 200 with a non-JSON body (a proxy's error page). Every
request is recorded in ``requests`` (method, path, Authorization header) so tests can count retries and
check which credentials were sent. A refused connection is simply a stopped double's port.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.served_http import ServedHttp

_IDS = re.compile(r"^/schemas/ids/(\d+)$")
_VERSIONS = re.compile(r"^/subjects/([^/]+)/versions$")
_VERSION = re.compile(r"^/subjects/([^/]+)/versions/(latest|\d+)$")


@dataclass(frozen=True)
class SeenRequest:
    """One request the double answered."""

    method: str
    path: str
    authorization: str | None


class RegistryDouble:
    """The double; use as a context manager, or ``start()`` / ``stop()``."""

    def __init__(self, *, require_basic: tuple[str, str] | None = None, require_bearer: str | None = None) -> None:
        self.require_basic = require_basic
        self.require_bearer = require_bearer
        self.unavailable_status: int | None = None
        self.malformed = False
        self.requests: list[SeenRequest] = []
        self._lock = threading.Lock()
        self._schemas: dict[int, tuple[str, str]] = {}
        self._ids_by_text: dict[tuple[str, str], int] = {}
        self._subjects: dict[str, list[int]] = {}
        self._served: ServedHttp | None = None
        self._port = 0

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> RegistryDouble:
        handler = type("_Handler", (_Handler,), {"double": self})
        self._served = ServedHttp(ThreadingHTTPServer(("127.0.0.1", 0), handler), "RegistryDouble")
        self._port = self._served.port
        return self

    def stop(self) -> None:
        if self._served is not None:
            self._served.close()
            self._served = None

    def __enter__(self) -> RegistryDouble:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """Base URL, as ``source.schema_registry.url`` takes it."""
        return f"http://127.0.0.1:{self._port}"

    # -- content ---------------------------------------------------------------------------------------

    def register(self, subject: str, schema: str | dict[str, Any] | list[Any], schema_type: str = "AVRO") -> int:
        """Register ``schema`` under ``subject`` (as a converter does) and return its id."""
        text = schema if isinstance(schema, str) else json.dumps(schema)
        with self._lock:
            schema_id = self._ids_by_text.get((text, schema_type))
            if schema_id is None:
                schema_id = len(self._schemas) + 1
                self._schemas[schema_id] = (text, schema_type)
                self._ids_by_text[(text, schema_type)] = schema_id
            versions = self._subjects.setdefault(subject, [])
            if schema_id not in versions:
                versions.append(schema_id)
        return schema_id

    def add_schema(self, schema_id: int, schema: str | dict[str, Any], schema_type: str = "AVRO") -> None:
        """Serve ``schema`` under a given id (records captured elsewhere carry their own ids)."""
        text = schema if isinstance(schema, str) else json.dumps(schema)
        with self._lock:
            self._schemas[schema_id] = (text, schema_type)
            self._ids_by_text.setdefault((text, schema_type), schema_id)

    def schema_requests(self) -> int:
        """How many ``GET /schemas/ids/...`` requests arrived (retries included)."""
        return sum(1 for r in self.requests if r.path.startswith("/schemas/ids/"))

    # -- HTTP ------------------------------------------------------------------------------------------

    def _authorized(self, header: str | None) -> bool:
        if self.require_basic is not None:
            user, password = self.require_basic
            expected = base64.b64encode(f"{user}:{password}".encode()).decode()
            return header == f"Basic {expected}"
        if self.require_bearer is not None:
            return header == f"Bearer {self.require_bearer}"
        return True

    def answer(self, method: str, path: str, body: bytes, authorization: str | None) -> tuple[int, bytes]:
        """Status and JSON body for one request."""
        path = path.split("?", 1)[0]
        with self._lock:
            self.requests.append(SeenRequest(method, path, authorization))
        if self.unavailable_status is not None:
            return self.unavailable_status, _error(self.unavailable_status * 100, "injected: registry unavailable")
        if self.malformed:
            return 200, b"<html>proxy error</html>"
        if not self._authorized(authorization):
            return 401, _error(40101, "Unauthorized")
        with self._lock:
            return self._route(method, path, body)

    def _route(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        if method == "GET" and (match := _IDS.match(path)):
            found = self._schemas.get(int(match[1]))
            if found is None:
                return 404, _error(40403, "Schema not found")
            text, schema_type = found
            out: dict[str, Any] = {"schema": text}
            if schema_type != "AVRO":
                out["schemaType"] = schema_type
            return 200, json.dumps(out).encode()
        if method == "GET" and path == "/subjects":
            return 200, json.dumps(sorted(self._subjects)).encode()
        if method == "GET" and (match := _VERSIONS.match(path)):
            if match[1] not in self._subjects:
                return 404, _error(40401, "Subject not found")
            return 200, json.dumps(list(range(1, len(self._subjects[match[1]]) + 1))).encode()
        if method == "GET" and (match := _VERSION.match(path)):
            ids = self._subjects.get(match[1])
            if not ids:
                return 404, _error(40401, "Subject not found")
            version = len(ids) if match[2] == "latest" else int(match[2])
            if not 1 <= version <= len(ids):
                return 404, _error(40402, "Version not found")
            schema_id = ids[version - 1]
            text, _ = self._schemas[schema_id]
            reply = {"subject": match[1], "version": version, "id": schema_id, "schema": text}
            return 200, json.dumps(reply).encode()
        if method == "POST" and (match := _VERSIONS.match(path)):
            try:
                request = json.loads(body)
                text = request["schema"]
            except (ValueError, KeyError, TypeError):
                return 422, _error(42201, "Invalid schema")
            schema_type = request.get("schemaType", "AVRO")
            schema_id = self._ids_by_text.get((text, schema_type))
            if schema_id is None:
                schema_id = len(self._schemas) + 1
                self._schemas[schema_id] = (text, schema_type)
                self._ids_by_text[(text, schema_type)] = schema_id
            versions = self._subjects.setdefault(match[1], [])
            if schema_id not in versions:
                versions.append(schema_id)
            return 200, json.dumps({"id": schema_id}).encode()
        return 404, _error(404, f"no route {method} {path}")

    def ids(self) -> Iterator[int]:
        """Every schema id served."""
        with self._lock:
            yield from sorted(self._schemas)


def _error(code: int, message: str) -> bytes:
    return json.dumps({"error_code": code, "message": message}).encode()


class _Handler(BaseHTTPRequestHandler):
    double: RegistryDouble
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature of the base class
        return

    def _handle(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        status, payload = self.double.answer(method, self.path, body, self.headers.get("Authorization"))
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")
