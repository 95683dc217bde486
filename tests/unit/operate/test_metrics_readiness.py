"""/readyz: ready only while the job makes progress and a Kafka broker answers (served over real HTTP)."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from connector.operate.health import HealthState
from connector.operate.metrics_server import serve


class Clock:
    """A hand-moved clock, so stall detection is checked without waiting."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def health(clock: Clock) -> HealthState:
    return HealthState(stall_after_s=300, clock=clock)


@pytest.fixture
def readyz(health: HealthState) -> Iterator[str]:
    server = serve(0, health, host="127.0.0.1")
    try:
        yield f"http://127.0.0.1:{server.server_port}/readyz"
    finally:
        server.shutdown()
        server.server_close()


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_unready_until_running_then_ready(health: HealthState, readyz: str) -> None:
    assert get(readyz) == (503, "starting\n")
    health.set(True, "running")
    assert get(readyz) == (200, "running\n")


def test_behind_with_no_batch_for_longer_than_the_stall_limit_is_unready(
    health: HealthState, clock: Clock, readyz: str
) -> None:
    health.set(True, "running")
    health.offsets_behind(1200)
    clock.now += 299
    assert get(readyz)[0] == 200
    clock.now += 2
    status, reason = get(readyz)
    assert status == 503
    assert "1200 offsets behind" in reason and "metrics.stall_after_s=300" in reason
    health.set(True, "running")  # a batch completes: progress again
    assert get(readyz)[0] == 200


def test_caught_up_and_idle_for_long_stays_ready(health: HealthState, clock: Clock, readyz: str) -> None:
    health.set(True, "running")
    health.offsets_behind(0)
    clock.now += 86_400
    assert get(readyz)[0] == 200


def test_unreachable_broker_is_unready_and_recovers(health: HealthState, readyz: str) -> None:
    health.set(True, "running")
    health.broker("Local: Broker transport failure")
    assert get(readyz) == (503, "kafka unreachable: Local: Broker transport failure\n")
    health.broker(None)
    assert get(readyz)[0] == 200


def test_a_failed_batch_is_unready(health: HealthState, readyz: str) -> None:
    health.set(True, "running")
    health.set(False, "batch 7 failed")
    assert get(readyz) == (503, "batch 7 failed\n")
