"""The sink publishing to OneLake while the service throttles: the issue's acceptance run for faults.

Several thousand Debezium events go through ``MirrorSink`` into ``OneLakeStorage`` on the DFS test
double, which answers 20% of all requests 429 or 503 with ``Retry-After``. Backoff is milliseconds
(``FAST_RETRY``, the production code path with short waits); nothing here asserts on wall time.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

from connector.config import MirrorSettings
from connector.landing_zone.layout import STAGED_PREFIX
from connector.readback.replay import replay_landing_zone
from connector.readback.validate import validate_landing_zone
from connector.sink import MirrorSink
from connector.storage.base import TEMP_PREFIX
from connector.storage.local import LocalStorage
from tests.support.dfs_server import FAST_RETRY, DfsTestServer, FaultPlan, iter_files, make_onelake_storage
from tests.support.model import Workload, replayed_rows

FS = "workspace"
ROOT = "Inventory.MountedRelationalDatabase/Files/LandingZone"

#: A 20% fault rate exhausts 12 retries with probability 0.2**13 per request: never, in practice.
FAULTY_RETRY = replace(FAST_RETRY, max_retries=12)

OPERATIONS = 3000
RECORDS_PER_BATCH = 400


def numbered_files(server: DfsTestServer) -> dict[str, str]:
    """Every 20-digit file under the landing zone, with its SHA-256, read directly (no HTTP, no faults)."""
    out = {}
    for path in iter_files(server, FS, ROOT):
        if path.rsplit("/", 1)[-1][:1].isdigit():
            data = server.file_bytes(FS, f"{ROOT}/{path}")
            assert data is not None
            out[path] = hashlib.sha256(data).hexdigest()
    return out


def test_thousands_of_events_through_20_percent_throttling_publish_exactly_the_source(tmp_path: Path) -> None:
    workload = Workload("shop", partitions=3, seed=11)
    records = workload.records(OPERATIONS)
    assert len(records) > 3000
    with DfsTestServer(seed=5) as server:
        storage = make_onelake_storage(server, ROOT, filesystem=FS, retry=FAULTY_RETRY)
        sink = MirrorSink(storage, LocalStorage(tmp_path / "checkpoint"), MirrorSettings(max_rows_per_file=60))
        server.set_faults(FaultPlan(transient_rate=0.20, transient_statuses=(429, 503), retry_after="1"))

        first_seen: dict[str, str] = {}
        for batch_id, start in enumerate(range(0, len(records), RECORDS_PER_BATCH)):
            result = sink.process_batch(batch_id, records[start : start + RECORDS_PER_BATCH])
            assert result.stopped == {}
            for path, sha in numbered_files(server).items():
                assert first_seen.setdefault(path, sha) == sha, f"{path} changed after it was published"
        server.set_faults()

        # The service really was throttling, with both statuses, throughout.
        faults, answered = sum(server.injected.values()), sum(server.requests.values())
        assert faults >= 0.15 * (faults + answered), (server.injected, server.requests)
        assert server.injected["429"] > 25 and server.injected["503"] > 25, server.injected
        # The landing zone is valid and replays to exactly the source's state.
        assert [str(p) for p in validate_landing_zone(storage)] == []
        assert replayed_rows(replay_landing_zone(storage)) == workload.expected()
        # No numbered file was ever written twice: the server saw each one's content arrive once
        # (a rename onto it), and what is there now is what arrived then.
        final = numbered_files(server)
        assert final == first_seen and len(final) > 50
        arrivals: dict[str, list[str]] = {}
        for filesystem, path, sha in server.content_log:
            name = path.rsplit("/", 1)[-1]
            if filesystem == FS and name[:1].isdigit():
                arrivals.setdefault(path.removeprefix(f"{ROOT}/"), []).append(sha)
        assert arrivals == {path: [sha] for path, sha in final.items()}
        # Nothing half-done is left: no temporary upload, no staged file.
        leftovers = [
            p for p in iter_files(server, FS, ROOT) if p.rsplit("/", 1)[-1].startswith((TEMP_PREFIX, STAGED_PREFIX))
        ]
        assert leftovers == []
        storage.close()
