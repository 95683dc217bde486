"""Three schema changes within a minute on one table (issue 42 (f)): its rebuilds overlap, the mirror ends whole.

ADD COLUMN … DEFAULT (a refresh), DROP COLUMN (a rebuild) and a type change (a rebuild) land on a table of 20,000
rows (200 snapshot chunks at the stack's chunk size of 100: 10 s of reading or more, where 100 chunks could end
before the next change was seen), each as soon as the connector asked Debezium for the previous one's snapshot,
while ``run`` mirrors it with default settings (``rebuild.wait_s`` 1: no Fabric status here). The drop finds the
refresh's snapshot in flight (the change is seen within a trigger and ``wait_s``): the connector stops it
(``stop-snapshot``) and asks again, and the table is ``running`` only once Debezium reported the last snapshot
COMPLETED; ``verify`` then finds every row.
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import psycopg
import pytest

from connector.publish.lifecycle import Phase, SnapshotState
from tests.e2e.mirror_source import postgres_source, wait_for_watermark
from tests.e2e.test_rebuild_e2e import Connector, wait_until_tables_exact

pytestmark = pytest.mark.e2e

ROWS = 20_000
TABLE = "ov_orders"
TID = f"public.{TABLE}"
ASK = rf"table {re.escape(TID)}: asked Debezium .* \(signal (\w+)\)"
ASK_TIMEOUT_S = 120.0


def wait_for_ask(connector: Connector, count: int) -> None:
    """Until the connector has asked Debezium for ``count`` snapshots of the table (its log says so)."""
    deadline = time.monotonic() + ASK_TIMEOUT_S
    while len(re.findall(ASK, connector.log())) < count:
        assert time.monotonic() < deadline, f"no snapshot request #{count}: " + connector.log()[-4000:]
        time.sleep(0.2)


def test_three_schema_changes_within_a_minute_end_with_every_row(shared_stack: dict[str, str], tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("mirror:\n  rebuild:\n    wait_s: 1\n")
    connector = Connector(shared_stack, tmp_path, config, rf"{shared_stack['topic_prefix']}\.public\.{TABLE}")
    try:
        with psycopg.connect(shared_stack["postgres"], autocommit=True) as conn:
            conn.execute(f"CREATE TABLE {TID} (id int PRIMARY KEY, qty int NOT NULL, note text, legacy text)")
            conn.execute(f"INSERT INTO {TID} SELECT g, g, 'n' || g, 'l' || g FROM generate_series(1, {ROWS}) g")
            connector.start()
            connector.wait_for("initial rows", lambda t: t.rows_published >= ROWS, TID)
            for asked, ddl in enumerate(
                (
                    f"ALTER TABLE {TID} ADD COLUMN region text NOT NULL DEFAULT 'EU'",
                    f"ALTER TABLE {TID} DROP COLUMN legacy",
                    f"ALTER TABLE {TID} ALTER COLUMN qty TYPE bigint",
                ),
                start=1,
            ):
                if asked > 1:
                    wait_for_ask(connector, asked - 1)  # its snapshot begins: this change lands while it reads
                conn.execute(ddl)
                # Postgres sends no DDL event: the next change shows the new shape.
                conn.execute(f"UPDATE {TID} SET note = 'changed' WHERE id <= 3")
            conn.execute(f"UPDATE {TID} SET qty = qty + 5000000000 WHERE id <= 5")
        done = connector.wait_for(
            "the last snapshot completed",
            lambda t: t.lifecycle.phase is Phase.RUNNING and t.lifecycle.snapshot is not None,
            TID,
        )
        wait_for_watermark(postgres_source(shared_stack))
        wait_until_tables_exact(shared_stack["postgres"], tmp_path / "lz", [TID])
        assert connector.stop(signal.SIGTERM) == 0, connector.log()[-4000:]
    finally:
        connector.kill_if_running()
    log = connector.log()
    asked = re.findall(ASK, log)
    assert len(asked) >= 3, log[-4000:]  # the refresh, the two rebuilds (and any retry)
    # Running only once the snapshot asked for last completed (not an earlier one, cut short by the next request).
    track = done.lifecycle.snapshot
    assert track is not None and track.state is SnapshotState.COMPLETED and track.id == asked[-1], (track, asked)
    assert track.chunks >= ROWS // 100 - 1, track  # the whole table, chunk by chunk
    assert f"table {TID}: asked Debezium to stop its incremental snapshot" in log  # an overlap was stopped
    assert "Traceback" not in log
