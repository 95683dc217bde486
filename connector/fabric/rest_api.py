"""The Fabric REST API calls that find, create and start an open-mirrored database, with their waits.

``connector init`` and the chain preflight use it; the streaming job reads status through
``connector.fabric.status``. Shapes relied on, from Microsoft's REST reference
(learn.microsoft.com/rest/api/fabric/mirroreddatabase/items, .../mirroreddatabase/mirroring,
.../core/long-running-operations, and the article rest/api/fabric/articles/long-running-operation) and its
OpenAPI source (github.com/microsoft/fabric-rest-api-specs, ``mirroredDatabase/`` and ``common/``)::

    GET  {api}/v1/workspaces/{ws}/mirroredDatabases[?continuationToken=]   "Items - List Mirrored Databases"
         200 {"value": [MirroredDatabase, ...], "continuationToken"?, "continuationUri"?}
    GET  {api}/v1/workspaces/{ws}/mirroredDatabases/{id}                    "Items - Get Mirrored Database"
         200 MirroredDatabase = {"id", "displayName", "description", "type": "MirroredDatabase", "workspaceId",
                                 "properties"?: {"oneLakeTablesPath", "sqlEndpointProperties", ...}}
    POST {api}/v1/workspaces/{ws}/mirroredDatabases                         "Items - Create Mirrored Database"
         body {"displayName", "description"?, "definition": {"parts": [{"path": "mirroring.json",
               "payload": base64(json), "payloadType": "InlineBase64"}]}}
         201 MirroredDatabase | 202 (long-running) | 409 ItemDisplayNameAlreadyInUse; the caller needs the
         Contributor workspace role
    POST {api}/v1/workspaces/{ws}/mirroredDatabases/{id}/startMirroring    "Mirroring - Start Mirroring"  200
    POST {api}/v1/workspaces/{ws}/mirroredDatabases/{id}/getMirroringStatus "Mirroring - Get Mirroring Status"
         200 {"status": "Initializing" | "Initialized" | "Starting" | "Running" | "Paused" | "Stopping" |
              "Stopped", "error"?: ErrorResponse}
    POST {api}/v1/workspaces/{ws}/mirroredDatabases/{id}/getDefinition     "Items - Get Mirrored Database Definition"
         200 {"definition": {"parts": [...]}} | 202 (long-running, its result is that body)
    POST {api}/v1/workspaces/{ws}/mirroredDatabases/{id}/updateDefinition  "Items - Update Mirrored Database Definition"
         body {"definition": {"parts": [...]}}; 200 | 202 (long-running, no result)

Request bodies are JSON and say so (``Content-Type: application/json``: the operations consume it). A list page
names the next one by ``continuationUri`` (and ``continuationToken``); the URI is requested as given, the token
already URL-encoded in it (learn.microsoft.com/rest/api/fabric/articles/pagination: ``"continuationToken":
"ABCsMTAwMDAwLDA%3D"`` beside ``...?continuationToken=ABCsMTAwMDAwLDA%3D``), so it is never encoded twice.

A long-running operation answers ``202`` with ``Location`` (the "Get Operation State" URL,
``{api}/v1/operations/{operationId}``), ``x-ms-operation-id`` and ``Retry-After`` (seconds between polls).
The state is ``{"status": "NotStarted" | "Running" | "Succeeded" | "Failed" | "Undefined",
"percentComplete"?, "error"?: ErrorResponse}``, decided by ``status`` first (a ``Failed`` state need not carry a
``Location``, and its ``error`` is the message to show); once ``Succeeded`` its ``Location`` names
``{api}/v1/operations/{operationId}/result`` ("Get Operation Result"), the created item. Any call may answer
``429`` with ``Retry-After`` (throttling). Every non-2xx body is an ``ErrorResponse``
(``{"errorCode", "message", "requestId"?, "moreDetails"?}``).

Waiting is bounded: every wait of one ``FabricApi`` (throttling and operations alike) counts against its
``max_wait_s``, and each one prints a progress line, so a stuck operation ends in one error line rather
than a hung command. Tokens come from a ``TokenSource`` and never appear in an error or a progress line.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote, urljoin

import httpx
import orjson

from connector.errors import ConnectorError, first_line
from connector.fabric.status_reader import FabricStatusUnreadable, TokenSource

#: A wait the service asked for without saying how long (a 202 or 429 without Retry-After).
DEFAULT_RETRY_AFTER_S = 5.0
#: The shortest wait: a Retry-After of 0 must not turn polling into a busy loop that never uses up the bound.
MIN_WAIT_S = 1.0
#: Operation states that end the polling.
_DONE = frozenset({"succeeded", "failed", "undefined"})

Progress = Callable[[str], None]


class FabricApiError(ConnectorError):
    """One Fabric REST call that did not succeed: what was asked, HTTP status and Fabric's error; no secret."""

    def __init__(self, what: str, status: int | None, code: str | None, message: str) -> None:
        super().__init__(what, status, code, message)
        self.what = what
        self.status = status
        self.code = code
        self.message = message

    def __str__(self) -> str:
        head = f"HTTP {self.status}" if self.status is not None else "no answer"
        detail = ": ".join(part for part in (self.code, self.message) if part)
        return f"{self.what}: {head}" + (f" {detail}" if detail else "")


class FabricApi:
    """A small Fabric REST client: bearer token, throttling and long-running operations handled once.

    Args:
        api_url: ``https://api.fabric.microsoft.com`` (or a test double's URL).
        token: Bearer tokens for the ``https://api.fabric.microsoft.com/.default`` scope.
        max_wait_s: Upper bound of all waits together (Retry-After of 429s and operation polls).
        progress: Where progress lines go (``init`` prints them to stderr).
        sleep, clock: ``time.sleep`` and ``time.monotonic``; replaceable so unit tests need not wait.
    """

    def __init__(
        self,
        api_url: str,
        token: TokenSource,
        *,
        timeout_s: float = 30.0,
        max_wait_s: float = 600.0,
        progress: Progress = lambda line: None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api_url = api_url.rstrip("/")
        self._token = token
        self._client = httpx.Client(timeout=timeout_s, follow_redirects=False)
        self.max_wait_s = max_wait_s
        self._progress = progress
        self._sleep = sleep
        self._clock = clock
        self.waited_s = 0.0

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    def __enter__(self) -> FabricApi:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the mirrored-database calls -------------------------------------------------------------------

    def list_mirrored_databases(self, workspace_id: str) -> list[dict[str, Any]]:
        """Every mirrored database of the workspace: each page's ``continuationUri`` requested as given."""
        url: str | None = f"{self._workspace(workspace_id)}/mirroredDatabases"
        what = f"list the mirrored databases of workspace {workspace_id}"
        items: list[dict[str, Any]] = []
        seen: set[str] = set()
        while url is not None and url not in seen:
            seen.add(url)
            body = self.result(self.call("GET", url, what), what)
            value = body.get("value")
            if isinstance(value, list):
                items.extend(v for v in value if isinstance(v, dict))
            url = self._next_page(url, body)
        return items

    def _next_page(self, url: str, body: Mapping[str, Any]) -> str | None:
        """The next page: ``continuationUri`` as given; only without one, the token (already URL-encoded) appended."""
        uri, token = body.get("continuationUri"), body.get("continuationToken")
        if isinstance(uri, str) and uri:
            return urljoin(self.api_url + "/", uri)
        if isinstance(token, str) and token:
            return f"{url.split('?', 1)[0]}?continuationToken={token}"
        return None

    def get_mirrored_database(self, workspace_id: str, item_id: str) -> dict[str, Any]:
        """The item's properties (``Items - Get Mirrored Database``)."""
        what = f"read mirrored database {item_id}"
        return self.result(self.call("GET", self._item(workspace_id, item_id), what), what)

    def create_mirrored_database(
        self, workspace_id: str, name: str, mirroring: Mapping[str, Any], description: str
    ) -> dict[str, Any]:
        """Create the item with ``mirroring`` as its ``mirroring.json`` part, following a 202 to its result."""
        payload = base64.b64encode(orjson.dumps(mirroring)).decode("ascii")
        body = {
            "displayName": name,
            "description": description,
            "definition": {"parts": [{"path": "mirroring.json", "payload": payload, "payloadType": "InlineBase64"}]},
        }
        what = f"create mirrored database {name!r} in workspace {workspace_id}"
        url = f"{self._workspace(workspace_id)}/mirroredDatabases"
        return self.result(self.call("POST", url, what, body=body), what)

    def get_definition(self, workspace_id: str, item_id: str) -> list[dict[str, Any]]:
        """The definition's parts (``Items - Get Mirrored Database Definition``; a 202 is followed to its result)."""
        what = f"read the definition of mirrored database {item_id}"
        body = self.result(self.call("POST", f"{self._item(workspace_id, item_id)}/getDefinition", what), what)
        parts = (body.get("definition") or {}).get("parts") if isinstance(body.get("definition"), dict) else None
        if not isinstance(parts, list):
            raise FabricApiError(what, 200, "NoDefinition", "the answer has no definition.parts")
        return [p for p in parts if isinstance(p, dict)]

    def update_definition(self, workspace_id: str, item_id: str, parts: list[dict[str, Any]]) -> None:
        """``Items - Update Mirrored Database Definition`` with ``parts`` (a 202 is followed to its end)."""
        what = f"update the definition of mirrored database {item_id}"
        url = f"{self._item(workspace_id, item_id)}/updateDefinition"
        self.result(self.call("POST", url, what, body={"definition": {"parts": parts}}), what)

    def start_mirroring(self, workspace_id: str, item_id: str) -> None:
        """``Mirroring - Start Mirroring`` (a 202 is followed to its end)."""
        what = f"start mirroring of {item_id}"
        self.result(self.call("POST", f"{self._item(workspace_id, item_id)}/startMirroring", what, body={}), what)

    def mirroring_status(self, workspace_id: str, item_id: str) -> tuple[str, str | None]:
        """The database's state and its error (``errorCode: message``), from ``getMirroringStatus``."""
        what = f"read the mirroring status of {item_id}"
        url = f"{self._item(workspace_id, item_id)}/getMirroringStatus"
        body = self.result(self.call("POST", url, what, body={}), what)
        status = body.get("status")
        return (status if isinstance(status, str) and status else "Unknown"), error_text(body.get("error"))

    # -- transport -------------------------------------------------------------------------------------

    def call(
        self,
        method: str,
        url: str,
        what: str,
        *,
        body: Mapping[str, Any] | None = None,
        params: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        """One request; a 429 (or a 503 with Retry-After) is retried after the wait the service asks for.

        Raises:
            FabricApiError: No token, no answer, or throttled past ``max_wait_s``.
        """
        while True:
            headers = {"Authorization": f"Bearer {self._bearer(what)}", "Accept": "application/json"}
            if body is not None:
                headers["Content-Type"] = "application/json"
            try:
                response = self._client.request(
                    method, url, headers=headers, params=params, content=None if body is None else orjson.dumps(body)
                )
            except httpx.HTTPError as exc:
                raise FabricApiError(what, None, type(exc).__name__, first_line(str(exc))) from None
            throttled = response.status_code == 429 or (
                response.status_code == 503 and "Retry-After" in response.headers
            )
            if not throttled:
                return response
            self._wait(response, what, f"throttled (HTTP {response.status_code})")

    def result(self, response: httpx.Response, what: str) -> dict[str, Any]:
        """The JSON body of a success (``{}`` when empty), following a 202 to the operation's end.

        Raises:
            FabricApiError: A refusal, a failed operation, or an operation still running after ``max_wait_s``.
        """
        if response.status_code == 202:
            return self._follow(response, what)
        if response.status_code not in (200, 201):
            raise refusal(what, response)
        return _json_object(response, what)

    def _follow(self, accepted: httpx.Response, what: str) -> dict[str, Any]:
        """Poll the operation as ``Retry-After`` says until its ``status`` ends it; then read its result, if any."""
        response = accepted
        while True:
            state = _json_object(response, what) if response.status_code == 200 else {}
            status = str(state.get("status", "")).lower()
            location = response.headers.get("Location")
            if status in _DONE:
                if status != "succeeded":
                    error = state.get("error")
                    error = error if isinstance(error, dict) else {}
                    code = str(error.get("errorCode") or f"Operation{status.title()}")
                    raise FabricApiError(what, 200, code, first_line(str(error.get("message") or "")))
                return self._operation_result(location, what) if location else {}
            poll = location or self._operation_url(response)
            if not poll:
                # A 202 naming no operation (startMirroring may do this): accepted, nothing to follow.
                return {}
            percent = state.get("percentComplete")
            self._wait(response, what, f"{state.get('status') or 'accepted'}" + (f" {percent}%" if percent else ""))
            response = self.call("GET", urljoin(self.api_url + "/", poll), what)
            if response.status_code not in (200, 202):
                raise refusal(what, response)

    def _operation_url(self, response: httpx.Response) -> str | None:
        """``Get Operation State`` of ``x-ms-operation-id`` when a running state names no ``Location``."""
        operation = response.headers.get("x-ms-operation-id")
        return f"{self.api_url}/v1/operations/{quote(operation, safe='')}" if operation else None

    def _operation_result(self, location: str, what: str) -> dict[str, Any]:
        """``Get Operation Result`` when the finished state names it; some operations have no result."""
        if not location.rstrip("/").endswith("/result"):
            return {}
        response = self.call("GET", urljoin(self.api_url + "/", location), what)
        if response.status_code != 200:
            raise refusal(what, response)
        return _json_object(response, what)

    def _wait(self, response: httpx.Response, what: str, state: str) -> None:
        """Sleep what ``Retry-After`` asks (see ``pause``)."""
        self.pause(_retry_after(response.headers.get("Retry-After")), what, state, response.status_code)

    def pause(self, delay_s: float, what: str, state: str, status: int | None = None) -> None:
        """Sleep ``delay_s`` (at most what is left of ``max_wait_s``) after one progress line.

        Raises:
            FabricApiError: ``WaitExceeded``: the bound is used up and the operation is still ``state``.
        """
        left = self.max_wait_s - self.waited_s
        if left <= 0:
            raise FabricApiError(
                what,
                status,
                "WaitExceeded",
                f"still {state} after waiting {self.waited_s:g}s (the bound is {self.max_wait_s:g}s, --max-wait)",
            )
        delay = min(max(delay_s, MIN_WAIT_S), left)
        self._progress(
            f"{what}: {state}; next check in {delay:g}s (waited {self.waited_s:g}s of at most {self.max_wait_s:g}s)"
        )
        started = self._clock()
        self._sleep(delay)
        self.waited_s += max(delay, self._clock() - started)

    def _bearer(self, what: str) -> str:
        try:
            return self._token()
        except FabricStatusUnreadable as exc:
            raise FabricApiError(what, None, "NoToken", str(exc)) from None

    def _workspace(self, workspace_id: str) -> str:
        return f"{self.api_url}/v1/workspaces/{quote(workspace_id, safe='')}"

    def _item(self, workspace_id: str, item_id: str) -> str:
        return f"{self._workspace(workspace_id)}/mirroredDatabases/{quote(item_id, safe='')}"


def refusal(what: str, response: httpx.Response) -> FabricApiError:
    """A ``FabricApiError`` from a non-2xx answer's ``ErrorResponse`` body (never its headers)."""
    try:
        body = orjson.loads(response.content) if response.content else {}
    except orjson.JSONDecodeError:
        body = {}
    body = body if isinstance(body, dict) else {}
    code = body.get("errorCode")
    message = body.get("message")
    return FabricApiError(
        what,
        response.status_code,
        str(code) if code else None,
        first_line(str(message)) if message else response.reason_phrase,
    )


def error_text(error: Any) -> str | None:
    """``errorCode: message`` of an ``ErrorResponse``, or ``None``."""
    if not isinstance(error, dict):
        return None
    parts = [str(error[k]) for k in ("errorCode", "message") if error.get(k)]
    return ": ".join(parts) or None


def _retry_after(value: str | None) -> float:
    try:
        seconds = float(value) if value is not None else DEFAULT_RETRY_AFTER_S
    except ValueError:
        return DEFAULT_RETRY_AFTER_S
    return max(0.0, seconds)


def _json_object(response: httpx.Response, what: str) -> dict[str, Any]:
    if not response.content:
        return {}
    try:
        body = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        raise FabricApiError(what, response.status_code, "NotJson", first_line(response.text[:200])) from None
    if not isinstance(body, dict):
        raise FabricApiError(what, response.status_code, "NotAnObject", f"a JSON {type(body).__name__}")
    return body
