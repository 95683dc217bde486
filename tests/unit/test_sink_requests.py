"""Round trips per changed table on OneLake (the DFS test double): what a batch of many small tables costs.

On OneLake every request is a network round trip of tens of milliseconds, so a batch touching a thousand tables
is bounded by how many each table needs. These counts are the design, checked exactly: a staged file is written
in place (create, append, flush: its name is unique to its staging attempt), the driver checks the table's
``_metadata.json`` by existence and renames the file (with the size its writer reported, so a lost answer is
recognised without reading the file first); a process's first batch of a table reads ``_metadata.json`` instead
of trying to create it, and lists ``_ProcessedFiles`` / ``_FilesReadyToDelete`` only when the table folder has
them.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from connector.config import MirrorSettings
from connector.readback.replay import replay_landing_zone
from connector.sink import MirrorSink
from connector.storage.local import LocalStorage
from tests.support.debezium import Topic, field
from tests.support.dfs_server import DfsTestServer, make_onelake_storage

TABLES = 12
COLUMNS = [field("id", "int32", optional=False), field("name", "string")]


def spent_since(server: DfsTestServer, before: Counter[str]) -> Counter[str]:
    spent = Counter(server.operations)
    spent.subtract(before)
    return +spent


def times_tables(per_table: dict[str, int], *, once: dict[str, int] | None = None) -> Counter[str]:
    """``per_table`` round trips for each table, plus those made ``once`` per batch."""
    return Counter({op: n * TABLES for op, n in per_table.items()}) + Counter(once or {})


def test_a_changed_table_costs_five_round_trips_and_a_first_touch_six(tmp_path: Path) -> None:
    topics = [Topic(f"db.public.t{n}", COLUMNS, ["id"]) for n in range(TABLES)]
    with DfsTestServer() as server:
        landing = make_onelake_storage(server, "ws/Files/LandingZone", filesystem="fs")
        sink = MirrorSink(landing, LocalStorage(tmp_path / "cp"), MirrorSettings())
        sink.process_batch(0, [t.record("r", None, {"id": k, "name": "a"}) for t in topics for k in range(3)])

        before = Counter(server.operations)
        sink.process_batch(1, [t.record("u", None, {"id": 1, "name": "b"}) for t in topics])
        assert spent_since(server, before) == times_tables({
            "create": 1, "append": 1, "flush": 1,  # the staged file, written in place
            "properties": 1,  # _metadata.json exists
            "rename": 1,  # onto its number (no read of the staged file first)
        })  # fmt: skip

        # A new process (a restart): start-up recovery first, then its first batch of each table.
        sink = MirrorSink(landing, LocalStorage(tmp_path / "cp"), MirrorSettings())
        before = Counter(server.operations)
        sink.process_batch(2, [t.record("u", None, {"id": 2, "name": "c"}) for t in topics])
        assert spent_since(server, before) == times_tables(
            {
                "create": 1, "append": 1, "flush": 1,
                "list": 1,  # the table folder, for its highest number (no _ProcessedFiles there)
                "read": 1,  # _metadata.json, compared with what the table needs
                "rename": 1,
            },
            once={"properties": 1, "read": 1},  # _partnerEvents.json is there; _connectorSource.json is read
        )  # fmt: skip

        rows = {tid: {r["id"]: r["name"] for r in t.to_pylist()} for tid, t in replay_landing_zone(landing).items()}
        assert rows == {f"public.t{n}": {0: "a", 1: "b", 2: "c"} for n in range(TABLES)}
