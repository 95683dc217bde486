"""Every PromQL expression the alert rules and the Grafana dashboard use, in one place.

Used by test_prometheus_rules.py (syntax, metric names, README list) and meant for the live test in which
a real Prometheus scrapes a running connector: `expressions(substitute=True)` gives queries that can be
sent to /api/v1/query as they are.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "rules.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "dashboard.json"

# Grafana template variables -> values that select everything, for running dashboard queries directly.
GRAFANA_SUBSTITUTIONS = {
    "$__rate_interval": "1m",
    "$job": ".*",
    "$instance": ".*",
    "$table": ".*",
}

# The metrics connector/operate/metrics.py exposes (the contract in the deployment issue).
KNOWN_METRICS = frozenset(
    {
        "cdc_mirror_events_total",
        "cdc_mirror_rows_published_total",
        "cdc_mirror_rows_published_marker_free_total",
        "cdc_mirror_files_published_total",
        "cdc_mirror_bytes_published_total",
        "cdc_mirror_batch_duration_seconds",
        "cdc_mirror_batches_total",
        "cdc_mirror_last_batch_committed_timestamp_seconds",
        "cdc_mirror_batch_lag_seconds",
        "cdc_mirror_kafka_offsets_behind",
        "cdc_mirror_records_skipped_total",
        "cdc_mirror_table_stopped",
        "cdc_mirror_tables_stopped",
        "cdc_mirror_table_rebuilding",
        "cdc_mirror_publish_errors_total",
        "cdc_mirror_build_info",
        "cdc_mirror_dead_letters_total",
        "cdc_mirror_schema_changes_total",
        "cdc_mirror_ready",
        "cdc_mirror_kafka_reachable",
        "cdc_mirror_fabric_table_state",
        "cdc_mirror_fabric_table_failed",
        "cdc_mirror_fabric_processed_rows",
        "cdc_mirror_fabric_status_readable",
        "cdc_mirror_fabric_database_up",
        "cdc_mirror_source_lossy_settings",
        "cdc_mirror_debezium_up",
        "cdc_mirror_debezium_failed",
        "cdc_mirror_debezium_status_readable",
        "cdc_mirror_data_lost_total",
        "cdc_mirror_table_resets_total",
        "cdc_mirror_audit_rows_checked_total",
        "cdc_mirror_audit_differences_total",
        "cdc_mirror_audit_last_clean_timestamp_seconds",
    }
)
HISTOGRAMS = frozenset({"cdc_mirror_batch_duration_seconds"})
METRIC_RE = re.compile(r"cdc_mirror_[a-z_]+")
_LABEL_VALUES_RE = re.compile(r"^label_values\((?:(.+),\s*)?[a-z_]+\)$")


def alert_expressions() -> dict[str, str]:
    """Alert name -> expression (whitespace-normalised)."""
    doc = yaml.safe_load(RULES.read_text())
    return {
        rule["alert"]: normalise(rule["expr"]) for group in doc["groups"] for rule in group["rules"] if "alert" in rule
    }


def dashboard_expressions() -> list[str]:
    """Panel queries, then the series selectors behind the template variables (label_values(...))."""
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    exprs: list[str] = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            exprs.extend(normalise(t["expr"]) for t in panel.get("targets", []) if t.get("expr"))
            walk(panel.get("panels", []))

    walk(dashboard["panels"])
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = _LABEL_VALUES_RE.match(variable["query"]["query"])
        assert match and match.group(1), f"unexpected variable query: {variable['query']}"
        exprs.append(normalise(match.group(1)))
    return list(dict.fromkeys(exprs))


def expressions(*, substitute: bool = False) -> list[str]:
    exprs = list(alert_expressions().values()) + dashboard_expressions()
    return [grafana_substitute(e) for e in exprs] if substitute else exprs


def grafana_substitute(expr: str) -> str:
    for variable, value in GRAFANA_SUBSTITUTIONS.items():
        expr = expr.replace(variable, value)
    return expr


def metric_names(expr: str) -> set[str]:
    names = set()
    for name in METRIC_RE.findall(expr):
        for suffix in ("_bucket", "_sum", "_count"):
            if name.endswith(suffix) and name.removesuffix(suffix) in HISTOGRAMS:
                name = name.removesuffix(suffix)
        names.add(name)
    return names


def normalise(expr: str) -> str:
    return " ".join(expr.split())
