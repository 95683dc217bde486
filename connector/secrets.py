"""Secrets: resolving ``${env:NAME}`` / ``${file:/path}`` references, and the one redactor.

A setting never holds a secret in clear in the YAML: it references one, resolved only where it is used (the
Kafka client, the schema registry client, Spark's Hadoop options, the Fabric status token). Everything shown
to a person (logs, errors, ``--help``, a config dump) goes through the redactor here: settings by their key,
URLs by their parts (user info and query may carry credentials, a SAS signature is a query).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from connector.errors import ConfigError

_SECRET_REFERENCE = re.compile(r"\$\{(env|file):([^}]+)\}")
_SECRET_KEY_HINTS = ("password", "secret", "jaas", "token", "key")
HIDDEN = "***"
"""What a redacted secret is shown as."""


def resolve_secret_references(raw: str, where: str) -> str:
    """Replace ``${env:NAME}`` and ``${file:/path}`` in ``raw``; errors never include the value."""

    def lookup(match: re.Match[str]) -> str:
        kind, ref = match[1], match[2]
        if kind == "env":
            if ref not in os.environ:
                msg = f"{where} references environment variable {ref}, which is not set"
                raise ConfigError(msg)
            return os.environ[ref]
        try:
            return Path(ref).read_text().strip()
        except OSError as exc:
            msg = f"{where} references file {ref}, which cannot be read: {exc.strerror}"
            raise ConfigError(msg) from None

    return _SECRET_REFERENCE.sub(lookup, raw)


def has_secret_reference(value: str) -> bool:
    """Whether ``value`` holds a ``${env:NAME}`` or ``${file:/path}`` reference."""
    return bool(_SECRET_REFERENCE.search(value))


def _secret_key(key: str) -> bool:
    return any(hint in key.lower() for hint in _SECRET_KEY_HINTS)


def is_secret_setting(key: str, value: str) -> bool:
    """Whether a setting holds a secret: a ``${env:}``/``${file:}`` reference, or a secret-looking key."""
    return has_secret_reference(value) or _secret_key(key)


def redact(key: str, value: str) -> str:
    """A setting as it may be shown: values of secret-looking keys are hidden (literal secrets too).

    A reference is shown as written: it names where the secret is, not the secret.
    """
    if has_secret_reference(value):
        return value
    if _secret_key(key):
        return HIDDEN
    return value


def redact_url(url: str, *, keep_user: bool = False) -> str:
    """``url`` as it may be shown: no password, no query, no fragment (a SAS signature is a query).

    The user name is dropped too, unless ``keep_user`` (a database URL's user, an ``abfss://`` URL's
    ``filesystem@``: names, no secrets), in which case a password is shown as ``***``. Several
    comma-separated URLs (a list of schema registries) are redacted one by one; text that is no valid URL
    still loses its query.
    """
    return ",".join(_redact_one(one.strip(), keep_user) for one in url.split(","))


def _redact_one(url: str, keep_user: bool) -> str:
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an unbalanced IPv6 bracket: still never show the query
        return url.split("?", 1)[0].split("#", 1)[0]
    userinfo, at, host = parts.netloc.rpartition("@")
    netloc = host
    if at and keep_user:
        user, colon, _password = userinfo.partition(":")
        netloc = f"{user}:{HIDDEN}@{host}" if colon else f"{user}@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
