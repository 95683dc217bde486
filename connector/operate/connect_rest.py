"""GET requests to Kafka Connect's REST API, its failures as ``ConnectorError`` naming the URL."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from connector.errors import ConnectorError

_TIMEOUT_S = 10


def get_json(url: str, connect_url: str) -> Any:
    """``url``'s JSON answer; ``connect_url`` is the configured base, named when it is not http(s).

    Raises:
        ConnectorError: not an http(s) URL, no answer, an HTTP error, or an answer that is not JSON.
    """
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https"):
        msg = f"Kafka Connect URL {connect_url!r}: not an http(s) URL"
        raise ConnectorError(msg)
    try:
        with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as response:  # noqa: S310 - http(s) checked above
            data = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        msg = f"{url}: Kafka Connect answered HTTP {exc.code}"
        if exc.code == 404:
            msg += " (no such connector)"
        raise ConnectorError(msg) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        msg = f"{url}: Kafka Connect did not answer ({exc})"
        raise ConnectorError(msg) from None
    return data
