"""The mirrored database's own status: read beside the tables, it drives ``/readyz`` and
``cdc_mirror_fabric_database_up`` at each poll, stops ``run`` at start when definite, and ``FabricApi`` waits for
Fabric's long-running operations and throttling within a bound, one progress line per wait.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from connector.config import load_settings
from connector.errors import ConfigError
from connector.fabric.database_init import mirroring_definition
from connector.fabric.rest_api import FabricApi, FabricApiError
from connector.fabric.status import open_fabric_status
from connector.operate import metrics
from connector.operate.health import HealthState
from connector.stream.fabric_status_poller import FabricStatusPoller
from tests.support.fabric_api_double import MIRRORED_DATABASE_ID, TOKEN, WORKSPACE_ID, FabricApiDouble


@pytest.fixture
def fabric() -> Iterator[FabricApiDouble]:
    with FabricApiDouble() as double:
        yield double


def poller(fabric: FabricApiDouble, health: HealthState, **overrides: str) -> FabricStatusPoller:
    settings = load_settings(
        None,
        **{
            "fabric_status.kind": "rest",
            "fabric_status.api_url": fabric.api_url,
            "fabric_status.workspace_id": WORKSPACE_ID,
            "fabric_status.mirrored_database_id": MIRRORED_DATABASE_ID,
            "fabric_status.bearer_token": TOKEN,
            **overrides,
        },
    )
    opened = FabricStatusPoller.open(settings, health)
    assert opened is not None
    return opened


def database_up() -> float | None:
    return metrics.REGISTRY.get_sample_value("cdc_mirror_fabric_database_up")


def test_a_database_stopped_while_streaming_is_unready_within_one_poll_and_ready_when_started(
    fabric: FabricApiDouble,
) -> None:
    health = HealthState()
    status = poller(fabric, health)
    health.set(True, "running")
    status.poll_once()
    assert health.status() == (True, "running") and database_up() == 1
    fabric.database_status = "Stopped"
    status.poll_once()  # one poll
    ready, reason = health.status()
    assert not ready and reason == "fabric mirrored database not running: Stopped"
    assert database_up() == 0
    fabric.database_status = "Running"
    status.poll_once()
    assert health.status() == (True, "running") and database_up() == 1
    status.stop()


def test_an_unreadable_database_status_keeps_the_last_known_one(fabric: FabricApiDouble) -> None:
    health = HealthState()
    status = poller(fabric, health)
    health.set(True, "running")
    fabric.database_status = "Paused"
    status.poll_once()
    fabric.unavailable_status = 503
    status.poll_once()
    assert health.status()[0] is False and database_up() == 0
    db = status.database()
    assert db is not None and db.state == "Paused"
    status.stop()


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("Stopped", "the mirrored database is Stopped"),
        ("wrong item", "HTTP 404 ItemNotFound"),
        ("wrong token", "HTTP 401 TokenExpired"),
    ],
)
def test_run_refuses_a_definite_problem_at_start(fabric: FabricApiDouble, change: str, expected: str) -> None:
    overrides = {}
    if change == "Stopped":
        fabric.database_status = "Stopped"
    elif change == "wrong item":
        overrides["fabric_status.mirrored_database_id"] = "00000000-0000-0000-0000-000000000000"
    else:
        overrides["fabric_status.bearer_token"] = "wrong-secret-token"
    with pytest.raises(ConfigError) as refused:
        poller(fabric, HealthState(), **overrides)
    assert expected in str(refused.value) and "wrong-secret-token" not in str(refused.value)


def test_run_starts_through_a_fabric_outage(fabric: FabricApiDouble) -> None:
    fabric.unavailable_status = 503
    status = poller(fabric, HealthState())
    assert status.database() is None
    status.stop()


def test_monitoring_files_report_no_database_status(tmp_path: object) -> None:
    settings = load_settings(
        None, **{"fabric_status.kind": "monitoring", "fabric_status.monitoring_url": str(tmp_path)}
    )
    reader = open_fabric_status(settings)
    assert reader is not None and reader.database() is None


class FakeClock:
    """Sleeps recorded, not slept: the waits a test asserts are the ones the service asked for."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


def api(fabric: FabricApiDouble, clock: FakeClock, lines: list[str], max_wait_s: float = 600) -> FabricApi:
    return FabricApi(
        fabric.api_url,
        lambda: TOKEN,
        max_wait_s=max_wait_s,
        progress=lines.append,
        sleep=clock.sleep,
        clock=clock.clock,
    )


def test_a_long_running_create_and_throttling_are_followed_as_retry_after_says(fabric: FabricApiDouble) -> None:
    fabric.lro_polls, fabric.retry_after, fabric.throttle_next = 2, "3", 1
    clock, lines = FakeClock(), []
    with api(fabric, clock, lines) as client:
        item = client.create_mirrored_database(WORKSPACE_ID, "db", mirroring_definition("dbo", None), "")
    assert item["displayName"] == "db" and fabric.item_named("db") is not None
    assert clock.sleeps == [3, 3, 3, 3]  # one 429, the 202, two Running states
    assert len(lines) == 4 and "throttled (HTTP 429)" in lines[0] and "Running 50%" in lines[2]
    assert all("next check in 3s" in line for line in lines)
    paths = [r.path for r in fabric.requests]
    assert paths[-1].endswith("/result") and sum(p.startswith("/v1/operations/") for p in paths) == 4


def test_waits_are_bounded(fabric: FabricApiDouble) -> None:
    fabric.lro_polls, fabric.retry_after = 1000, "20"
    clock, lines = FakeClock(), []
    with api(fabric, clock, lines, max_wait_s=50) as client, pytest.raises(FabricApiError) as stopped:
        client.create_mirrored_database(WORKSPACE_ID, "db", mirroring_definition("dbo", None), "")
    assert stopped.value.code == "WaitExceeded" and "the bound is 50s" in str(stopped.value)
    assert clock.sleeps == [20, 20, 10] and len(lines) == 3


def test_an_operation_that_fails_is_its_error(fabric: FabricApiDouble) -> None:
    clock, lines = FakeClock(), []
    fabric.items.clear()
    with api(fabric, clock, lines) as client, pytest.raises(FabricApiError) as refused:
        client.create_mirrored_database(WORKSPACE_ID, "", mirroring_definition("dbo", None), "")
    assert refused.value.status == 400 and refused.value.code == "InvalidDefinition"
