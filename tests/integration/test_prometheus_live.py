"""A real Prometheus (Debian's package) scrapes a running connector; every dashboard query returns data,
and so does every metric the alert rules use."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.promql_catalog import METRIC_RE, alert_expressions, dashboard_expressions, grafana_substitute
from tests.support.debezium import Topic, field
from tests.support.fabric_api_double import MIRRORED_DATABASE_ID, TOKEN, WORKSPACE_ID, FabricApiDouble
from tests.support.kafka import REPO_ROOT, produce
from tests.support.model import Workload

pytestmark = [pytest.mark.kafka, pytest.mark.spark]
READY_TIMEOUT_S = 240
DATA_TIMEOUT_S = 90
#: What the test's traffic must show; Fabric's view is the double's, read with the token from ${env:...}.
EXPECTED_VALUES = [
    'up{job="debezium-fabric-mirror"} == 1',
    'cdc_mirror_dead_letters_total{table="public.customers"} == 1',
    'cdc_mirror_rows_published_marker_free_total{table="public.loaded"} == 20',
    "cdc_mirror_ready == 1",
    "cdc_mirror_kafka_reachable == 1",
    "cdc_mirror_fabric_status_readable == 1",
    'cdc_mirror_fabric_table_failed{table="sales.orders"} == 1',
    'cdc_mirror_fabric_table_state{table="public.customers", state="Replicating"} == 1',
    'cdc_mirror_fabric_processed_rows{table="public.customers"} == 480',
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def query(prometheus: str, expr: str) -> list[Any]:
    url = f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.loads(response.read())
    assert body["status"] == "success", body
    result = body["data"]["result"]
    return result if isinstance(result, list) else [result]


@pytest.fixture
def fabric_api() -> Iterator[FabricApiDouble]:
    """Fabric's status API as the connector's fabric_status source (a local test double: Fabric cannot run here)."""
    with FabricApiDouble(page_size=1) as double:  # one table per page: the connector follows continuationToken
        double.set_table("public", "customers", processed_rows=480, processed_bytes=52_000)
        double.set_table("sales", "orders", "Failed", processed_rows=12, error=("SchemaChange", "type changed"))
        yield double


# Series this run (Kafka and the connector only) cannot have:
# - the continuous audit's (mirror.audit, off by default and needing a source database): tests/e2e/test_audit_e2e.py
#   runs the audit against a real source and checks what it reports;
# - the Debezium connectors' status (source.debezium_connect_url, needing Kafka Connect):
#   tests/e2e/test_debezium_status.py reads the stack's real Connect and checks the series it exports.
NOT_IN_THIS_RUN = ("cdc_mirror_audit_", "cdc_mirror_debezium_")


def without_data(prometheus: str) -> tuple[list[str], list[str]]:
    """The dashboard queries, and the metrics the alerts use, that Prometheus has no data for yet."""
    # A trailing comparison ("... == 1") filters a healthy connector's series away: query what it compares.
    empty = [
        expr
        for expr in dashboard_expressions()
        if not any(prefix in expr for prefix in NOT_IN_THIS_RUN)
        and not query(prometheus, re.sub(r"\s*(==|!=|>=|<=|>|<)\s*[\d.]+\s*$", "", grafana_substitute(expr)))
    ]
    alert_metrics = {name for expr in alert_expressions().values() for name in METRIC_RE.findall(expr)}
    return empty, [
        name for name in sorted(alert_metrics) if not name.startswith(NOT_IN_THIS_RUN) and not query(prometheus, name)
    ]


def test_prometheus_scrapes_connector_and_every_query_has_data(
    kafka_bootstrap: str, make_topic: Callable[..., str], fabric_api: FabricApiDouble, tmp_path: Path
) -> None:
    binary = shutil.which("prometheus")
    assert binary, "prometheus not installed: run deploy/local/setup-tests.sh"
    workload = Workload("prom", partitions=2)
    make_topic(workload.customers.name, 2)
    make_topic(workload.orders.name, 2)
    produce(kafka_bootstrap, workload.records(500))
    # An undecodable record: under poison_policy dead-letter it goes to the dead-letter folder, and only then
    # does cdc_mirror_dead_letters_total{table} exist, so the dead-letter panel and alert get data.
    produce(kafka_bootstrap, [workload.customers.raw(b'{"op":"c","after":')])
    # A table whose every event is a read of Debezium's initial snapshot: its initial load is published without
    # __rowMarker__, and only then does cdc_mirror_rows_published_marker_free_total{table} exist (its panel's data).
    loaded = Topic("prom.public.loaded", [field("id", "int32", optional=False), field("name", "string")], ["id"])
    make_topic(loaded.name, 1)
    reads = [loaded.record("r", None, {"id": i, "name": f"row {i}"}, snapshot="true") for i in range(1, 20)]
    produce(kafka_bootstrap, [*reads, loaded.record("r", None, {"id": 20, "name": "row 20"}, snapshot="last")])
    # A table truncated: under truncate_policy rebuild (the default) its rebuild begins, and only then does
    # cdc_mirror_table_resets_total{table, reason} exist (its panel's data).
    truncated = Topic("prom.public.truncated", [field("id", "int32", optional=False)], ["id"])
    make_topic(truncated.name, 1)
    produce(kafka_bootstrap, [truncated.record("c", None, {"id": 1}), truncated.truncate()])
    connector_config = tmp_path / "connector.yaml"
    connector_config.write_text(
        "mirror:\n  poison_policy: dead-letter\ndead_letter:\n  kind: folder\n"
        # Fabric's table status from the test double, so the Fabric panels and alerts have data.
        "fabric_status:\n"
        "  kind: rest\n"
        f"  api_url: {fabric_api.api_url}\n"
        f"  workspace_id: {WORKSPACE_ID}\n"
        f"  mirrored_database_id: {MIRRORED_DATABASE_ID}\n"
        "  bearer_token: ${env:FABRIC_STATUS_TOKEN}\n"
        "  poll_s: 1\n"
    )
    metrics_port, prometheus_port = free_port(), free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: debezium-fabric-mirror\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{metrics_port}']}}]\n"
    )
    connector = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "connector",
            "run",
            "--config",
            str(connector_config),
            "--bootstrap-servers",
            kafka_bootstrap,
            "--topics",
            r"prom\..*",
            "--landing-zone",
            str(tmp_path / "lz"),
            "--checkpoint",
            str(tmp_path / "cp"),
            "--trigger",
            "1s",
            "--max-offsets-per-trigger",
            "200",
            "--metrics-port",
            str(metrics_port),
        ],
        cwd=REPO_ROOT,
        env={**os.environ, "FABRIC_STATUS_TOKEN": TOKEN},
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "connector.log").open("w"),
    )
    server = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prometheus_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "prometheus.log").open("w"),
    )
    prometheus = f"http://127.0.0.1:{prometheus_port}"
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                if query(prometheus, 'cdc_mirror_batches_total{outcome="committed"} > 2'):
                    break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            pytest.fail("no committed batches scraped:\n" + (tmp_path / "connector.log").read_text()[-3000:])
        produce(kafka_bootstrap, workload.records(300))  # more traffic so rates over the window are non-zero
        # A nullable column added to a table (union: no snapshot needed), so cdc_mirror_schema_changes_total exists.
        loaded.columns = [*loaded.columns, field("note", "string")]
        produce(kafka_bootstrap, [loaded.record("u", None, {"id": 1, "name": "row 1", "note": "added"})])
        # Until every dashboard query and every metric an alert uses has data (rates need two scrapes after it),
        # and the values below hold: they change no more once the backlog is published.
        deadline = time.monotonic() + DATA_TIMEOUT_S
        while time.monotonic() < deadline:
            empty, missing = without_data(prometheus)
            failing = [expr for expr in EXPECTED_VALUES if not query(prometheus, expr)]
            if not (empty or missing or failing):
                break
            time.sleep(0.5)
        assert empty == [], f"dashboard queries without data: {empty}"
        assert missing == [], f"metrics used by alerts without data: {missing}"
        assert failing == [], f"queries without the expected value: {failing}"
        # Fabric's view, read through every page of the double with the token from ${env:...}.
        assert {c.continuation_token for c in fabric_api.table_calls()} == {None, "page-1"}
        assert {c.authorization for c in fabric_api.table_calls()} == {f"Bearer {TOKEN}"}
        # A table Fabric no longer lists loses its series; a table it reports again comes back.
        fabric_api.remove_table("sales", "orders")
        deadline = time.monotonic() + 30
        while query(prometheus, 'cdc_mirror_fabric_table_failed{table="sales.orders"}'):
            assert time.monotonic() < deadline, "sales.orders kept its Fabric series after Fabric dropped it"
            time.sleep(0.25)
    finally:
        connector.terminate()
        server.terminate()
        connector.wait(timeout=60)
        server.wait(timeout=60)
