"""Who the connector is towards OneLake / ADLS Gen2: the identity settings, as the config and a location carry them.

Only the settings live here (pydantic, no Azure import): ``connector.storage.credentials`` builds the credential
from them where storage is opened, so the config and every ``StorageLocation`` can carry them cheaply (and pickled,
to the executors).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, SecretStr, model_validator

from connector.storage import CredentialKind


class CredentialConfig(BaseModel):
    """How the connector authenticates to OneLake or ADLS Gen2.

    Secrets are ``SecretStr`` so neither ``repr`` nor a config dump shows them; prefer the ``*_file``
    fields (a mounted Kubernetes secret) or the ``AZURE_*`` environment variables over inline values.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    kind: CredentialKind = "default"
    """Which identity to use. ``default`` tries environment, workload identity and managed identity in
    turn (DefaultAzureCredential, interactive browser excluded), which fits most pods and VMs."""

    tenant_id: str | None = None
    """Directory (tenant) id; falls back to ``AZURE_TENANT_ID``. Required for service principals."""

    client_id: str | None = None
    """Application (client) id of the service principal, or of a user-assigned managed identity;
    falls back to ``AZURE_CLIENT_ID``."""

    client_secret: SecretStr | None = None
    """Service-principal secret. Prefer ``client_secret_file`` or ``AZURE_CLIENT_SECRET``."""

    client_secret_file: Path | None = None
    """File holding the service-principal secret (trailing whitespace ignored)."""

    certificate_path: Path | None = None
    """PEM or PKCS12 certificate with private key; falls back to ``AZURE_CLIENT_CERTIFICATE_PATH``."""

    certificate_password: SecretStr | None = None
    """Password of the certificate's private key, if it has one."""

    certificate_password_file: Path | None = None
    """File holding the certificate password; ``AZURE_CLIENT_CERTIFICATE_PASSWORD`` is the fallback."""

    federated_token_file: Path | None = None
    """Workload-identity token file; falls back to ``AZURE_FEDERATED_TOKEN_FILE`` (set by the AKS webhook)."""

    authority: str | None = None
    """Microsoft Entra host for sovereign clouds, e.g. ``login.microsoftonline.us``; default public cloud."""

    @classmethod
    def of(cls, setting: CredentialKind | CredentialConfig) -> CredentialConfig:
        """The identity a ``credential`` setting names, whichever form it has: a kind alone, or the full settings.

        The one way every section (``landing_zone``, ``dead_letter``, ``fabric_status``) and ``open_onelake`` turn
        their setting into an identity.
        """
        return setting if isinstance(setting, CredentialConfig) else cls.model_validate({"kind": setting})

    @model_validator(mode="before")
    @classmethod
    def _from_kind(cls, value: Any) -> Any:
        # ``credential: managed_identity`` (a kind alone) stays the short form of the setting; the rest of the
        # identity then comes from the ``AZURE_*`` environment variables.
        return {"kind": value} if isinstance(value, str) else value
