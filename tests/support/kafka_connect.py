"""Requests to the local stacks' real Kafka Connect worker (register, stop, resume, delete connectors)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def connect_request(method: str, url: str, body: dict[str, Any] | None = None, *, missing_ok: bool = False) -> int:
    """The HTTP status of ``method url`` with ``body`` as JSON; a 404 is returned, not raised, when ``missing_ok``."""
    return _call(method, url, body, missing_ok=missing_ok)[0]


def connect_json(method: str, url: str, body: dict[str, Any] | None = None) -> Any:
    """The JSON answer of ``method url`` (``None`` when empty)."""
    text = _call(method, url, body, missing_ok=False)[1]
    return json.loads(text) if text else None


def _call(method: str, url: str, body: dict[str, Any] | None, *, missing_ok: bool) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 - the stack's local Connect
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        if missing_ok and exc.code == 404:
            return 404, b""
        raise
