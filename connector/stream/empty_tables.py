"""At start, the captured tables no change event will announce: each gets a zero-row file (issue 55).

Invariant 16 of docs/guarantees.md: every captured table exists in the mirror with its columns, an empty one included.

Debezium's initial snapshot of an empty table emits nothing, so the mirror would hold no table until its first row.
Two facts are needed: which tables Debezium captures, and each one's columns in the types its events will have.

The choice, needing least from the user: the settings ``run`` already has for other jobs, read once at start.

- The captured set: the Debezium connectors' own filters (``schema.include.list``/``database.include.list``,
  ``table.include.list`` and their exclude lists, ``topic.prefix``), read through ``source.debezium_connect_url``
  as the start-up lint reads them, applied to the source's tables; of those, the tables whose topic the job reads
  (``source.topics``). Debezium's initial-snapshot notifications name the scanned tables too, but only with
  ``notification.enabled.channels=sink`` set on the connector, only once the snapshot ran (never for a table created
  later), and without columns, so the catalogue would still be needed.
- The columns, their types and the primary key: the source's ``information_schema``, through
  ``mirror.audit.source_url`` (the URL the audit and ``verify`` read), typed as Debezium would send them under that
  connector's type settings (``connector.debezium.catalogue_types``) and then as the sink types every event.

Without either setting the job logs one INFO line and goes on: empty tables then appear with their first row. A
table created while the job runs is found at the next start, or with its first row. Tables the ledger knows, or
whose folder holds a numbered file, are left alone, so a restart publishes nothing again.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection, Mapping, Sequence

import pyarrow as pa

from connector.config import ConnectorSettings
from connector.debezium.catalogue_types import DebeziumTypeSettings, connect_field
from connector.debezium.types import column_type_from_schema, decimal_type, type_policy
from connector.errors import ConnectorError
from connector.landing_zone.layout import table_for_topic
from connector.operate.debezium_config_lint import database_kind, fetch_connector_configs
from connector.publish.empty_tables import EmptyTable
from connector.publish.ledger_state import LedgerState
from connector.readback.source_catalogue import CatalogueTable, dialect, read_catalogue
from connector.secrets import resolve_secret_references

log = logging.getLogger(__name__)

NOT_CONFIGURED = (
    "empty source tables appear in the mirror with their first row: set mirror.audit.source_url and "
    "source.debezium_connect_url to publish every captured table at start, an empty one included"
)


def _patterns(text: str | None) -> list[re.Pattern[str]] | None:
    """Debezium's comma-separated list of regular expressions (whole-name, case-insensitive); ``None`` when unset."""
    if not text or not text.strip():
        return None
    parts = [p.strip() for p in re.split(r"(?<!\\),", text) if p.strip()]
    return [re.compile(p.replace("\\,", ","), re.IGNORECASE) for p in parts]


def _passes(name: str, include: str | None, exclude: str | None) -> bool:
    included, excluded = _patterns(include), _patterns(exclude)
    if included is not None:
        return any(p.fullmatch(name) for p in included)
    return excluded is None or not any(p.fullmatch(name) for p in excluded)


def captured(config: Mapping[str, str], schema: str, table: str) -> bool:
    """Whether Debezium's connector with ``config`` captures ``schema.table`` (its include and exclude lists)."""
    container = "database" if database_kind(config.get("connector.class", "")) == "mysql" else "schema"
    return _passes(
        schema, config.get(f"{container}.include.list"), config.get(f"{container}.exclude.list")
    ) and _passes(f"{schema}.{table}", config.get("table.include.list"), config.get("table.exclude.list"))


def empty_table(
    settings: ConnectorSettings, source: CatalogueTable, topic: str, types: DebeziumTypeSettings, kind: str
) -> EmptyTable | None:
    """The table to publish for ``source``, typed as its events will be; ``None`` when a column cannot be written."""
    mirror = settings.mirror
    ref = table_for_topic(topic, mirror)
    policy = type_policy(mirror)
    fields = []
    for column in source.columns:
        declared = f"{ref.id}.{column.name}"
        if declared in mirror.decimal_columns:
            arrow = decimal_type(*mirror.declared_decimal(declared))
        else:
            ctype = column_type_from_schema(connect_field(kind, column, types), policy)
            if ctype.refusal is not None:
                log.warning("table %s waits for its first row: column %s: %s", ref.id, column.name, ctype.refusal)
                return None
            arrow = ctype.arrow
        fields.append(pa.field(column.name, arrow, nullable=True))
    keys = mirror.table_settings(topic).key_columns or source.key_columns
    return EmptyTable(ref, topic, pa.schema(fields), tuple(keys))


def captured_empty_tables(
    settings: ConnectorSettings,
    configs: Mapping[str, Mapping[str, str]],
    catalogue: Sequence[CatalogueTable],
    kind: str,
    state: LedgerState,
    topics_now: Collection[str] = (),
) -> list[EmptyTable]:
    """The captured tables the job reads (``source.topics``), without a topic yet, that the ledger does not know.

    Debezium creates a table's topic with its first event: a table with a topic has events coming, which publish it
    in the types they carry.
    """
    topics = re.compile(settings.source.topics)
    found: dict[str, EmptyTable] = {}
    for config in configs.values():
        prefix = config.get("topic.prefix") or config.get("database.server.name")
        if not prefix:
            continue
        types = DebeziumTypeSettings.of_config(config)
        for source in catalogue:
            topic = f"{prefix}.{source.schema}.{source.name}"
            if topic in topics_now or not captured(config, source.schema, source.name) or not topics.fullmatch(topic):
                continue
            table = empty_table(settings, source, topic, types, kind)
            if table is not None and table.ref.id not in state.tables:
                found.setdefault(table.ref.id, table)
    return sorted(found.values(), key=lambda t: t.ref.id)


def find_empty_tables(
    settings: ConnectorSettings, state: LedgerState, topics_now: Collection[str] | None = None
) -> list[EmptyTable]:
    """The captured tables to publish before their first event; ``topics_now``: the topics Kafka holds already.

    Never stops the job: a setting missing is one INFO line, Kafka Connect or the source unreachable one warning.
    """
    secret = settings.mirror.audit.source_url
    connect_url = settings.source.debezium_connect_url
    if secret is None or not connect_url:
        log.info(NOT_CONFIGURED)
        return []
    try:
        source_url = resolve_secret_references(secret.get_secret_value(), "mirror.audit.source_url")
        configs: dict[str, dict[str, str]] = {}
        names: list[str | None] = list(settings.source.debezium_connectors) or [None]
        for name in names:
            configs.update(fetch_connector_configs(connect_url, name))
        catalogue = read_catalogue(source_url)
    except ConnectorError as exc:
        log.warning("empty source tables appear in the mirror with their first row: %s", exc)
        return []
    tables = captured_empty_tables(settings, configs, catalogue, dialect(source_url), state, topics_now or ())
    log.info(
        "%d captured table(s) without a file yet get a zero-row file with the next batch%s",
        len(tables),
        f": {', '.join(t.ref.id for t in tables[:10])}{' ...' if len(tables) > 10 else ''}" if tables else "",
    )
    return tables
