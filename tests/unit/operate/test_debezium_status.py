"""Kafka Connect's connector status as the connector reads, logs, exports and shows it.

The answer parsed here is a real one: ``GET /connectors?expand=status`` from the Postgres stack's Kafka Connect
worker (Debezium 3.7), with a task that failed creating its replication slot
(``tests/e2e/test_debezium_status.py`` registers that connector and reads the live worker).
"""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from connector.config import ConnectorSettings
from connector.debezium_control.debezium_status_poller import DebeziumStatusPoller
from connector.errors import ConnectorError
from connector.operate import metrics, status_page
from connector.operate.debezium_status import (
    FAILED,
    RUNNING,
    UNREGISTERED,
    DebeziumConnectorStatus,
    WorkUnit,
    parse_status,
    reason,
    statuses_from_answer,
)
from connector.operate.status_history import StatusHistory
from connector.operate.status_model import StatusBoard

ANSWER: dict[str, Any] = json.loads(
    (Path(__file__).parents[2] / "data" / "kafka_connect" / "status_failed_task.json").read_text()
)
FAILING = "e2e-failing-628d5bcf"
OURS = "mirror-source"
URL = "http://connect:8083/connectors?expand=status"


def statuses(answer: dict[str, Any] = ANSWER) -> dict[str, DebeziumConnectorStatus]:
    return {name: parse_status(name, entry, URL) for name, entry in answer.items()}


def test_a_failed_task_is_down_and_named_with_its_root_cause() -> None:
    found = statuses()
    assert found[OURS].up and found[OURS].failed == 0 and found[OURS].problem() is None
    failing = found[FAILING]
    assert failing.instance.state == RUNNING and [t.state for t in failing.tasks] == [FAILED]
    assert not failing.up and failing.failed == 1
    assert failing.problem() == (
        "task 0 FAILED on 127.0.0.1:27971: io.debezium.DebeziumException: Creation of replication slot failed; "
        'caused by org.postgresql.util.PSQLException: ERROR: could not access file "decoderbufs": No such file or '
        "directory"
    )


def test_reason_keeps_the_first_line_and_the_last_cause_only() -> None:
    trace = "a.B: outer\n\tat x\nCaused by: c.D: middle\n\tat y\nCaused by: e.F: root\n\t... 3 more\n"
    assert reason(trace) == "a.B: outer; caused by e.F: root"
    assert reason("a.B: alone\n\tat x") == "a.B: alone"
    assert reason("") == ""
    assert len(reason("x" * 5000)) == 600


@pytest.mark.parametrize(
    ("instance", "tasks", "problem"),
    [
        (RUNNING, [], "RUNNING without a task"),
        ("PAUSED", ["PAUSED"], "connector PAUSED on w; task 0 PAUSED on w"),
        (RUNNING, ["RUNNING", "UNASSIGNED"], "task 1 UNASSIGNED on w"),
        (FAILED, [], "connector FAILED on w"),
    ],
)
def test_every_state_but_running_is_down(instance: str, tasks: list[str], problem: str) -> None:
    status = DebeziumConnectorStatus(
        "c", WorkUnit(None, instance, "w", ""), tuple(WorkUnit(i, s, "w", "") for i, s in enumerate(tasks))
    )
    assert not status.up
    assert status.problem() == problem


def test_an_answer_without_states_is_refused_naming_the_connector() -> None:
    with pytest.raises(
        ConnectorError, match=r"connect:8083/connectors\?expand=status: unexpected status of connector 'x'"
    ):
        parse_status("x", {"status": {"name": "x"}}, URL)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[dict[str, DebeziumConnectorStatus] | None] = []

    def __call__(self, found: Any) -> None:
        self.calls.append(None if found is None else dict(found))


def test_the_poller_logs_each_change_once_and_a_recovery(caplog: pytest.LogCaptureFixture) -> None:
    """Seven reads in a row, answered from the recorded answer (changed where a state must differ)."""
    answers: list[dict[str, DebeziumConnectorStatus] | Exception] = []
    recorder = Recorder()

    def recorded(_url: str, _names: list[str]) -> dict[str, DebeziumConnectorStatus]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    poller = DebeziumStatusPoller("http://connect:8083", [], 60, record=recorder, read=recorded)
    poller_module = "connector.debezium_control.debezium_status_poller"
    running = copy.deepcopy(ANSWER)
    running[FAILING]["status"]["tasks"][0] = {"id": 0, "state": RUNNING, "worker_id": "127.0.0.1:27971"}
    paused = copy.deepcopy(running)
    paused[FAILING]["status"]["connector"]["state"] = "PAUSED"
    answers += [statuses(), statuses(), ConnectorError("down"), ConnectorError("down"), statuses(running)]
    answers += [statuses(paused), statuses(running)]
    with caplog.at_level(logging.INFO, logger=poller_module):
        for _ in range(7):
            poller.poll_once()
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    failed = [m for level, m in lines if level == "ERROR" and "FAILED" in m]
    assert len(failed) == 1 and failed[0].startswith(f"Debezium connector {FAILING} sends no changes: task 0 FAILED")
    assert f"POST /connectors/{FAILING}/restart?includeTasks=true&onlyFailed=true" in failed[0]
    assert [m for level, m in lines if level == "WARNING" and "PAUSED" not in m] == [
        "Debezium connectors' status not read: down"
    ]
    assert [m for level, m in lines if level == "INFO"] == [f"Debezium connector {FAILING} runs again"] * 2
    paused_lines = [(level, m) for level, m in lines if "PAUSED" in m]
    assert len(paused_lines) == 1 and paused_lines[0][0] == "WARNING"  # an operator's act, not a failure
    assert f"resume it: PUT /connectors/{FAILING}/resume" in paused_lines[0][1]
    assert not any(OURS in m for _, m in lines)
    assert [c is None for c in recorder.calls] == [False, False, True, True, False, False, False]


def test_metrics_keep_a_failure_while_connect_is_unreadable_and_drop_a_gone_connector() -> None:
    metrics.record_debezium_status(statuses())

    def sample(name: str, connector: str | None = None) -> float | None:
        return metrics.REGISTRY.get_sample_value(name, {"connector": connector} if connector else {})

    assert (sample("cdc_mirror_debezium_up", OURS), sample("cdc_mirror_debezium_up", FAILING)) == (1, 0)
    assert sample("cdc_mirror_debezium_failed", FAILING) == 1
    assert sample("cdc_mirror_debezium_status_readable") == 1
    metrics.record_debezium_status(None)
    assert sample("cdc_mirror_debezium_status_readable") == 0
    assert sample("cdc_mirror_debezium_failed", FAILING) == 1
    metrics.record_debezium_status({OURS: statuses()[OURS]})
    assert sample("cdc_mirror_debezium_failed", FAILING) is None and sample("cdc_mirror_debezium_up", FAILING) is None
    assert sample("cdc_mirror_debezium_up", OURS) == 1


def test_the_status_page_names_a_stopped_connector_and_connects_silence() -> None:
    board = StatusBoard(StatusHistory())
    board.describe(ConnectorSettings())
    before = board.snapshot((True, "running"), {})
    assert before["job"]["debezium"] is None and "<dt>Debezium</dt><dd>not read</dd>" in status_page.render_page(
        before, {}
    )
    board.debezium(statuses())
    snap = board.snapshot((True, "running"), {})
    rows = {row["connector"]: row for row in snap["job"]["debezium"]}
    assert rows[OURS] == {"connector": OURS, "state": RUNNING, "up": True, "failed": 0, "problem": None}
    assert rows[FAILING]["failed"] == 1 and "decoderbufs" in rows[FAILING]["problem"]
    page = status_page.render_page(snap, {})
    assert f'{OURS}: <span class="ok">running</span>' in page
    assert f'{FAILING}: <span class="bad">task 0 FAILED on 127.0.0.1:27971: io.debezium' in page
    assert "&quot;decoderbufs&quot;" in page  # Connect's text is escaped
    board.debezium(None)
    stale = status_page.render_page(board.snapshot((True, "running"), {}), {})
    assert "(last known: Kafka Connect does not answer)" in stale and "decoderbufs" in stale


def test_the_poller_is_opened_only_with_a_connect_url_and_an_interval() -> None:
    assert DebeziumStatusPoller.open(ConnectorSettings()) is None
    url = "http://connect:8083"
    assert (
        DebeziumStatusPoller.open(ConnectorSettings(source={"debezium_connect_url": url, "debezium_status_poll_s": 0}))
        is None
    )
    poller = DebeziumStatusPoller.open(
        ConnectorSettings(source={"debezium_connect_url": url, "debezium_connectors": ["a"]})
    )
    assert poller is not None and poller.connect_url == url


def test_a_named_connector_connect_does_not_list_is_unregistered() -> None:
    found = statuses_from_answer(ANSWER, ["gone", OURS], URL)
    assert list(found) == ["gone", OURS]
    assert found["gone"].instance.state == UNREGISTERED and found["gone"].problem() == "not registered on Kafka Connect"
    assert set(statuses_from_answer(ANSWER, [], URL)) == {OURS, FAILING}
    with pytest.raises(ConnectorError, match="not an object of connectors"):
        statuses_from_answer(["not", "an", "object"], [], URL)
