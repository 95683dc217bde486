"""``landing_zone``, ``metrics``, ``fabric_status`` and ``spark``: where the mirror goes and how the job runs."""

from __future__ import annotations

import re
from functools import cached_property
from typing import Literal

from pydantic import Field, SecretStr, field_validator

from connector.config.base import FrozenModel
from connector.errors import ConfigError
from connector.storage import CredentialKind
from connector.storage.identity import CredentialConfig
from connector.storage.location import StorageLocation


class LandingZoneSettings(FrozenModel):
    """The open-mirroring landing zone."""

    url: str = Field("./landing-zone", description="Local folder, or a OneLake / ADLS Gen2 URL.")
    credential: CredentialKind | CredentialConfig = Field(
        "default",
        description="Azure identity for a OneLake / ADLS Gen2 url: a kind (the rest from AZURE_* variables), or "
        "the identity's settings (kind, tenant_id, client_id, client_secret_file, …; secrets as ${env:X}/${file:P}).",
    )

    @property
    def identity(self) -> CredentialConfig:
        """The identity, whichever form the setting has."""
        return CredentialConfig.of(self.credential)

    @cached_property
    def location(self) -> StorageLocation:
        """The landing zone as one value (URL + identity), checked when first asked for, then carried."""
        return StorageLocation(self.url, self.identity, "landing_zone.url")


class MetricsSettings(FrozenModel):
    """Prometheus endpoint."""

    port: int = Field(9464, ge=0, le=65535, description="0 disables the HTTP endpoint.")
    stall_after_s: float = Field(
        300,
        gt=0,
        description="/readyz turns unready when Kafka offsets are behind and no batch has completed for this long.",
    )
    broker_check_s: float = Field(
        30,
        ge=0,
        description="How often the driver checks that a Kafka broker answers (0 = never); /readyz turns unready "
        "while none does.",
    )
    status_page: bool = Field(
        True,
        description="Serve the read-only status page (/) and /status.json on the metrics port beside /metrics.",
    )


class FabricStatusSettings(FrozenModel):
    """Where Fabric's own per-table mirroring status is read (``connector.fabric.status``).

    It feeds the ``cdc_mirror_fabric_*`` metrics, the ``tables`` command and table rebuilds (which wait until
    Fabric no longer lists a deleted table). The bearer token is a ``SecretStr`` and may be a ``${env:NAME}``
    / ``${file:/path}`` reference, resolved at each request so a rotated token file is picked up.
    """

    kind: Literal["none", "rest", "monitoring"] = Field(
        "none",
        description="none; rest (Fabric REST API getTablesMirroringStatus); monitoring (the tables.json that "
        "mirroring writes to the mirrored database's Files/Monitoring folder).",
    )
    workspace_id: str | None = Field(None, description="kind rest: the workspace id (GUID).")
    mirrored_database_id: str | None = Field(None, description="kind rest: the mirrored database's item id (GUID).")
    api_url: str = Field(
        "https://api.fabric.microsoft.com",
        description="kind rest: base URL of the Fabric REST API (https; plain http only on 127.0.0.1/localhost).",
    )
    monitoring_url: str | None = Field(
        None,
        description="kind monitoring: the Monitoring folder (local folder or OneLake URL); default: beside the "
        "landing zone when landing_zone.url ends in /LandingZone (.../Files/Monitoring).",
    )
    credential: CredentialKind = Field(
        "default", description="Azure identity for the REST API (or a OneLake monitoring_url)."
    )
    bearer_token: SecretStr | None = Field(
        None, description="kind rest: static bearer token instead of the Azure identity; ${env:X}/${file:P}."
    )
    poll_s: float = Field(60.0, gt=0, description="How often the streaming job reads the status for its metrics.")
    request_timeout_s: float = Field(10.0, gt=0, description="Timeout of one status request.")

    @property
    def identity(self) -> CredentialConfig:
        """The identity of ``credential`` (the REST API's token, or a OneLake ``monitoring_url``)."""
        return CredentialConfig.of(self.credential)

    @field_validator("api_url")
    @classmethod
    def _check_api_url(cls, value: str) -> str:
        # The request carries a bearer token: never in clear text beyond this machine.
        if not re.match(r"https://[^/\s]+", value) and not re.match(
            r"http://(127\.0\.0\.1|localhost|\[::1\])(:\d+)?(/|$)", value
        ):
            msg = f"fabric_status.api_url must be https:// (or http:// on 127.0.0.1/localhost), got {value!r}"
            raise ValueError(msg)
        return value.rstrip("/")


class SparkSettings(FrozenModel):
    """The Spark session."""

    master: str = "local[*]"
    conf: dict[str, str] = Field(default_factory=dict)
    decode_on: Literal["driver", "executors"] = Field(
        "executors",
        description="Where records are decoded, marked, encoded and staged: 'executors' (one slice per Spark "
        "partition in Spark's Python workers, which write the staged files into the landing zone and return "
        "only their metadata; the executors need the connector installed and the landing zone's identity) or "
        "'driver' (the micro-batch collected to the driver as Arrow and staged there: the same code in one "
        "process, for a landing zone only the driver can reach).",
    )
    columnar_decode: bool = Field(
        True,
        description="Decode and mark plain JSON change events of a topic in bulk with Arrow (the columnar "
        "lane) wherever it gives exactly what the record-by-record path gives; false sends every record "
        "through the record-by-record path.",
    )
    class_archive: str | None = Field(
        None,
        description="A Java class-data archive (AppCDS) the Spark driver maps at start: Spark's classes read and "
        "verified once, not at every start (a first batch about 0.5 s shorter, bench stream). `python -m connector "
        "class-archive PATH` writes one; the image holds one and sets this. An archive another Java build or class "
        "path wrote is ignored, and a missing one is logged: neither stops a start.",
    )


_INTERVAL = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h)")
_INTERVAL_UNITS = {"ms": "milliseconds", "s": "seconds", "m": "minutes", "h": "hours"}


def spark_interval(trigger: str) -> str:
    """``10s`` → ``10 seconds``: the ``trigger`` setting in Spark's interval syntax (the unit spelled out).

    Raises:
        ConfigError: ``trigger`` is not an interval like ``10s``.
    """
    match = _INTERVAL.fullmatch(trigger)
    if not match:
        msg = f"trigger must be 'available-now' or an interval like '10s', got {trigger!r}"
        raise ConfigError(msg)
    return f"{match[1]} {_INTERVAL_UNITS[match[2]]}"
