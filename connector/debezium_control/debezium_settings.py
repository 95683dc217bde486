"""At start, the Debezium connectors' settings read from Kafka Connect and judged for silent loss.

A lossy Debezium setting (decimals as doubles, BIGINT UNSIGNED as ``long``, skipped truncates, …) damages
the data before it reaches Kafka, so the mirror equals what Debezium sent and still differs from the source;
nothing downstream can notice. With ``source.debezium_connect_url`` set, ``run`` applies ``check-source``'s
rules to those connectors once at start, logs each finding and exports their number as
``cdc_mirror_source_lossy_settings`` (the ``CdcMirrorLossySourceSettings`` alert). The check only advises:
Kafka Connect being unreachable is logged and never stops the job.
"""

from __future__ import annotations

import logging

from connector.config import ConnectorSettings
from connector.errors import ConnectorError
from connector.operate import metrics
from connector.operate.debezium_config_lint import Finding, lint_debezium_connectors

log = logging.getLogger(__name__)


def check_debezium_settings(settings: ConnectorSettings) -> list[Finding] | None:
    """The findings for the configured connectors; ``None`` when not configured or Connect could not be read."""
    url = settings.source.debezium_connect_url
    if not url:
        return None
    try:
        configs, findings = lint_debezium_connectors(
            url,
            settings.source.debezium_connectors,
            settings.mirror.truncate_policy,
            rebuilds=settings.mirror.asks_for_snapshots,
        )
    except ConnectorError as exc:
        log.warning("Debezium settings not checked: %s", exc)
        return None
    metrics.SOURCE_LOSSY_SETTINGS.set(len(findings))
    for finding in findings:
        log.warning(
            "Debezium connector %s: %s=%s: %s", finding.connector, finding.setting, finding.value, finding.consequence
        )
    if not findings:
        log.info("Debezium settings fit an exact mirror: %s", ", ".join(sorted(configs)) or "no connectors registered")
    return findings
