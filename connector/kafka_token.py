"""Microsoft Entra ID tokens for Kafka's SASL OAUTHBEARER (Azure Event Hubs), through azure-identity.

librdkafka asks its client's ``oauth_cb`` for a token before it first authenticates and again at about 80 % of
the token's life, so a client never holds an expired one. Every client of the process, the executors' readers
included, must carry that callback, but the options they are built from travel as plain strings (a hashable
tuple shipped to Spark's Python workers). So the identity is described in librdkafka's own free-form option
``sasl.oauthbearer.config`` (which librdkafka hands to the callback and keeps out of its logs: it is a sensitive
property), and ``with_token_callback`` turns that description back into the callback in whichever process builds
the client. The description holds the identity's kind, ids, files and scope; a secret only as a
``${env:X}`` / ``${file:P}`` reference, resolved where the token is fetched. Tokens are never logged; errors name
the identity and the scope, never a secret.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from connector.errors import ConfigError
from connector.secrets import has_secret_reference

if TYPE_CHECKING:
    # azure-identity (0.2 s of imports) only where a token is asked for, and pydantic (the identity's settings) only
    # where an Entra identity is described or read back: every Python process Spark starts for the Kafka source
    # imports this module, and most deployments never use Entra ID for Kafka.
    from connector.storage.credentials import StorageIdentity
    from connector.storage.identity import CredentialConfig

log = logging.getLogger(__name__)

#: What starts a ``sasl.oauthbearer.config`` this module wrote (and so builds the callback for).
CONFIG_PREFIX = "cdc-mirror-entra:"
#: Hosts of Event Hubs namespaces (public cloud, Azure China, Azure US Government) whose scope can be derived.
EVENT_HUBS_DOMAINS = (".servicebus.windows.net", ".servicebus.chinacloudapi.cn", ".servicebus.usgovcloudapi.net")


def event_hubs_scope(bootstrap_servers: str | None) -> str | None:
    """``https://<namespace>.servicebus.windows.net/.default`` from the first bootstrap server, if it is a namespace.

    Event Hubs takes tokens whose audience is the namespace; another host's audience cannot be guessed.
    """
    first = (bootstrap_servers or "").split(",")[0].strip()
    host = first.rsplit(":", 1)[0] if first.count(":") == 1 else first
    host = host.lower().rstrip(".")
    if not host.endswith(EVENT_HUBS_DOMAINS) or host.startswith("."):
        return None
    return f"https://{host}/.default"


@dataclass(frozen=True)
class EntraAuth:
    """Which identity gets the Kafka tokens, for which scope: what every process needs to build the callback."""

    identity: CredentialConfig
    scope: str

    def describe(self) -> str:
        """The identity and scope, safe to log: kind, tenant and client id (never a secret)."""
        from connector.storage.credentials import describe

        return f"{describe(self.identity.kind, self.identity.tenant_id, self.identity.client_id)} for {self.scope}"

    def config_string(self) -> str:
        """This description as librdkafka's ``sasl.oauthbearer.config`` value.

        Raises:
            ConfigError: A secret is written inline: it would travel (and show) with the options, so only a
                ``${env:X}`` / ``${file:P}`` reference or a ``*_file`` setting is taken.
        """
        # pydantic is loaded already wherever an identity's settings exist (the driver's config): not imported above.
        from pydantic import SecretStr

        fields: dict[str, Any] = {"scope": self.scope}
        for name, value in self.identity:
            if isinstance(value, SecretStr):
                if not has_secret_reference(value.get_secret_value()):
                    msg = (
                        f"source.kafka_auth.credential.{name} must be a ${{env:X}} / ${{file:P}} reference "
                        f"(or {name}_file): the executors build the credential from the options they are sent"
                    )
                    raise ConfigError(msg)
                fields[name] = value.get_secret_value()
            elif isinstance(value, Path):
                fields[name] = str(value)
            elif value is not None:
                fields[name] = value
        return CONFIG_PREFIX + json.dumps(fields, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_config_string(cls, text: str) -> EntraAuth | None:
        """The description ``config_string`` wrote; ``None`` for any other ``sasl.oauthbearer.config``."""
        if not text.startswith(CONFIG_PREFIX):
            return None
        # pydantic only once an Entra identity is read back: not in Spark's planning processes of other deployments.
        from connector.storage.identity import CredentialConfig

        fields = json.loads(text.removeprefix(CONFIG_PREFIX))
        scope = fields.pop("scope")
        return cls(CredentialConfig.model_validate(fields), scope)


class EntraTokenError(ConfigError):
    """Entra ID gave the identity no token (unknown identity, no federated credential, no managed identity)."""


class EntraTokenCallback:
    """confluent-kafka's ``oauth_cb``: a token for the identity and scope, and its expiry in epoch seconds.

    The credential is built on the first call (in the process that uses it) and kept, so azure-identity's token
    cache and its reading of the workload-identity token file serve every later refresh.
    """

    def __init__(self, auth: EntraAuth, environ: Mapping[str, str] | None = None) -> None:
        self._auth = auth
        self._environ = environ
        self._identity: StorageIdentity | None = None
        self._lock = threading.Lock()  # librdkafka may ask from several clients' threads at once
        self.last_failure: str | None = None

    @property
    def auth(self) -> EntraAuth:
        """The identity and scope this callback fetches tokens for."""
        return self._auth

    def __call__(self, _config: str | None = None) -> tuple[str, float]:
        """Return a fresh (or azure-identity's cached, still valid) token and its expiry.

        Raises:
            EntraTokenError: No token: the message names the identity and the scope, and the reason Entra gave.
        """
        with self._lock:
            try:
                if self._identity is None:
                    from connector.storage.credentials import build_credential

                    self._identity = build_credential(self._auth.identity, self._environ, scope=self._auth.scope)
                token = self._identity.credential.get_token(self._auth.scope)
            except Exception as exc:  # noqa: BLE001 - azure-identity raises many types; each becomes one line
                reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                msg = f"Microsoft Entra ID gave no token to {self._auth.describe()}: {reason}"
                # librdkafka keeps only "OAuth token not set": the reason is kept here for the client's builder,
                # and logged once, for clients built where nobody asks.
                if msg != self.last_failure:
                    log.warning("Kafka: %s", msg)
                self.last_failure = msg
                raise EntraTokenError(msg) from None
            self.last_failure = None
        return token.token, float(token.expires_on)

    def __repr__(self) -> str:
        return f"EntraTokenCallback({self._auth.describe()})"


_callbacks: dict[str, EntraTokenCallback] = {}
_callbacks_lock = threading.Lock()


def token_callback(config: str) -> EntraTokenCallback | None:
    """This process's callback for a ``sasl.oauthbearer.config`` written by ``EntraAuth.config_string``.

    One per identity and process: every client of a driver or a Python worker shares its credential and cache.
    """
    auth = EntraAuth.from_config_string(config)
    if auth is None:
        return None
    with _callbacks_lock:
        callback = _callbacks.get(config)
        if callback is None:
            callback = _callbacks[config] = EntraTokenCallback(auth)
    return callback


def with_token_callback(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with ``oauth_cb`` when they describe an Entra identity; a copy of them otherwise."""
    out = dict(options)
    config = out.get("sasl.oauthbearer.config")
    if isinstance(config, str) and "oauth_cb" not in out:
        callback = token_callback(config)
        if callback is not None:
            out["oauth_cb"] = callback
    return out


def entra_description(options: Mapping[str, Any]) -> str | None:
    """The identity ``options`` authenticate with, safe to show; ``None`` without an Entra identity."""
    config = options.get("sasl.oauthbearer.config")
    auth = EntraAuth.from_config_string(config) if isinstance(config, str) else None
    return auth.describe() if auth else None


def token_failure(options: Mapping[str, Any]) -> str | None:
    """Why the last token for ``options``' Entra identity could not be had, if it could not (log-safe)."""
    callback = options.get("oauth_cb")
    return callback.last_failure if isinstance(callback, EntraTokenCallback) else None
