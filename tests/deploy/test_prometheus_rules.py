"""Alert rules, their promtool unit tests, the scrape config and the Grafana dashboard."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.deploy import promql_catalog
from tests.deploy.tooling import CHART, DASHBOARD, PROMETHEUS_DIR, REPO, run

RULES = PROMETHEUS_DIR / "rules.yml"
RULES_TEST = PROMETHEUS_DIR / "rules_test.yml"
CHART_RULES = CHART / "files" / "prometheus-rules.yml"


@pytest.mark.parametrize("rules", [RULES, CHART_RULES], ids=["deploy", "chart"])
def test_promtool_check_rules(promtool: str, rules: Path) -> None:
    result = run([promtool, "check", "rules", str(rules)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests(promtool: str) -> None:
    result = run([promtool, "test", "rules", str(RULES_TEST)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_check_scrape_config(promtool: str) -> None:
    result = run([promtool, "check", "config", str(PROMETHEUS_DIR / "prometheus.yml")])
    assert result.returncode == 0, result.stdout + result.stderr


def test_scrape_job_is_the_one_the_alerts_select() -> None:
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    jobs = {c["job_name"] for c in config["scrape_configs"]}
    assert "debezium-fabric-mirror" in jobs
    for name, expr in promql_catalog.alert_expressions().items():
        if "up{" in expr:
            assert 'job="debezium-fabric-mirror"' in expr, name


def test_every_alert_has_a_firing_and_a_silent_case() -> None:
    alerts = set(promql_catalog.alert_expressions())
    firing: set[str] = set()
    silent: set[str] = set()
    for case in yaml.safe_load(RULES_TEST.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            (firing if check.get("exp_alerts") else silent).add(check["alertname"])
    assert firing >= alerts, f"alerts never shown firing: {sorted(alerts - firing)}"
    assert silent >= alerts, f"alerts never shown silent: {sorted(alerts - silent)}"
    assert firing | silent <= alerts, f"tests for unknown alerts: {sorted((firing | silent) - alerts)}"


def test_chart_ships_the_same_rules() -> None:
    assert CHART_RULES.read_bytes() == RULES.read_bytes(), (
        f"{CHART_RULES.relative_to(REPO)} must be a copy of {RULES.relative_to(REPO)}: "
        f"cp {RULES.relative_to(REPO)} {CHART_RULES.relative_to(REPO)}"
    )


def test_rules_are_severity_labelled_and_documented() -> None:
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
            assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]


@pytest.mark.parametrize("source", ["alerts", "dashboard"])
def test_only_known_metrics_are_used(source: str) -> None:
    exprs = (
        promql_catalog.alert_expressions().values() if source == "alerts" else promql_catalog.dashboard_expressions()
    )
    used = set().union(*(promql_catalog.metric_names(e) for e in exprs))
    assert used, "no cdc_mirror_* metric found"
    assert used <= promql_catalog.KNOWN_METRICS, f"unknown metrics: {sorted(used - promql_catalog.KNOWN_METRICS)}"


def test_catalogue_is_every_metric_the_connector_exposes() -> None:
    # KNOWN_METRICS is the contract the dashboard must cover: a metric added to connector/operate/metrics.py and
    # missing here would have no panel and no test saying so.
    # Every instrument the module declares, registered at import or on first use (fabric_status_readable).
    from prometheus_client.metrics import MetricWrapperBase

    from connector.operate import metrics

    families = [f for m in vars(metrics).values() if isinstance(m, MetricWrapperBase) for f in m.describe()]
    exposed = {f.name + "_total" if f.type == "counter" else f.name for f in families}
    assert exposed == promql_catalog.KNOWN_METRICS, {
        "missing from KNOWN_METRICS": sorted(exposed - promql_catalog.KNOWN_METRICS),
        "not exposed by the connector": sorted(promql_catalog.KNOWN_METRICS - exposed),
    }


def test_dashboard_shows_every_metric() -> None:
    used = set().union(*(promql_catalog.metric_names(e) for e in promql_catalog.dashboard_expressions()))
    assert promql_catalog.KNOWN_METRICS <= used, sorted(promql_catalog.KNOWN_METRICS - used)


def test_dashboard_queries_are_valid_promql(promtool: str, tmp_path: Path) -> None:
    # promtool parses every expression of a rules file: wrap each dashboard query in a recording rule.
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query_{i}", "expr": promql_catalog.grafana_substitute(expr)}
                    for i, expr in enumerate(promql_catalog.dashboard_expressions())
                ],
            }
        ]
    }
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump(rules))
    result = run([promtool, "check", "rules", str(path)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_structure() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "debezium-fabric-mirror"
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "job", "instance", "table"} <= variables
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    titles = " | ".join(p["title"].lower() for p in dashboard["panels"])
    for topic in ("op", "batch duration", "lag", "files", "bytes", "stopped", "errors"):
        assert topic in titles, f"no panel about {topic!r}"
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            used_vars = set(re.findall(r"\$(\w+)", target["expr"])) - {"__rate_interval"}
            assert used_vars <= variables, (panel["title"], used_vars - variables)


def test_grafana_provisioning_points_at_the_dashboard() -> None:
    compose = yaml.safe_load((REPO / "deploy" / "docker-compose.yml").read_text())
    provider = yaml.safe_load((REPO / "deploy/grafana/provisioning/dashboards/dashboards.yml").read_text())
    path = provider["providers"][0]["options"]["path"]
    mounts = compose["services"]["grafana"]["volumes"]
    assert any(m.startswith("./grafana/dashboard.json:" + path + "/") for m in mounts), mounts
    datasource = yaml.safe_load((REPO / "deploy/grafana/provisioning/datasources/prometheus.yml").read_text())
    assert datasource["datasources"][0]["type"] == "prometheus"


def test_readme_lists_every_expression() -> None:
    readme = (Path(__file__).parent / "README.md").read_text()
    listed = {
        line.strip()[3:-1]
        for line in readme.splitlines()
        if line.strip().startswith("- `") and line.strip().endswith("`")
    }
    missing = [e for e in promql_catalog.expressions() if e not in listed]
    assert not missing, "tests/deploy/README.md lacks:\n" + "\n".join(missing)
    stale = listed - set(promql_catalog.expressions())
    assert not stale, "tests/deploy/README.md lists expressions no longer used:\n" + "\n".join(sorted(stale))
