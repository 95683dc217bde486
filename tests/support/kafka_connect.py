"""Requests to the local stacks' real Kafka Connect worker (register, pause, delete connectors)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request


def connect_request(method: str, url: str, body: dict[str, str] | None = None, *, missing_ok: bool = False) -> int:
    """The HTTP status of ``method url`` with ``body`` as JSON; a 404 is returned, not raised, when ``missing_ok``."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 - the stack's local Connect
            return int(response.status)
    except urllib.error.HTTPError as exc:
        if missing_ok and exc.code == 404:
            return 404
        raise
