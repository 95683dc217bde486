"""Fabric's status as metrics: record_fabric_status and the streaming job's poller."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from prometheus_client import generate_latest

from connector.config import load_settings
from connector.fabric.status_reader import FabricStatusReader, FabricStatusUnreadable, FabricTableStatus
from connector.operate import metrics
from connector.stream.fabric_status_poller import FabricStatusPoller
from tests.support.fabric_api_double import MIRRORED_DATABASE_ID, TOKEN, WORKSPACE_ID, FabricApiDouble


def status(table: str, state: str = "Replicating", rows: int | None = 10) -> FabricTableStatus:
    return FabricTableStatus(table, state, rows, None, None, None)


def value(name: str, **labels: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(name, labels)


def states(table: str) -> set[str]:
    exposed = generate_latest(metrics.REGISTRY).decode()
    return {
        line.split('state="')[1].split('"')[0]
        for line in exposed.splitlines()
        if line.startswith("cdc_mirror_fabric_table_state{") and f'table="{table}"' in line
    }


@pytest.fixture(autouse=True)
def no_fabric_tables() -> Iterator[None]:
    metrics.record_fabric_status({})
    yield
    metrics.record_fabric_status({})


def test_record_sets_state_failed_and_rows() -> None:
    metrics.record_fabric_status({"public.a": status("public.a", rows=5), "s.b": status("s.b", "Failed", None)})
    assert value("cdc_mirror_fabric_status_readable") == 1
    assert value("cdc_mirror_fabric_table_state", table="public.a", state="Replicating") == 1
    assert value("cdc_mirror_fabric_table_failed", table="public.a") == 0
    assert value("cdc_mirror_fabric_processed_rows", table="public.a") == 5
    assert value("cdc_mirror_fabric_table_failed", table="s.b") == 1
    assert value("cdc_mirror_fabric_processed_rows", table="s.b") is None


def test_a_new_state_replaces_the_old_series() -> None:
    metrics.record_fabric_status({"public.a": status("public.a", "Snapshotting")})
    metrics.record_fabric_status({"public.a": status("public.a", "Failed")})
    assert states("public.a") == {"Failed"}
    assert value("cdc_mirror_fabric_table_failed", table="public.a") == 1
    metrics.record_fabric_status({"public.a": status("public.a", "Replicating", rows=None)})
    assert states("public.a") == {"Replicating"}
    assert value("cdc_mirror_fabric_table_failed", table="public.a") == 0
    assert value("cdc_mirror_fabric_processed_rows", table="public.a") is None


def test_a_table_fabric_no_longer_lists_loses_its_series() -> None:
    metrics.record_fabric_status({"public.a": status("public.a"), "public.b": status("public.b")})
    metrics.record_fabric_status({"public.b": status("public.b")})
    assert states("public.a") == set()
    assert value("cdc_mirror_fabric_table_failed", table="public.a") is None
    assert value("cdc_mirror_fabric_processed_rows", table="public.a") is None
    assert states("public.b") == {"Replicating"}


def test_unreadable_keeps_the_last_known_tables() -> None:
    metrics.record_fabric_status({"public.a": status("public.a", "Failed")})
    metrics.record_fabric_status(None)
    assert value("cdc_mirror_fabric_status_readable") == 0
    assert value("cdc_mirror_fabric_table_failed", table="public.a") == 1
    metrics.record_fabric_status({"public.a": status("public.a")})
    assert value("cdc_mirror_fabric_status_readable") == 1


class ScriptedReader(FabricStatusReader):
    """Answers from a list, one per read; an exception in the list is raised as a reader bug would be."""

    def __init__(self, answers: list[object]) -> None:
        super().__init__()
        self.location = "scripted://fabric"
        self.answers = answers
        self.reads = 0
        self.closed = False
        self.read_event = threading.Event()

    def _read(self) -> dict[str, FabricTableStatus]:
        self.reads += 1
        self.read_event.set()
        answer = self.answers[min(self.reads, len(self.answers)) - 1]
        if isinstance(answer, BaseException):
            raise answer
        assert isinstance(answer, dict)
        return answer

    def close(self) -> None:
        self.closed = True


def test_poller_records_every_read_and_survives_failures() -> None:
    reader = ScriptedReader(
        [
            {"public.a": status("public.a")},
            FabricStatusUnreadable("HTTP 503"),
            RuntimeError("a bug in a reader"),
            {"public.a": status("public.a", "Failed")},
        ]
    )
    poller = FabricStatusPoller(reader, interval_s=60)
    assert poller.poll_once() == {"public.a": status("public.a")}
    assert poller.latest() == {"public.a": status("public.a")}
    assert poller.poll_once() is None and poller.latest() is None
    assert value("cdc_mirror_fabric_status_readable") == 0
    assert poller.poll_once() is None  # the bug is logged, not raised
    assert value("cdc_mirror_fabric_status_readable") == 0
    assert poller.poll_once() is not None
    assert value("cdc_mirror_fabric_table_failed", table="public.a") == 1


def test_poller_thread_polls_until_stopped() -> None:
    reader = ScriptedReader([{"public.a": status("public.a")}])
    poller = FabricStatusPoller(reader, interval_s=0.05).start()
    deadline = time.monotonic() + 5
    while reader.reads < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert reader.reads >= 3
    poller.stop()
    assert reader.closed and not poller._thread.is_alive()
    reads = reader.reads
    time.sleep(0.2)
    assert reader.reads == reads


def test_poller_a_failing_metrics_update_does_not_stop_polling() -> None:
    def broken(_: object) -> None:
        raise ValueError("registry trouble")

    reader = ScriptedReader([{"public.a": status("public.a")}])
    poller = FabricStatusPoller(reader, interval_s=60, record=broken)
    assert poller.poll_once() == {"public.a": status("public.a")}


def test_poller_from_settings_against_the_rest_double() -> None:
    assert FabricStatusPoller.open(load_settings(None)) is None
    with FabricApiDouble(page_size=1) as fabric:
        fabric.set_table("public", "customers", processed_rows=42)
        fabric.set_table("sales", "orders", "Failed", error=("SchemaChange", "type changed"))
        settings = load_settings(
            None,
            **{
                "fabric_status.kind": "rest",
                "fabric_status.api_url": fabric.api_url,
                "fabric_status.workspace_id": WORKSPACE_ID,
                "fabric_status.mirrored_database_id": MIRRORED_DATABASE_ID,
                "fabric_status.bearer_token": TOKEN,
                "fabric_status.poll_s": 0.05,
            },
        )
        poller = FabricStatusPoller.open(settings)
        assert poller is not None
        poller.start()
        try:
            deadline = time.monotonic() + 5
            while poller.latest() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            assert value("cdc_mirror_fabric_processed_rows", table="public.customers") == 42
            assert value("cdc_mirror_fabric_table_failed", table="sales.orders") == 1
            assert value("cdc_mirror_fabric_table_state", table="sales.orders", state="Failed") == 1
            fabric.remove_table("public", "customers")
            deadline = time.monotonic() + 5
            while value("cdc_mirror_fabric_processed_rows", table="public.customers") is not None:
                assert time.monotonic() < deadline, "the removed table kept its series"
                time.sleep(0.02)
        finally:
            poller.stop()
