"""TEST DOUBLE: an in-memory ADLS Gen2 (DFS API) server for driving the real Azure SDK in tests.

This is **not** Azure and not an emulator anyone should deploy. Azurite has no DFS endpoint, so the
test suite brings this small server instead: it implements, in memory, exactly the ADLS Gen2 REST
operations ``OneLakeStorage`` uses, with the status codes, error codes (``x-ms-error-code``) and headers
of the ADLS Gen2 REST reference, so ``azure-storage-file-datalake`` runs against it unmodified over
HTTPS (a throw-away self-signed certificate; the SDK refuses bearer tokens over plain HTTP):

* Filesystem Create / Get Properties / Delete (DFS ``resource=filesystem`` and the Blob
  ``restype=container`` form the SDK actually sends), List Paths (``resource=filesystem&recursive=
  &directory=`` with ``maxResults`` and ``x-ms-continuation``);
* Path Create (file / directory, ``If-None-Match: *`` -> 409 ``PathAlreadyExists``), rename
  (``x-ms-rename-source``, source and destination conditions, 404 ``SourcePathNotFound``, 404
  ``RenameDestinationParentPathNotFound``, 409 ``PathAlreadyExists``), Path Update ``append`` (with
  ``Content-MD5`` checked) and ``flush`` (contiguity checked, 400 ``InvalidFlushPosition``;
  ``x-ms-content-md5`` stored), Path Delete (file, recursive directory, 409 ``DirectoryNotEmpty``);
* the two Blob-endpoint reads the SDK routes through the same host for path-style URLs: Get Blob
  Properties (HEAD, with ``Content-Length``, ``ETag``, ``Content-MD5``, ``x-ms-resource-type``, the
  lease state and ``x-ms-meta-*``) and Get Blob (GET, ``x-ms-range`` / ``Range`` -> 206, 416 on an
  empty file);
* leases, as ``DataLakeLeaseClient`` sends them (Blob Lease Blob, ``PUT ?comp=lease`` with
  ``x-ms-lease-action`` acquire / renew / change / release / break, ``x-ms-lease-id``,
  ``x-ms-proposed-lease-id``, ``x-ms-lease-duration`` 15-60 or -1, ``x-ms-lease-break-period``): 409
  ``LeaseAlreadyPresent``, ``LeaseIdMismatchWithLeaseOperation``, ``LeaseNotPresentWithLeaseOperation``,
  ``LeaseIsBrokenAndCannotBeRenewed``, ``LeaseIsBreakingAndCannotBeAcquired``; fixed leases expire on
  the wall clock. Writes to a leased path (create, append, flush, rename from or onto it, delete, Set
  Blob Metadata ``PUT ?comp=metadata``) need its lease id: 412 ``LeaseIdMissing``,
  ``LeaseIdMismatchWithBlobOperation``, ``LeaseLost`` (the id of an expired lease),
  ``LeaseNotPresentWithBlobOperation`` (an id where there is no lease).

Faults can be switched on at runtime (``set_faults``) with a seeded RNG, and every injected fault is
counted (``injected``): a fraction of requests answered 429/503 with ``Retry-After``; requests left
unanswered past the client's read timeout; connections dropped after reading part of the request body;
requests processed but whose answer is lost (the case that makes retried renames tricky); and 403
``AuthorizationPermissionMismatch`` for everything. Any bearer token, or none, is accepted.

The server also plays an Azure **managed identity endpoint**, App Service style (``GET /msi/token``
with the ``X-IDENTITY-HEADER`` secret, answering ``access_token`` / ``expires_on``), the protocol
azure-identity's ``ManagedIdentityCredential`` and ``DefaultAzureCredential`` use when
``IDENTITY_ENDPOINT`` and ``IDENTITY_HEADER`` are set. With ``managed_identity_environment(server)``
(those two variables plus ``REQUESTS_CA_BUNDLE`` trusting the server's certificate), an unmodified
``python -m connector ... --landing-zone <location_url>`` authenticates through azure-identity's real
code path and reaches this double: nothing in the connector knows it is under test. Which storage
requests carried a token from that endpoint is counted (``authorized``).

Every moment a file's content becomes visible under a path (a flush, or a rename's destination) is
logged in ``content_log``, so a test can prove that no path was ever written twice.

``make_onelake_storage(server, root)`` returns a ``OneLakeStorage`` pointed at a running server, so
other test suites can parametrise over the local and the OneLake backend.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import ipaddress
import itertools
import json
import os
import random
import secrets
import socket
import ssl
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from azure.core.credentials import AccessToken

from connector.storage.credentials import STORAGE_SCOPE, StorageIdentity
from connector.storage.onelake import OneLakeStorage
from connector.storage.onelake.location import parse_location
from connector.storage.retry import RetrySettings
from tests.support.served_http import ServedHttp

#: Retry settings for tests: the same code paths as production, with millisecond waits.
FAST_RETRY = RetrySettings(
    max_retries=10,
    initial_backoff=0.001,
    max_backoff=0.01,
    max_retry_after=0.02,
    connection_timeout=5.0,
    read_timeout=10.0,
)


# --------------------------------------------------------------------------------------------------
# Faults


@dataclass(frozen=True)
class FaultPlan:
    """Which faults the server injects; rates are fractions of all requests (0.0-1.0).

    Attributes:
        transient_rate: Answer 429 or 503 (picked at random from ``transient_statuses``) with
            ``Retry-After: <retry_after>``, without touching the store.
        transient_statuses: Statuses used for transient answers.
        retry_after: Value of the ``Retry-After`` header (seconds).
        timeout_rate: Read the request, then say nothing for ``timeout_seconds`` and close, unprocessed.
        timeout_seconds: How long a "timed out" request hangs; set above the client's read timeout.
        drop_rate: Read part of the request body (or only the headers), then close the connection.
        lose_response_rate: Process the request, then close the connection without answering.
        deny_all: Answer every request 403 ``AuthorizationPermissionMismatch``.
        operations: Only requests of these operations get faults (``create``, ``rename``, ``append``,
            ``flush``, ``properties``, ``read``, ``list``, ``delete``, ``filesystem``, ``identity``); all
            storage operations when ``None`` (the managed identity endpoint only when named here).
        max_faults: Stop injecting after this many faults (e.g. 1 to fail only a first attempt).
    """

    transient_rate: float = 0.0
    transient_statuses: tuple[int, ...] = (429, 503)
    retry_after: str = "0"
    timeout_rate: float = 0.0
    timeout_seconds: float = 1.0
    drop_rate: float = 0.0
    lose_response_rate: float = 0.0
    deny_all: bool = False
    operations: frozenset[str] | None = None
    max_faults: int | None = None


# --------------------------------------------------------------------------------------------------
# In-memory store


@dataclass
class _Node:
    is_dir: bool
    etag: str
    created: float
    modified: float
    data: bytes = b""
    pending: dict[int, bytes] = field(default_factory=dict)
    content_md5: bytes | None = None
    content_type: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    lease: _Lease | None = None


@dataclass
class _Lease:
    """A blob lease on one path; ``state`` as set by lease actions, expiry applied by ``current_state``."""

    lease_id: str
    state: str  # leased | breaking | broken
    duration: int  # seconds, or -1 for an infinite lease
    renewed: float  # wall-clock time of the acquire or the last renew
    break_until: float = 0.0

    @property
    def expires(self) -> float | None:
        """Wall-clock end of a fixed lease; ``None`` for an infinite one."""
        return None if self.duration < 0 else self.renewed + self.duration

    def current_state(self, now: float) -> str:
        if self.state == "leased" and self.expires is not None and now >= self.expires:
            return "expired"
        if self.state == "breaking" and now >= self.break_until:
            return "broken"
        return self.state


@dataclass
class _Filesystem:
    etag: str
    created: float
    nodes: dict[str, _Node] = field(default_factory=dict)


class _Reply(Exception):
    """A complete HTTP answer, raised from deep inside an operation (errors mostly)."""

    def __init__(self, status: int, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        super().__init__(status)
        self.status = status
        self.headers = headers or {}
        self.body = body


def _dfs_error(status: int, code: str, message: str) -> _Reply:
    body = json.dumps({"error": {"code": code, "message": f"{message}\nRequestId:{uuid.uuid4()}"}}).encode()
    return _Reply(status, {"x-ms-error-code": code, "Content-Type": "application/json;charset=utf-8"}, body)


def _blob_error(status: int, code: str, message: str) -> _Reply:
    body = (
        f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{code}</Code>'
        f"<Message>{message}\nRequestId:{uuid.uuid4()}</Message></Error>"
    ).encode()
    return _Reply(status, {"x-ms-error-code": code, "Content-Type": "application/xml"}, body)


def _http_date(ts: float) -> str:
    return format_datetime(dt.datetime.fromtimestamp(ts, dt.UTC), usegmt=True)


def _parent(path: str) -> str:
    return path.rpartition("/")[0]


# --------------------------------------------------------------------------------------------------
# Server


class DfsTestServer:
    """TEST DOUBLE of an ADLS Gen2 account, served over HTTPS on 127.0.0.1 (path-style URLs).

    Use as a context manager, or ``start()`` / ``stop()``. ``url`` is the account endpoint
    (``https://127.0.0.1:<port>/<account>``); ``ca_file`` is the certificate clients must trust.
    """

    def __init__(
        self,
        *,
        account: str = "devaccount",
        seed: int = 0,
        list_page_size: int = 5000,
        rename_checks_destination_first: bool = False,
        request_delay_s: float = 0.0,
    ) -> None:
        """Prepare an empty account; ``start()`` binds a free port.

        Args:
            account: Account name, the first path segment of every URL.
            seed: Seed of the fault RNG, so a failing fault test replays identically.
            list_page_size: Most entries per List Paths page, to exercise continuation tokens.
            rename_checks_destination_first: The REST reference does not say whether a rename whose
                source is gone and whose destination exists answers 404 or 409; this picks 409.
            request_delay_s: Latency added to every storage request (not the identity endpoint's), slept
                before the store is touched and outside its lock, so parallel requests overlap as they
                would over a network (``python -m benchmarks.bench tables --request-ms``).
        """
        self.account = account
        self.request_delay_s = request_delay_s
        self.list_page_size = list_page_size
        self.rename_checks_destination_first = rename_checks_destination_first
        self.injected: Counter[str] = Counter()
        #: Storage requests that reached the store (not faulted), by HTTP method.
        self.requests: Counter[str] = Counter()
        #: The same requests by operation (``create``, ``append``, ``flush``, ``rename``, ``properties``, ``list``, …).
        self.operations: Counter[str] = Counter()
        #: The App Service ``IDENTITY_HEADER`` secret the managed identity endpoint insists on.
        self.identity_header = secrets.token_urlsafe(24)
        #: Tokens the managed identity endpoint handed out, and the resource each was asked for.
        self.issued_tokens: dict[str, str] = {}
        #: Storage requests by credential: ``managed_identity`` (a token issued here), ``other`` or ``none``.
        self.authorized: Counter[str] = Counter()
        #: ``(filesystem, path, sha256 hex)`` each time a file's content became visible at ``path``.
        self.content_log: list[tuple[str, str, str]] = []
        self._faults = FaultPlan()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._filesystems: dict[str, _Filesystem] = {}
        self._etags = itertools.count(0x8DC0000000000000)
        self._served: ServedHttp | None = None
        self.ca_file = str(_certificate()[0])

    # -- lifecycle

    def start(self) -> DfsTestServer:
        cert, key = _certificate()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert), str(key))
        handler = type("_BoundHandler", (_DfsTestHandler,), {"server_double": self})
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        httpd.daemon_threads = True
        # Handshake in the worker thread (see _DfsTestHandler.setup), not in the accept loop.
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True, do_handshake_on_connect=False)
        self._served = ServedHttp(httpd, "DfsTestServer", poll_interval=0.5)
        return self

    def stop(self) -> None:
        if self._served is not None:
            self._served.close()
            self._served = None

    def __enter__(self) -> DfsTestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._served is not None, "server not started"
        return self._served.port

    @property
    def url(self) -> str:
        """The account endpoint, as the SDK's ``account_url``."""
        return f"https://127.0.0.1:{self.port}/{self.account}"

    @property
    def identity_endpoint(self) -> str:
        """The managed identity endpoint, as App Service publishes it in ``IDENTITY_ENDPOINT``."""
        return f"https://127.0.0.1:{self.port}/msi/token"

    def location_url(self, filesystem: str, root: str = "") -> str:
        """A storage URL for ``parse_location``: ``https://127.0.0.1:<port>/<account>/<fs>/<root>``."""
        tail = "/".join(quote(p) for p in root.split("/") if p)
        return f"{self.url}/{quote(filesystem)}" + (f"/{tail}" if tail else "")

    # -- faults

    @property
    def faults(self) -> FaultPlan:
        return self._faults

    def set_faults(self, plan: FaultPlan | None = None, **changes: Any) -> None:
        """Replace the fault plan (or change some of its fields); ``set_faults()`` switches all off."""
        with self._lock:
            base = plan if plan is not None else (self._faults if changes else FaultPlan())
            self._faults = replace(base, **changes)

    def _pick_fault(self, operation: str) -> str | None:
        with self._lock:
            plan = self._faults
            if plan.operations is None and operation == "identity":
                return None
            if plan.operations is not None and operation not in plan.operations:
                return None
            if plan.max_faults is not None and sum(self.injected.values()) >= plan.max_faults:
                return None
            if plan.deny_all:
                self.injected["403"] += 1
                return "403"
            roll = self._rng.random()
            for name, rate in (
                ("transient", plan.transient_rate),
                ("timeout", plan.timeout_rate),
                ("drop", plan.drop_rate),
                ("lose_response", plan.lose_response_rate),
            ):
                if roll < rate:
                    if name == "transient":
                        name = str(self._rng.choice(plan.transient_statuses))
                    self.injected[name] += 1
                    return name
                roll -= rate
            return None

    # -- direct access for assertions (bypasses HTTP and faults)

    def create_filesystem(self, name: str) -> None:
        with self._lock:
            if name not in self._filesystems:
                self._filesystems[name] = _Filesystem(etag=self._new_etag(), created=time.time())

    def file_bytes(self, filesystem: str, path: str) -> bytes | None:
        with self._lock:
            node = self._filesystems[filesystem].nodes.get(path.strip("/"))
            return None if node is None or node.is_dir else node.data

    def paths(self, filesystem: str) -> dict[str, bool]:
        """Every path of ``filesystem`` mapped to whether it is a directory."""
        with self._lock:
            return {p: n.is_dir for p, n in sorted(self._filesystems[filesystem].nodes.items())}

    def log_content(self, filesystem: str, path: str, data: bytes) -> None:
        """Record that ``data`` became visible at ``path`` (called with the lock held)."""
        self.content_log.append((filesystem, path, hashlib.sha256(data).hexdigest()))

    # -- store operations (called with self._lock held)

    def _new_etag(self) -> str:
        return f'"0x{next(self._etags):X}"'

    def _fs(self, name: str, *, blob: bool = False) -> _Filesystem:
        fs = self._filesystems.get(name)
        if fs is None:
            if blob:
                raise _blob_error(404, "ContainerNotFound", "The specified container does not exist.")
            raise _dfs_error(404, "FilesystemNotFound", "The specified filesystem does not exist.")
        return fs

    def _ensure_dirs(self, fs: _Filesystem, folder: str) -> None:
        parts = [p for p in folder.split("/") if p]
        now = time.time()
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            node = fs.nodes.get(prefix)
            if node is None:
                fs.nodes[prefix] = _Node(is_dir=True, etag=self._new_etag(), created=now, modified=now)
            elif not node.is_dir:
                raise _dfs_error(
                    409,
                    "PathConflict",
                    "The specified path, or an element of the path, exists and its resource type is invalid "
                    "for this operation.",
                )


def _check_conditions(node: _Node | None, headers: Any, prefix: str = "") -> None:
    """Apply If-Match / If-None-Match (``prefix='x-ms-source-'`` for a rename source)."""
    if_match = headers.get(f"{prefix}if-match")
    if_none_match = headers.get(f"{prefix}if-none-match")
    source = bool(prefix)
    if if_none_match is not None:
        if if_none_match.strip() == "*" and node is not None:
            if source:
                raise _dfs_error(412, "SourceConditionNotMet", "The source condition specified was not met.")
            raise _dfs_error(409, "PathAlreadyExists", "The specified path already exists.")
        if node is not None and if_none_match.strip() == node.etag:
            code = "SourceConditionNotMet" if source else "ConditionNotMet"
            raise _dfs_error(412, code, "The condition specified using HTTP conditional header(s) is not met.")
    if if_match is not None and (node is None or (if_match.strip() != "*" and if_match.strip() != node.etag)):
        code = "SourceConditionNotMet" if source else "ConditionNotMet"
        raise _dfs_error(412, code, "The condition specified using HTTP conditional header(s) is not met.")


def _check_lease(node: _Node | None, headers: Any, header: str = "x-ms-lease-id", *, blob: bool = False) -> None:
    """Refuse a write to a leased path without its lease id (412), as the Blob and DFS APIs do.

    ``header`` is ``x-ms-source-lease-id`` for the source of a rename; ``blob`` picks the Blob
    endpoint's XML error form.
    """
    error = _blob_error if blob else _dfs_error
    given = headers.get(header)
    state = "available" if node is None or node.lease is None else node.lease.current_state(time.time())
    if state in {"leased", "breaking"}:
        assert node is not None and node.lease is not None
        if not given:
            raise error(
                412,
                "LeaseIdMissing",
                "There is currently a lease on the resource and no lease ID was specified in the request.",
            )
        if given != node.lease.lease_id:
            raise error(
                412,
                "LeaseIdMismatchWithBlobOperation",
                "The lease ID specified did not match the lease ID for the resource.",
            )
        return
    if given:
        if state == "expired" and node is not None and node.lease is not None and given == node.lease.lease_id:
            raise error(412, "LeaseLost", "A lease ID was specified, but the lease for the resource has expired.")
        raise error(412, "LeaseNotPresentWithBlobOperation", "There is currently no lease on the resource.")


class _DfsTestHandler(BaseHTTPRequestHandler):
    """Request handler of the TEST DOUBLE; one instance per connection."""

    server_double: DfsTestServer
    protocol_version = "HTTP/1.1"
    timeout = 30  # a stuck client must not pin a server thread forever

    # -- plumbing

    def setup(self) -> None:
        # Headers and body go out in separate writes; without NODELAY, Nagle + delayed ACK add 40 ms.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(self.timeout)
            self.request.do_handshake()
        super().setup()

    def handle(self) -> None:
        try:
            super().handle()
        except (ConnectionError, ssl.SSLError, TimeoutError, OSError):
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature of the base class
        """Stay quiet: pytest shows failures, not every request."""

    def do_GET(self) -> None:
        self._dispatch()

    def do_HEAD(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_PATCH(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def _dispatch(self) -> None:
        double = self.server_double
        length = int(self.headers.get("Content-Length") or 0)
        operation = self._operation()
        if double.request_delay_s and operation != "identity":
            time.sleep(double.request_delay_s)
        fault = double._pick_fault(operation)
        if fault == "drop":
            # Read part of the body, then hang up: the client sees a reset mid-upload.
            if length:
                self.rfile.read(max(1, length // 2))
            self._hang_up()
            return
        body = self.rfile.read(length) if length else b""
        if fault == "timeout":
            time.sleep(double.faults.timeout_seconds)
            self._hang_up()
            return
        if fault == "403":
            reply = _dfs_error(
                403,
                "AuthorizationPermissionMismatch",
                "This request is not authorized to perform this operation using this permission.",
            )
        elif fault in {"429", "503"}:
            status = int(fault)
            code = "TooManyRequests" if status == 429 else "ServerBusy"
            reply = _dfs_error(status, code, "Operations per second is over the account limit.")
            reply.headers["Retry-After"] = double.faults.retry_after
        else:
            try:
                with double._lock:
                    reply = self._route(body)
            except _Reply as err:
                reply = err
        if fault == "lose_response":
            self._hang_up()
            return
        self._send(reply)

    def _operation(self) -> str:
        """Name the operation a request is, for targeted faults (cheap: no body, no store)."""
        parts = urlsplit(self.path)
        if parts.path.rstrip("/") == _IDENTITY_PATH:
            return "identity"
        query = parse_qs(parts.query)
        if "restype" in query or (query.get("resource") == ["filesystem"] and self.command != "GET"):
            return "filesystem"
        if self.command == "GET":
            return "list" if query.get("resource") == ["filesystem"] else "read"
        if self.command == "PUT":
            if query.get("comp") in (["lease"], ["metadata"]):
                return query["comp"][0]
            return "rename" if self.headers.get("x-ms-rename-source") else "create"
        if self.command == "PATCH":
            return query.get("action", ["update"])[0]
        return {"HEAD": "properties", "DELETE": "delete"}.get(self.command, self.command.lower())

    def _hang_up(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _send(self, reply: _Reply) -> None:
        self.send_response(reply.status)
        headers = {
            "x-ms-request-id": str(uuid.uuid4()),
            "x-ms-version": self.headers.get("x-ms-version", "2025-05-05"),
            "Server": "DfsTestServer (test double)",
            **reply.headers,
        }
        if "Content-Length" not in headers:
            headers["Content-Length"] = str(len(reply.body))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD" and reply.body:
            self.wfile.write(reply.body)

    # -- routing

    def _route(self, body: bytes) -> _Reply:
        double = self.server_double
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        if parts.path.rstrip("/") == _IDENTITY_PATH:
            return self._identity_token(query)
        double.requests[self.command] += 1
        double.operations[self._operation()] += 1
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            double.authorized["none"] += 1
        else:
            double.authorized["managed_identity" if token in double.issued_tokens else "other"] += 1
        segments = [unquote(s) for s in parts.path.split("/")[1:]]
        if not segments or segments[0] != double.account:
            raise _dfs_error(400, "InvalidUri", "The requested URI does not represent any resource on the server.")
        fs_name = segments[1] if len(segments) > 1 else ""
        path = "/".join(s for s in segments[2:] if s)
        if not fs_name:
            raise _dfs_error(400, "InvalidUri", "Account-level operations are not supported by this test double.")
        container_op = query.get("restype") == "container" or (not path and query.get("resource") == "filesystem")
        if container_op and not (self.command == "GET" and query.get("resource") == "filesystem"):
            return self._filesystem_op(fs_name, blob=query.get("restype") == "container")
        if self.command == "GET" and query.get("resource") == "filesystem":
            return self._list(fs_name, query)
        if not path:
            raise _dfs_error(400, "InvalidUri", "A path is required.")
        if self.command == "PUT":
            if query.get("comp") == "lease":
                return self._lease(fs_name, path)
            if query.get("comp") == "metadata":
                return self._set_metadata(fs_name, path)
            if self.headers.get("x-ms-rename-source"):
                return self._rename(fs_name, path)
            return self._create(fs_name, path, query)
        if self.command == "PATCH":
            return self._update(fs_name, path, query, body)
        if self.command == "HEAD":
            return self._properties(fs_name, path, dfs="action" in query)
        if self.command == "GET":
            return self._read(fs_name, path)
        if self.command == "DELETE":
            return self._delete(fs_name, path, query)
        raise _dfs_error(405, "UnsupportedHttpVerb", "The resource doesn't support the specified HTTP verb.")

    # -- managed identity endpoint (App Service protocol, api-version 2019-08-01)

    def _identity_token(self, query: dict[str, str]) -> _Reply:
        double = self.server_double
        json_type = {"Content-Type": "application/json; charset=utf-8"}
        if self.command != "GET":
            return _Reply(405, json_type, b'{"statusCode":405,"message":"GET only"}')
        if self.headers.get("X-IDENTITY-HEADER") != double.identity_header:
            body = {"statusCode": 401, "message": "X-IDENTITY-HEADER is missing or does not match IDENTITY_HEADER"}
            return _Reply(401, json_type, json.dumps(body).encode())
        resource = query.get("resource", "")
        if query.get("api-version") != "2019-08-01" or not resource:
            body = {"statusCode": 400, "message": "api-version=2019-08-01 and resource are required"}
            return _Reply(400, json_type, json.dumps(body).encode())
        client_id = query.get("client_id", _IDENTITY_CLIENT_ID)
        expires_on = int(time.time()) + 3600
        # JWT-shaped like a real one (azure-identity's debug log reads its claims), but unsigned.
        claims = {"aud": resource, "appid": client_id, "tid": _IDENTITY_TENANT_ID, "exp": expires_on}
        token = ".".join(
            _b64url(json.dumps(part).encode())
            for part in ({"alg": "none", "typ": "JWT"}, {**claims, "jti": uuid.uuid4().hex})
        )
        token += "." + _b64url(b"dfs-test-double-unsigned")
        double.issued_tokens[token] = resource
        answer = {
            "access_token": token,
            "expires_on": str(expires_on),
            "resource": resource,
            "token_type": "Bearer",
            "client_id": client_id,
        }
        return _Reply(200, json_type, json.dumps(answer).encode())

    # -- filesystem (container) operations

    def _filesystem_op(self, name: str, *, blob: bool) -> _Reply:
        double = self.server_double
        error = _blob_error if blob else _dfs_error
        if self.command == "PUT":
            if name in double._filesystems:
                code = "ContainerAlreadyExists" if blob else "FilesystemAlreadyExists"
                raise error(409, code, "The specified filesystem already exists.")
            double._filesystems[name] = _Filesystem(etag=double._new_etag(), created=time.time())
            fs = double._filesystems[name]
            return _Reply(201, {"ETag": fs.etag, "Last-Modified": _http_date(fs.created)})
        if self.command in {"HEAD", "GET"}:
            fs = double._fs(name, blob=blob)
            headers = {
                "ETag": fs.etag,
                "Last-Modified": _http_date(fs.created),
                "x-ms-namespace-enabled": "true",
                "x-ms-lease-state": "available",
                "x-ms-lease-status": "unlocked",
                "x-ms-has-immutability-policy": "false",
                "x-ms-has-legal-hold": "false",
            }
            return _Reply(200, headers)
        if self.command == "DELETE":
            double._fs(name, blob=blob)
            del double._filesystems[name]
            return _Reply(202)
        raise _dfs_error(405, "UnsupportedHttpVerb", "The resource doesn't support the specified HTTP verb.")

    def _list(self, fs_name: str, query: dict[str, str]) -> _Reply:
        double = self.server_double
        fs = double._fs(fs_name)
        if "recursive" not in query:
            raise _dfs_error(400, "MissingRequiredQueryParameter", "recursive is required.")
        recursive = query["recursive"].lower() == "true"
        folder = query.get("directory", "").strip("/")
        if folder and folder not in fs.nodes:
            raise _dfs_error(404, "PathNotFound", "The specified path does not exist.")
        if folder and not fs.nodes[folder].is_dir:
            names = [folder]
        else:
            prefix = f"{folder}/" if folder else ""
            names = sorted(p for p in fs.nodes if p.startswith(prefix) and (recursive or "/" not in p[len(prefix) :]))
        page_size = min(int(query.get("maxResults") or double.list_page_size), double.list_page_size)
        start = 0
        if query.get("continuation"):
            after = base64.urlsafe_b64decode(query["continuation"].encode()).decode()
            start = next((i for i, n in enumerate(names) if n > after), len(names))
        page = names[start : start + page_size]
        entries = []
        for name in page:
            node = fs.nodes[name]
            entry = {
                "name": name,
                "contentLength": str(len(node.data)),
                "lastModified": _http_date(node.modified),
                "etag": node.etag.strip('"'),
                "owner": "$superuser",
                "group": "$superuser",
                "permissions": "rwxr-x---" if node.is_dir else "rw-r-----",
            }
            if node.is_dir:
                entry["isDirectory"] = "true"
                entry["contentLength"] = "0"
            entries.append(entry)
        headers = {"Content-Type": "application/json;charset=utf-8"}
        if start + page_size < len(names) and page:
            headers["x-ms-continuation"] = base64.urlsafe_b64encode(page[-1].encode()).decode()
        return _Reply(200, headers, json.dumps({"paths": entries}).encode())

    # -- path operations

    def _create(self, fs_name: str, path: str, query: dict[str, str]) -> _Reply:
        double = self.server_double
        resource = query.get("resource")
        if resource not in {"file", "directory"}:
            raise _dfs_error(400, "InvalidQueryParameterValue", "resource must be 'file' or 'directory'.")
        fs = double._fs(fs_name)
        node = fs.nodes.get(path)
        _check_conditions(node, self.headers)
        _check_lease(node, self.headers)
        if node is not None and node.is_dir != (resource == "directory"):
            raise _dfs_error(
                409, "PathConflict", "The specified path exists and its resource type is invalid for this operation."
            )
        double._ensure_dirs(fs, _parent(path))
        now = time.time()
        if node is not None and node.is_dir:
            node.etag, node.modified = double._new_etag(), now
        else:
            node = _Node(is_dir=resource == "directory", etag=double._new_etag(), created=now, modified=now)
            node.content_type = self.headers.get("x-ms-content-type")
            fs.nodes[path] = node
        return _Reply(
            201,
            {"ETag": node.etag, "Last-Modified": _http_date(node.modified), "x-ms-request-server-encrypted": "true"},
        )

    def _rename(self, fs_name: str, path: str) -> _Reply:
        double = self.server_double
        raw_source = self.headers["x-ms-rename-source"].split("?", 1)[0]
        src_segments = [unquote(s) for s in raw_source.split("/") if s]
        if len(src_segments) < 2:
            raise _dfs_error(400, "InvalidSourceUri", "The source URI is invalid.")
        src_fs = double._fs(src_segments[0])
        src_path = "/".join(src_segments[1:])
        fs = double._fs(fs_name)
        source = src_fs.nodes.get(src_path)
        dest = fs.nodes.get(path)
        if double.rename_checks_destination_first:
            _check_conditions(dest, self.headers)
        if source is None:
            raise _dfs_error(404, "SourcePathNotFound", "The source path for a rename operation does not exist.")
        _check_conditions(source, self.headers, prefix="x-ms-source-")
        _check_conditions(dest, self.headers)
        _check_lease(source, self.headers, "x-ms-source-lease-id")
        _check_lease(dest, self.headers)
        parent = _parent(path)
        if parent and (parent not in fs.nodes or not fs.nodes[parent].is_dir):
            raise _dfs_error(
                404,
                "RenameDestinationParentPathNotFound",
                "The parent directory of the destination path does not exist.",
            )
        if src_fs is fs and src_path == path:
            return _Reply(201, {"ETag": source.etag, "Last-Modified": _http_date(source.modified)})
        if dest is not None and (dest.is_dir or source.is_dir):
            raise _dfs_error(409, "PathConflict", "The destination path exists and is a directory.")
        moved = {p: n for p, n in src_fs.nodes.items() if p == src_path or p.startswith(src_path + "/")}
        for p in moved:
            del src_fs.nodes[p]
        for p, n in moved.items():
            fs.nodes[path + p[len(src_path) :]] = n
            if not n.is_dir:
                double.log_content(fs_name, path + p[len(src_path) :], n.data)
        return _Reply(201, {"ETag": source.etag, "Last-Modified": _http_date(source.modified)})

    def _update(self, fs_name: str, path: str, query: dict[str, str], body: bytes) -> _Reply:
        double = self.server_double
        action = query.get("action")
        fs = double._fs(fs_name)
        node = fs.nodes.get(path)
        if action not in {"append", "flush"}:
            raise _dfs_error(
                400, "InvalidQueryParameterValue", f"action {action!r} is not supported by this test double."
            )
        if node is None:
            raise _dfs_error(404, "PathNotFound", "The specified path does not exist.")
        if node.is_dir:
            raise _dfs_error(409, "InvalidFlushOperation", "The resource is a directory.")
        if "position" not in query:
            raise _dfs_error(400, "MissingRequiredQueryParameter", "position is required.")
        _check_lease(node, self.headers)
        position = int(query["position"])
        if action == "append":
            md5 = self.headers.get("Content-MD5")
            if md5 and base64.b64decode(md5) != hashlib.md5(body, usedforsecurity=False).digest():
                raise _dfs_error(
                    400,
                    "Md5Mismatch",
                    "The MD5 value specified in the request did not match the MD5 value calculated by the server.",
                )
            node.pending[position] = body
            return _Reply(202, {"x-ms-request-server-encrypted": "true"})
        _check_conditions(node, self.headers)
        cursor, pieces = len(node.data), []
        while cursor < position:
            piece = node.pending.get(cursor)
            if not piece:
                break
            pieces.append(piece)
            cursor += len(piece)
        if cursor != position:
            raise _dfs_error(
                400,
                "InvalidFlushPosition",
                "The uploaded data is not contiguous or the position query parameter value is not equal to "
                "the length of the file after appending the uploaded data.",
            )
        node.data += b"".join(pieces)
        if query.get("retainUncommittedData", "false").lower() != "true":
            node.pending.clear()
        md5_header = self.headers.get("x-ms-content-md5")
        node.content_md5 = base64.b64decode(md5_header) if md5_header else None
        node.content_type = self.headers.get("x-ms-content-type") or node.content_type
        node.etag, node.modified = double._new_etag(), time.time()
        double.log_content(fs_name, path, node.data)
        return _Reply(
            200,
            {"ETag": node.etag, "Last-Modified": _http_date(node.modified), "x-ms-request-server-encrypted": "true"},
        )

    def _node(self, fs_name: str, path: str, *, dfs: bool) -> _Node:
        fs = self.server_double._fs(fs_name, blob=not dfs)
        node = fs.nodes.get(path)
        if node is None:
            if dfs:
                raise _dfs_error(404, "PathNotFound", "The specified path does not exist.")
            raise _blob_error(404, "BlobNotFound", "The specified blob does not exist.")
        return node

    def _path_headers(self, node: _Node) -> dict[str, str]:
        headers = {
            "ETag": node.etag,
            "Last-Modified": _http_date(node.modified),
            "x-ms-creation-time": _http_date(node.created),
            "x-ms-resource-type": "directory" if node.is_dir else "file",
            "x-ms-blob-type": "BlockBlob",
            "x-ms-server-encrypted": "true",
            "Accept-Ranges": "bytes",
            "Content-Type": node.content_type or "application/octet-stream",
        }
        state = "available" if node.lease is None else node.lease.current_state(time.time())
        headers["x-ms-lease-state"] = state
        headers["x-ms-lease-status"] = "locked" if state in {"leased", "breaking"} else "unlocked"
        if state == "leased" and node.lease is not None:
            headers["x-ms-lease-duration"] = "infinite" if node.lease.expires is None else "fixed"
        for name, value in node.metadata.items():
            headers[f"x-ms-meta-{name}"] = value
        if node.is_dir:
            headers["x-ms-meta-hdi_isfolder"] = "true"
        return headers

    def _properties(self, fs_name: str, path: str, *, dfs: bool) -> _Reply:
        node = self._node(fs_name, path, dfs=dfs)
        headers = self._path_headers(node)
        headers["Content-Length"] = str(len(node.data))
        if node.content_md5 is not None:
            headers["Content-MD5"] = base64.b64encode(node.content_md5).decode()
        return _Reply(200, headers)

    def _read(self, fs_name: str, path: str) -> _Reply:
        node = self._node(fs_name, path, dfs=False)
        if_match = self.headers.get("If-Match")
        if if_match and if_match.strip() not in {"*", node.etag}:
            raise _blob_error(
                412, "ConditionNotMet", "The condition specified using HTTP conditional header(s) is not met."
            )
        headers = self._path_headers(node)
        md5 = base64.b64encode(node.content_md5).decode() if node.content_md5 is not None else None
        spec = self.headers.get("x-ms-range") or self.headers.get("Range")
        size = len(node.data)
        if not spec:
            if md5:
                headers["Content-MD5"] = md5
            return _Reply(200, headers, node.data)
        start_text, _, end_text = spec.removeprefix("bytes=").partition("-")
        start = int(start_text)
        end = min(int(end_text), size - 1) if end_text else size - 1
        if start >= size:
            reply = _blob_error(
                416, "InvalidRange", "The range specified is invalid for the current size of the resource."
            )
            reply.headers["Content-Range"] = f"bytes */{size}"
            raise reply
        headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        if md5:
            headers["x-ms-blob-content-md5"] = md5
        return _Reply(206, headers, node.data[start : end + 1])

    def _delete(self, fs_name: str, path: str, query: dict[str, str]) -> _Reply:
        fs = self.server_double._fs(fs_name)
        node = fs.nodes.get(path)
        if node is None:
            raise _dfs_error(404, "PathNotFound", "The specified path does not exist.")
        _check_lease(node, self.headers)
        children = [p for p in fs.nodes if p.startswith(path + "/")]
        if node.is_dir and children and query.get("recursive", "false").lower() != "true":
            raise _dfs_error(
                409,
                "DirectoryNotEmpty",
                "The recursive query parameter value must be true to delete a non-empty directory.",
            )
        for p in [path, *children]:
            del fs.nodes[p]
        return _Reply(200)

    # -- leases (Blob Lease Blob, which DataLakeLeaseClient sends) and Set Blob Metadata

    def _lease(self, fs_name: str, path: str) -> _Reply:
        node = self._node(fs_name, path, dfs=False)
        action = (self.headers.get("x-ms-lease-action") or "").lower()
        given = self.headers.get("x-ms-lease-id")
        proposed = self.headers.get("x-ms-proposed-lease-id")
        now = time.time()
        lease = node.lease
        state = "available" if lease is None else lease.current_state(now)
        mismatch = _blob_error(
            409, "LeaseIdMismatchWithLeaseOperation", "The lease ID specified did not match the lease ID for the blob."
        )
        absent = _blob_error(409, "LeaseNotPresentWithLeaseOperation", "There is currently no lease on the blob.")
        if action == "acquire":
            duration = self._lease_duration()
            if state == "breaking":
                raise _blob_error(
                    409, "LeaseIsBreakingAndCannotBeAcquired", "There is already a lease present and it is breaking."
                )
            if state == "leased" and lease is not None and proposed != lease.lease_id:
                raise _blob_error(409, "LeaseAlreadyPresent", "There is already a lease present.")
            lease_id = proposed or str(uuid.uuid4())
            node.lease = _Lease(lease_id, "leased", duration, now)
            return _Reply(201, {**self._lease_headers(node), "x-ms-lease-id": lease_id})
        if action in {"renew", "change", "release"} and not given:
            raise _blob_error(400, "MissingRequiredHeader", "x-ms-lease-id is required.")
        if action == "renew":
            if lease is None or state == "available":
                raise absent
            if given != lease.lease_id:
                raise mismatch
            if state in {"breaking", "broken"}:
                raise _blob_error(409, "LeaseIsBrokenAndCannotBeRenewed", "The lease has been broken explicitly.")
            # An expired lease renews too, as long as nobody acquired the path since.
            lease.state, lease.renewed = "leased", now
            return _Reply(200, {**self._lease_headers(node), "x-ms-lease-id": lease.lease_id})
        if action == "change":
            if lease is None or state != "leased":
                raise absent
            if given != lease.lease_id and proposed != lease.lease_id:
                raise mismatch
            lease.lease_id = proposed or lease.lease_id
            return _Reply(200, {**self._lease_headers(node), "x-ms-lease-id": lease.lease_id})
        if action == "release":
            if lease is None or state == "available":
                raise absent
            if given != lease.lease_id:
                raise mismatch
            node.lease = None
            return _Reply(200, self._lease_headers(node))
        if action == "break":
            if lease is None or state == "available":
                raise absent
            # The break period defaults to what is left of a fixed lease (0 for an infinite one) and
            # never outlasts it.
            period_text = self.headers.get("x-ms-lease-break-period")
            remaining = 0.0 if lease.expires is None else max(0.0, lease.expires - now)
            period = remaining if period_text is None else float(period_text)
            if lease.expires is not None:
                period = min(period, remaining)
            if state in {"expired", "broken"} or period <= 0:
                lease.state, lease.break_until = "broken", now
            elif state == "leased":
                lease.state, lease.break_until = "breaking", now + period
            left = max(0.0, lease.break_until - now)
            return _Reply(202, {**self._lease_headers(node), "x-ms-lease-time": str(int(left))})
        raise _blob_error(400, "InvalidHeaderValue", f"x-ms-lease-action {action!r} is not valid.")

    def _lease_duration(self) -> int:
        text = self.headers.get("x-ms-lease-duration")
        try:
            duration = int(text or "")
        except ValueError:
            duration = 0
        if duration != -1 and not 15 <= duration <= 60:
            raise _blob_error(400, "InvalidHeaderValue", "x-ms-lease-duration must be -1 or between 15 and 60.")
        return duration

    def _lease_headers(self, node: _Node) -> dict[str, str]:
        return {"ETag": node.etag, "Last-Modified": _http_date(node.modified)}

    def _set_metadata(self, fs_name: str, path: str) -> _Reply:
        node = self._node(fs_name, path, dfs=False)
        _check_lease(node, self.headers, blob=True)
        _check_conditions(node, self.headers)
        prefix = "x-ms-meta-"
        node.metadata = {k[len(prefix) :]: v for k, v in self.headers.items() if k.lower().startswith(prefix)}
        node.metadata.pop("hdi_isfolder", None)
        node.etag, node.modified = self.server_double._new_etag(), time.time()
        return _Reply(200, {"ETag": node.etag, "Last-Modified": _http_date(node.modified)})


_IDENTITY_PATH = "/msi/token"
_IDENTITY_CLIENT_ID = "00000000-0000-4000-8000-00000000d0b1"
_IDENTITY_TENANT_ID = "00000000-0000-4000-8000-0000000000aa"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


# --------------------------------------------------------------------------------------------------
# TLS certificate (one per test process)

_CERT_LOCK = threading.Lock()
_CERT: tuple[Path, Path] | None = None


def _certificate() -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 / localhost, made once per process."""
    global _CERT
    with _CERT_LOCK:
        if _CERT is None:
            from cryptography import x509
            from cryptography.hazmat.primitives import hashes, serialization
            from cryptography.hazmat.primitives.asymmetric import ec
            from cryptography.x509.oid import NameOID

            key = ec.generate_private_key(ec.SECP256R1())
            name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "DfsTestServer test double")])
            now = dt.datetime.now(dt.UTC)
            cert = (
                x509.CertificateBuilder()
                .subject_name(name)
                .issuer_name(name)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(minutes=5))
                .not_valid_after(now + dt.timedelta(days=2))
                .add_extension(
                    x509.SubjectAlternativeName(
                        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                    ),
                    critical=False,
                )
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                .sign(key, hashes.SHA256())
            )
            folder = Path(tempfile.mkdtemp(prefix="dfs-test-server-"))
            cert_path, key_path = folder / "cert.pem", folder / "key.pem"
            cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
            key_path.write_bytes(
                key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                )
            )
            _CERT = (cert_path, key_path)
        return _CERT


# --------------------------------------------------------------------------------------------------
# Client-side helpers


class FakeTokenCredential:
    """TEST DOUBLE of an azure-identity credential: hands out a fixed token, records the scopes asked.

    The token can be set to a recognisable "secret" so tests can prove it never reaches a message.
    """

    def __init__(self, token: str = "fake-token-for-dfs-test-server") -> None:
        self.token = token
        self.scopes_requested: list[tuple[str, ...]] = []

    def get_token(
        self,
        *scopes: str,
        claims: str | None = None,
        tenant_id: str | None = None,
        enable_cae: bool = False,
        **kwargs: Any,
    ) -> AccessToken:
        self.scopes_requested.append(scopes)
        return AccessToken(self.token, int(time.time()) + 3600)

    def close(self) -> None:
        pass


def fake_identity(
    token: str = "fake-token-for-dfs-test-server", description: str = "fake-test-token"
) -> StorageIdentity:
    """A ``StorageIdentity`` backed by ``FakeTokenCredential`` (a test double)."""
    return StorageIdentity(credential=FakeTokenCredential(token), kind="fake", description=description)


#: azure-identity settings that would select another credential, or another managed identity source,
#: than the double's App Service-style endpoint; ``managed_identity_environment`` users unset them.
OTHER_IDENTITY_VARIABLES = (
    "AZURE_CLIENT_ID",
    "AZURE_TENANT_ID",
    "AZURE_CLIENT_SECRET",
    "AZURE_CLIENT_CERTIFICATE_PATH",
    "AZURE_CLIENT_CERTIFICATE_PASSWORD",
    "AZURE_FEDERATED_TOKEN_FILE",
    "AZURE_USERNAME",
    "AZURE_PASSWORD",
    "IDENTITY_SERVER_THUMBPRINT",
    "IMDS_ENDPOINT",
    "MSI_ENDPOINT",
    "MSI_SECRET",
)


def managed_identity_environment(server: DfsTestServer) -> dict[str, str]:
    """Environment that points azure-identity's managed identity at ``server`` and trusts its certificate.

    ``IDENTITY_ENDPOINT`` / ``IDENTITY_HEADER`` are what App Service sets for its managed identity;
    ``REQUESTS_CA_BUNDLE`` is the standard way to make ``requests`` (azure-core's default transport, for
    both the token and the storage requests) trust a private CA: here the system bundle plus the
    double's self-signed certificate. Unset ``OTHER_IDENTITY_VARIABLES`` too.
    """
    return {
        "IDENTITY_ENDPOINT": server.identity_endpoint,
        "IDENTITY_HEADER": server.identity_header,
        "REQUESTS_CA_BUNDLE": str(_ca_bundle()),
    }


_BUNDLE: Path | None = None


def _ca_bundle() -> Path:
    """The CAs this process trusts, plus the double's certificate, in one PEM file (made once)."""
    global _BUNDLE
    with _CERT_LOCK:
        if _BUNDLE is not None:
            return _BUNDLE
    import certifi

    cert = _certificate()[0]
    base = Path(os.environ.get("REQUESTS_CA_BUNDLE") or certifi.where())
    bundle = cert.parent / "ca-bundle.pem"
    bundle.write_bytes(base.read_bytes().rstrip(b"\n") + b"\n" + cert.read_bytes())
    with _CERT_LOCK:
        _BUNDLE = bundle
    return bundle


def make_onelake_storage(
    server: DfsTestServer,
    root: str,
    *,
    filesystem: str = "workspace",
    retry: RetrySettings | None = None,
    identity: StorageIdentity | None = None,
) -> OneLakeStorage:
    """A ``OneLakeStorage`` on ``server`` rooted at ``<filesystem>/<root>`` (the filesystem is created)."""
    server.create_filesystem(filesystem)
    location = parse_location(server.location_url(filesystem, root))
    return OneLakeStorage(location, identity or fake_identity(), retry or FAST_RETRY, ca_bundle=server.ca_file)


def iter_files(server: DfsTestServer, filesystem: str, root: str = "") -> Iterator[str]:
    """Paths of the files (not directories) under ``root`` in ``filesystem``, relative to ``root``."""
    prefix = f"{root.strip('/')}/" if root.strip("/") else ""
    for path, is_dir in server.paths(filesystem).items():
        if not is_dir and path.startswith(prefix):
            yield path[len(prefix) :]


__all__ = [
    "FAST_RETRY",
    "STORAGE_SCOPE",
    "DfsTestServer",
    "FakeTokenCredential",
    "FaultPlan",
    "OTHER_IDENTITY_VARIABLES",
    "fake_identity",
    "iter_files",
    "make_onelake_storage",
    "managed_identity_environment",
]
