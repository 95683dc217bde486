"""Retrying a batch that failed for a transient reason: the error taxonomy decides, the sink keeps it exact.

OneLake is the DFS test double (``tests/support/dfs_server.py``): a real HTTP server speaking the ADLS Gen2
REST API, since OneLake cannot exist on this machine. Backoffs are zero: nothing here waits on time.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pytest

from connector.config import MirrorSettings
from connector.errors import ConfigError, TransientError
from connector.readback.replay import replay_landing_zone
from connector.sink import MirrorSink
from connector.storage.errors import StorageAccessDenied, StorageUnavailable
from connector.storage.local import LocalStorage
from connector.stream.batch_retry import retry_transient
from tests.support.debezium import Topic, field
from tests.support.dfs_server import FAST_RETRY, DfsTestServer, FaultPlan, make_onelake_storage

NO_WAIT = (0.0, 0.0, 0.0)


class Attempts:
    """Fails with the given errors in turn, then returns the number of calls."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> int:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.calls


def test_transient_failures_are_retried_until_one_attempt_succeeds() -> None:
    attempts = Attempts(StorageUnavailable("503"), StorageUnavailable("429"))
    assert retry_transient(attempts, "batch 1", backoff_s=NO_WAIT) == 3


def test_terminal_failures_are_not_retried() -> None:
    for error in (StorageAccessDenied("403"), ConfigError("bad"), ValueError("bug")):
        attempts = Attempts(error)
        with pytest.raises(type(error)):
            retry_transient(attempts, "batch 1", backoff_s=NO_WAIT)
        assert attempts.calls == 1


def test_retries_are_bounded_and_the_last_error_is_raised() -> None:
    attempts = Attempts(*(StorageUnavailable(f"try {i}") for i in range(10)))
    with pytest.raises(StorageUnavailable, match="try 3"):
        retry_transient(attempts, "batch 1", backoff_s=NO_WAIT)
    assert attempts.calls == 4


def test_a_graceful_stop_ends_the_wait_at_once() -> None:
    stop = threading.Event()
    stop.set()
    attempts = Attempts(StorageUnavailable("503"))
    with pytest.raises(StorageUnavailable):
        retry_transient(attempts, "batch 1", backoff_s=(3600.0,), stop=stop)
    assert attempts.calls == 1


def test_one_taxonomy_storage_unavailable_is_transient_access_denied_is_not() -> None:
    assert isinstance(StorageUnavailable("x"), TransientError) and StorageUnavailable("x").transient
    assert not isinstance(StorageAccessDenied("x"), TransientError) and not StorageAccessDenied("x").transient


def test_a_batch_retried_after_onelake_stayed_unavailable_publishes_each_file_once(tmp_path: Path) -> None:
    t = Topic("dbserver1.public.items", [field("id", "int32", optional=False), field("v", "string")], ["id"])
    records = [t.record("c", None, {"id": i, "v": f"v{i}"}) for i in range(50)]
    root = "Inventory.MountedRelationalDatabase/Files/LandingZone"
    with DfsTestServer(seed=3) as server:
        storage = make_onelake_storage(server, root, retry=replace(FAST_RETRY, max_retries=1))
        sink = MirrorSink(storage, LocalStorage(tmp_path / "cp"), MirrorSettings(max_rows_per_file=10))
        sink.process_batch(0, records[:10])
        # Batch 1's plan is written, then renaming its staged files into place fails until the storage client
        # gives up (StorageUnavailable), twice; then the service recovers.
        server.set_faults(FaultPlan(transient_rate=1.0, operations=frozenset({"rename"}), max_faults=4))
        result = retry_transient(lambda: sink.process_batch(1, records[10:]), "batch 1", backoff_s=NO_WAIT)
        server.set_faults()
        assert sum(server.injected.values()) == 4
    assert result.stopped == {}
    files = sorted(i.path for i in storage.list_dir("public.schema/items") if i.path.rsplit("/", 1)[-1][0].isdigit())
    assert [f.rsplit("/", 1)[-1] for f in files] == [
        f"{n:020d}.parquet" for n in range(1, 6)
    ]  # 10 rows, then 40 in files of 10
    table = replay_landing_zone(storage)["public.items"]
    assert sorted(table.column("id").to_pylist()) == list(range(50))
