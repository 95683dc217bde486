"""The HTTP endpoint of a running job: /metrics, /healthz, /readyz and the status page (``/``, ``/status.json``)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import orjson
from prometheus_client import make_wsgi_app

from connector.errors import ConfigError
from connector.operate import status_page
from connector.operate.health import HealthState
from connector.operate.metrics import (
    BOARD,
    DATA_LOST,
    DEAD_LETTERS,
    PUBLISH_ERRORS,
    READY,
    REGISTRY,
    SCHEMA_CHANGES,
    metrics_port_problem,
)

log = logging.getLogger(__name__)


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    """One thread per connection: a browser's idle pre-opened connection must not hold up scrapes and probes."""

    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature of the base class
        """Scrapes are not worth a log line each."""


def table_counters() -> dict[str, dict[str, float]]:
    """This process's per-table counts the status page shows: schema changes, data gaps, dead letters, errors."""
    counters: dict[str, dict[str, float]] = {}
    for name, counter in (
        ("schema_changes", SCHEMA_CHANGES),
        ("data_gaps", DATA_LOST),
        ("dead_letters", DEAD_LETTERS),
        ("publish_errors", PUBLISH_ERRORS),
    ):
        by_table = counters.setdefault(name, {})
        for metric in counter.collect():
            for sample in metric.samples:
                if sample.name.endswith("_total"):
                    table = sample.labels["table"]
                    by_table[table] = by_table.get(table, 0.0) + sample.value
    return counters


def status_app(health: HealthState) -> Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]:
    """The status page's WSGI app: ``/`` (HTML) and ``/status.json``, read-only (GET and HEAD)."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD", "GET") not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Content-Type", "text/plain"), ("Allow", "GET, HEAD")])
            return [b"read-only\n"]
        try:
            snapshot = BOARD.snapshot(health.status(), table_counters())
            if environ.get("PATH_INFO") == "/status.json":
                body = orjson.dumps(snapshot)
                headers = [("Content-Type", "application/json"), *status_page.HEADERS[1:]]
            else:
                query = {k: v[-1] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
                body = status_page.render_page(snapshot, query).encode()
                headers = list(status_page.HEADERS)
        except Exception:  # noqa: BLE001 - the page must never take the metrics endpoint down
            log.exception("the status page could not be rendered")
            start_response("500 Internal Server Error", [("Content-Type", "text/plain")])
            return [b"the status page could not be rendered; see the service's log\n"]
        start_response("200 OK", [*headers, ("Content-Length", str(len(body)))])
        return [b"" if environ.get("REQUEST_METHOD") == "HEAD" else body]

    return app


def serve(
    port: int,
    health: HealthState,
    host: str = "0.0.0.0",  # noqa: S104 - a pod's port
    *,
    page: bool = True,
) -> WSGIServer:
    """Start the HTTP endpoint in a daemon thread; returns the server (``server_port`` is the bound port).

    ``page``: also serve the status page at ``/`` and ``/status.json`` (``metrics.status_page``).

    Raises:
        ConfigError: The port is taken (or not ours to bind); the message names it.
    """
    metrics_app = make_wsgi_app(REGISTRY)
    page_app = status_app(health) if page else None
    # Evaluated at each scrape, like /readyz, so a stall shows without waiting for the next batch.
    READY.set_function(lambda: 1.0 if health.status()[0] else 0.0)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/healthz":
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"ok\n"]
        if path == "/readyz":
            ready, reason = health.status()
            status = "200 OK" if ready else "503 Service Unavailable"
            start_response(status, [("Content-Type", "text/plain")])
            return [f"{reason}\n".encode()]
        if page_app is not None and path in ("/", "/status.json"):
            return page_app(environ, start_response)
        result: Iterable[bytes] = metrics_app(environ, start_response)
        return result

    try:
        server = make_server(host, port, app, server_class=_ThreadingServer, handler_class=_QuietHandler)
    except OSError as exc:
        raise ConfigError(metrics_port_problem(port, exc)) from None
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server
