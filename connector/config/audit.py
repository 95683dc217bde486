"""``mirror.audit``: the continuous audit that compares the source with what Fabric holds, and repairs it.

Off by default. When on, the streaming job compares each table in ``tables`` (all when empty) with the mirrored
database's Delta table every ``interval_s`` (``connector.audit.compare``), reading at most ``max_rows_per_s``
rows a second on both sides together so it never starves the stream, and repairs each difference that outlasts the
mirror's lag: differing or missing keys are re-read through Debezium's signal, keys the source no longer has get
delete rows, and a table with more than ``repair_threshold`` differing keys is rebuilt instead.
"""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator

from connector.config.base import FrozenModel
from connector.secrets import has_secret_reference


class AuditSettings(FrozenModel):
    """The continuous audit (``mirror.audit``): what it compares, how often, how fast, and when it rebuilds."""

    enabled: bool = Field(False, description="Run the continuous audit in the streaming job.")
    interval_s: float = Field(
        900.0,
        gt=0,
        description="Seconds from the start of one audit round to the next (each table once a round); a round "
        "that took longer is followed by a pause of interval_s.",
    )
    tables: list[str] = Field(
        default_factory=list, description="Tables audited (schema.table); empty: every table the ledger knows."
    )
    max_rows_per_s: float = Field(
        50_000.0,
        gt=0,
        description="Rows read per second by the audit, source and mirror together (a budget: it pauses between "
        "tables to keep under it, so the stream keeps its CPU).",
    )
    source_url: SecretStr | None = Field(
        None,
        description="The source database's URL (postgresql://..., or mysql://... or mariadb://...), as a secret "
        "reference: ${env:NAME} or ${file:/path}. Required when enabled.",
    )
    tables_path: str | None = Field(
        None,
        description="Fabric's Tables folder (local folder or OneLake URL); default: the mirrored database's "
        "Tables beside the landing zone (<workspace>/<item>/Tables), as verify derives it.",
    )
    repair_threshold: int = Field(
        1_000,
        ge=1,
        description="Differing keys in one table past which the audit asks for a table rebuild instead of "
        "re-reading the keys one by one.",
    )
    signal_table: str | None = Field(
        None,
        description="MySQL/MariaDB sources only: Debezium's signalling table (its signal.data.collection, "
        "database.table). Each lag gate writes a row of type log there and waits for it in the table's topic "
        "(<topic prefix>.<database>.<table>); the audit's user needs INSERT on it. Required for those sources.",
    )
    settle_s: float = Field(
        120.0,
        gt=0,
        description="How long a round waits for the mirror to catch up with the source position of its first look "
        "before it judges a table's suspect chunks.",
    )

    @field_validator("source_url")
    @classmethod
    def _reference_only(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not has_secret_reference(value.get_secret_value()):
            msg = "mirror.audit.source_url must be a secret reference (${env:NAME} or ${file:/path}), not a URL"
            raise ValueError(msg)
        return value
