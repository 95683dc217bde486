"""Azure identities for OneLake / ADLS Gen2, built from a small config.

Every identity goes through ``azure-identity`` so token caching, refresh and the Kubernetes
workload-identity token file are handled by the library Microsoft maintains. The connector adds three
things on top:

* one place that decides where a secret comes from (config value, mounted file or the standard
  ``AZURE_*`` environment variable), so deployments can use Kubernetes secrets mounted as files;
* a wrapper that only ever asks for the storage audience, so the object handed to the storage client
  cannot be used to mint tokens for anything else;
* a description of the identity that is safe to put in logs and error messages (kind, tenant and
  client id, which are identifiers, never the secret, certificate password or token).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from azure.core.credentials import AccessToken, TokenCredential
from azure.identity import (
    CertificateCredential,
    ClientSecretCredential,
    DefaultAzureCredential,
    ManagedIdentityCredential,
    WorkloadIdentityCredential,
)
from pydantic import SecretStr

from connector.errors import ConfigError
from connector.secrets import resolve_secret_references
from connector.storage import CredentialKind
from connector.storage.identity import CredentialConfig

#: The only token scope the connector requests: Azure Storage, which OneLake accepts too.
STORAGE_SCOPE = "https://storage.azure.com/.default"

# The variable names azure-identity's EnvironmentCredential and WorkloadIdentityCredential read, reused so
# an operator sets one set of variables whatever the kind.
ENV_TENANT_ID = "AZURE_TENANT_ID"
ENV_CLIENT_ID = "AZURE_CLIENT_ID"
ENV_CLIENT_SECRET = "AZURE_CLIENT_SECRET"  # noqa: S105 - a variable name, not a secret
ENV_CERTIFICATE_PATH = "AZURE_CLIENT_CERTIFICATE_PATH"
ENV_CERTIFICATE_PASSWORD = "AZURE_CLIENT_CERTIFICATE_PASSWORD"  # noqa: S105 - a variable name
ENV_FEDERATED_TOKEN_FILE = "AZURE_FEDERATED_TOKEN_FILE"  # noqa: S105 - a variable name


class StorageScopedCredential:
    """A token credential that only hands out tokens for one audience: storage, unless ``scope`` says otherwise.

    The storage client asks for ``https://storage.azure.com/.default``; refusing anything else means a
    bug or a future change cannot silently start using this identity for another API. The Fabric status
    reader (``connector.fabric.status``) builds its own instance scoped to the Fabric REST API.
    """

    def __init__(self, inner: TokenCredential, scope: str = STORAGE_SCOPE) -> None:
        self._inner = inner
        self._scope = scope

    def get_token(
        self,
        *scopes: str,
        claims: str | None = None,
        tenant_id: str | None = None,
        enable_cae: bool = False,
        **kwargs: Any,
    ) -> AccessToken:
        """Return a token from the wrapped credential, for its one scope only.

        Raises:
            ValueError: Another scope was requested.
        """
        if tuple(scopes) != (self._scope,):
            msg = f"this credential only issues tokens for {self._scope}, not {', '.join(scopes)}"
            raise ValueError(msg)
        return self._inner.get_token(*scopes, claims=claims, tenant_id=tenant_id, enable_cae=enable_cae, **kwargs)

    @property
    def wrapped(self) -> TokenCredential:
        """The azure-identity credential inside, for diagnostics (which kind was chosen)."""
        return self._inner

    def close(self) -> None:
        """Release the wrapped credential's HTTP sessions, when it has any."""
        close = getattr(self._inner, "close", None)
        if callable(close):
            close()

    def __repr__(self) -> str:
        return f"StorageScopedCredential({type(self._inner).__name__})"


@dataclass(frozen=True)
class StorageIdentity:
    """A credential ready for the storage client, plus a description that is safe to log.

    Attributes:
        credential: The token credential to pass to the storage SDK.
        kind: The configured kind (``default``, ``client_secret``, …).
        description: Kind plus tenant / client ids, for logs and error messages; never a secret.
    """

    credential: TokenCredential = field(repr=False)
    kind: CredentialKind
    description: str

    def close(self) -> None:
        """Release the credential's HTTP sessions (token endpoints, IMDS)."""
        close = getattr(self.credential, "close", None)
        if callable(close):
            close()


@dataclass(frozen=True)
class _Ask:
    """What one identity kind's builder needs: the settings, the environment, and the ids and authority they give."""

    config: CredentialConfig
    env: Mapping[str, str]
    tenant_id: str | None
    client_id: str | None
    authority: dict[str, Any]


def build_credential(
    config: CredentialConfig, environ: Mapping[str, str] | None = None, *, scope: str = STORAGE_SCOPE
) -> StorageIdentity:
    """Build the azure-identity credential ``config`` describes.

    Nothing is contacted here: tokens are requested on the first storage call, so a wrong secret shows
    up as ``StorageAccessDenied`` from the storage layer, with this identity's description.

    Args:
        config: The credential section of the connector config.
        environ: Environment to read ``AZURE_*`` fallbacks from; ``os.environ`` when omitted.
        scope: The one token scope the credential may serve (the storage audience by default).

    Returns:
        The credential wrapped to ``scope``, and its loggable description.

    Raises:
        ValueError: A required setting (tenant, client id, secret, certificate) is missing or its file
            cannot be read; the message names the setting, never its value.
    """
    env = os.environ if environ is None else environ
    tenant_id = config.tenant_id or env.get(ENV_TENANT_ID) or None
    client_id = config.client_id or env.get(ENV_CLIENT_ID) or None
    authority: dict[str, Any] = {"authority": config.authority} if config.authority else {}
    ask = _Ask(config, env, tenant_id, client_id, authority)
    inner: TokenCredential

    if config.kind == "default":
        inner = _default_credential(tenant_id, client_id, authority)
    elif config.kind == "client_secret":
        inner = _client_secret_credential(ask)
    elif config.kind == "client_certificate":
        inner = _certificate_credential(ask)
    elif config.kind == "workload_identity":
        inner = _workload_identity_credential(ask)
    else:
        # managed_identity: system-assigned unless a client id selects a user-assigned identity.
        inner = ManagedIdentityCredential(client_id=client_id) if client_id else ManagedIdentityCredential()

    return StorageIdentity(
        credential=StorageScopedCredential(inner, scope),
        kind=config.kind,
        description=describe(config.kind, tenant_id, client_id),
    )


def _default_credential(tenant_id: str | None, client_id: str | None, authority: dict[str, Any]) -> TokenCredential:
    # Passing the client id selects a user-assigned managed identity / the workload identity app;
    # without it DefaultAzureCredential uses whatever the environment provides.
    options: dict[str, Any] = dict(authority)
    if client_id:
        options["managed_identity_client_id"] = client_id
        options["workload_identity_client_id"] = client_id
    if tenant_id:
        options["workload_identity_tenant_id"] = tenant_id
    return DefaultAzureCredential(**options)


def _client_secret_credential(ask: _Ask) -> TokenCredential:
    tenant, client = _require_ids(ask.config.kind, ask.tenant_id, ask.client_id)
    secret = _resolve_secret(
        ask.config.client_secret, ask.config.client_secret_file, ask.env, ENV_CLIENT_SECRET, what="client secret"
    )
    if secret is None:
        msg = (
            "credential kind client_secret needs a secret: set client_secret_file, "
            f"client_secret or the {ENV_CLIENT_SECRET} environment variable"
        )
        raise ValueError(msg)
    return ClientSecretCredential(tenant, client, secret, **ask.authority)


def _certificate_credential(ask: _Ask) -> TokenCredential:
    tenant, client = _require_ids(ask.config.kind, ask.tenant_id, ask.client_id)
    cert = ask.config.certificate_path or _path_or_none(ask.env.get(ENV_CERTIFICATE_PATH))
    if cert is None:
        msg = (
            "credential kind client_certificate needs certificate_path or the "
            f"{ENV_CERTIFICATE_PATH} environment variable"
        )
        raise ValueError(msg)
    if not cert.is_file():
        msg = f"certificate file {cert} does not exist or is not a file"
        raise ValueError(msg)
    password = _resolve_secret(
        ask.config.certificate_password,
        ask.config.certificate_password_file,
        ask.env,
        ENV_CERTIFICATE_PASSWORD,
        what="certificate password",
    )
    return CertificateCredential(
        tenant,
        client,
        certificate_path=str(cert),
        password=password.encode() if password is not None else None,
        **ask.authority,
    )


def _workload_identity_credential(ask: _Ask) -> TokenCredential:
    token_file = ask.config.federated_token_file or _path_or_none(ask.env.get(ENV_FEDERATED_TOKEN_FILE))
    tenant, client = _require_ids(ask.config.kind, ask.tenant_id, ask.client_id)
    if token_file is None:
        msg = (
            "credential kind workload_identity needs federated_token_file or the "
            f"{ENV_FEDERATED_TOKEN_FILE} environment variable (set by the AKS workload identity webhook)"
        )
        raise ValueError(msg)
    return WorkloadIdentityCredential(
        tenant_id=tenant, client_id=client, token_file_path=str(token_file), **ask.authority
    )


def describe(kind: CredentialKind, tenant_id: str | None, client_id: str | None) -> str:
    """Return a log-safe description of an identity: its kind and, when known, tenant and client id."""
    parts = [f"tenant {tenant_id}" if tenant_id else "", f"client id {client_id}" if client_id else ""]
    details = ", ".join(p for p in parts if p)
    return f"{kind} ({details})" if details else kind


def _require_ids(kind: CredentialKind, tenant_id: str | None, client_id: str | None) -> tuple[str, str]:
    if tenant_id and client_id:
        return tenant_id, client_id
    missing = []
    if not tenant_id:
        missing.append(f"tenant_id (or {ENV_TENANT_ID})")
    if not client_id:
        missing.append(f"client_id (or {ENV_CLIENT_ID})")
    msg = f"credential kind {kind} needs {' and '.join(missing)}"
    raise ValueError(msg)


def _resolve_secret(
    value: SecretStr | None, file: Path | None, env: Mapping[str, str], env_name: str, *, what: str
) -> str | None:
    """Pick a secret from the config value, then the mounted file, then the environment.

    A config value follows every secret setting's rule: it may be a ``${env:NAME}`` / ``${file:/path}`` reference,
    resolved only here (``connector.secrets``).
    """
    if value is not None:
        try:
            return resolve_secret_references(value.get_secret_value(), f"the {what}")
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
    if file is not None:
        try:
            return file.read_text(encoding="utf-8").strip()
        except OSError as err:
            # The OS error names the path and the reason (missing, permission); it cannot contain
            # the secret because the file was never read.
            msg = f"cannot read the {what} file {file}: {err.strerror or type(err).__name__}"
            raise ValueError(msg) from None
    from_env = env.get(env_name)
    return from_env or None


def _path_or_none(value: str | None) -> Path | None:
    return Path(value) if value else None
