"""Serving a test double's ``ThreadingHTTPServer`` on 127.0.0.1 from a daemon thread, and stopping it.

Shared by the HTTP test doubles (Fabric REST API, schema registry, OneLake DFS): each builds its own server
(handler, TLS), then hands it here.
"""

from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer


class ServedHttp:
    """``httpd`` served until ``close``."""

    def __init__(self, httpd: ThreadingHTTPServer, name: str, poll_interval: float = 0.02) -> None:
        self.httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": poll_interval}, name=name, daemon=True
        )
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=10)
