"""Initial loads on the real stacks (issue 25): Debezium SIGKILLed in the middle of its initial snapshot.

The stack comes up on a 60k-row ``big`` table and two small ones; Kafka Connect is killed once ``big``'s topic
holds 15k reads, ``big`` keeps changing (updates, deletes, inserts) while Connect is down and after, and Connect
comes back: Debezium starts its snapshot again from the first row (``source.snapshot`` ``first`` again, on
Postgres and MariaDB alike) and the changes made between the passes reach Kafka only as the second pass's
reads. The connector, streaming, must rebuild ``big`` (its initial load saw a second pass), publish the small
tables marker-free, and end equal to the source through the Delta oracle (``verify``).
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from connector.publish.ledger import BatchLedger
from connector.publish.ledger_format import state_to_json
from connector.publish.lifecycle import Phase
from connector.storage import LocalStorage
from tests.e2e.snapshot_restart import up_killed_mid_snapshot
from tests.e2e.stack_teardown import down_and_delete

pytestmark = pytest.mark.e2e

REPO_ROOT = Path(__file__).resolve().parents[2]
VERIFY_TIMEOUT_S = 900
# Every row of big is read up to four times (the killed pass, the second pass, the rebuild's incremental snapshot,
# verify), so big is no larger than the kill needs. The kill is placed by progress (the topic's size, polled every
# 0.05 s), and what it needs is the snapshot still running then: the 45,000 reads after the kill point take ~2.2 s
# at 20k rows/s (Debezium read ~6k rows/s here on a loaded Intel Xeon: this allows a machine three times as fast),
# over twenty times the ~2,000 reads a polling step (~0.1 s) can overshoot at that speed; and the snapshot counts as
# done only after Connect's next offset commit (every 10 s on this stack), later still.
BIG_TABLE_ROWS = 60_000
KILL_AFTER_READS = 15_000


def _verify(source_url: str, landing: Path, schema: str) -> subprocess.CompletedProcess[str]:
    # Every table named: while big is rebuilt its folder is gone, and verify without --tables compares only the
    # tables the landing zone holds (it passed mid-rebuild under load, before big was published again).
    tables = ",".join(f"{schema}.{table}" for table in ("big", "small_a", "small_b"))
    return subprocess.run(
        [sys.executable, "-m", "connector", "verify", "--source", source_url, "--landing-zone", str(landing),
         "--tables", tables],
        capture_output=True, text=True, timeout=600, check=False, cwd=REPO_ROOT,
    )  # fmt: skip


def _rebuilt(checkpoint: Path, schema: str) -> bool:
    """Whether big's rebuild ran and its snapshot completed (the ledger, read beside the running job): ``verify``
    reads the whole table, so it runs only once it can pass instead of beside the rebuild's snapshot."""
    try:
        table = BatchLedger(LocalStorage(str(checkpoint))).state.tables.get(f"{schema}.big")
    except Exception:  # noqa: BLE001 - the job may not have written its ledger yet
        return False
    return table is not None and table.lifecycle.phase is Phase.RUNNING and table.lifecycle.last_rebuild_at is not None


def _has_marker(path: Path) -> bool:
    return "__rowMarker__" in pq.read_schema(io.BytesIO(path.read_bytes())).names


@pytest.mark.parametrize("source", ["postgres", "mariadb"])
def test_debezium_killed_mid_snapshot_rebuilds_the_table_and_ends_exact(source: str, tmp_path: Path) -> None:
    state_dir = Path(tempfile.mkdtemp(prefix=f"e2e-initial-load-{source}-"))
    state_dir.chmod(0o755)
    # The rebuild's incremental snapshot of big in 3 chunks (the stack's default of 100 rows would make 600: Debezium
    # spends time on each chunk whatever its size).
    os.environ["INCREMENTAL_SNAPSHOT_CHUNK_SIZE"] = "20000"
    run: subprocess.Popen[bytes] | None = None
    try:
        values, changer = up_killed_mid_snapshot(state_dir, source, KILL_AFTER_READS, BIG_TABLE_ROWS)
        source_url = values["postgres"] if source == "postgres" else values["mariadb"]
        schema = "public" if source == "postgres" else "mirror"
        config = tmp_path / "mirror.yaml"
        config.write_text("mirror:\n  rebuild:\n    wait_s: 1\n", encoding="utf-8")
        landing, checkpoint = tmp_path / "lz", tmp_path / "cp"
        log = open(tmp_path / "run.log", "wb")  # noqa: SIM115 - closed in finally
        run = subprocess.Popen(
            [sys.executable, "-m", "connector", "run", "--config", str(config),
             "--bootstrap-servers", values["bootstrap.servers"], "--topics", values["topics"],
             "--landing-zone", str(landing), "--checkpoint", str(checkpoint), "--trigger", "1s", "--metrics-port", "0"],
            cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        time.sleep(12)  # changes while the connector starts and publishes the initial load (its JVM starts in ~7 s)
        changer.stop_event.set()
        assert not changer.errors, changer.errors
        deadline = time.monotonic() + VERIFY_TIMEOUT_S
        while True:
            assert run.poll() is None, (tmp_path / "run.log").read_text(errors="replace")[-4000:]
            if not _rebuilt(checkpoint, schema):
                assert time.monotonic() < deadline, (tmp_path / "run.log").read_text(errors="replace")[-4000:]
                time.sleep(0.5)
                continue
            result = _verify(source_url, landing, schema)
            if result.returncode == 0:
                break
            assert time.monotonic() < deadline, result.stdout[-4000:] + result.stderr[-2000:]
            time.sleep(1)
        for table in ("small_a", "small_b"):
            files = sorted((landing / f"{schema}.schema" / table).glob("*.parquet"))
            assert files and not any(_has_marker(f) for f in files), (table, files)
        ledger = str(state_to_json(BatchLedger(LocalStorage(str(checkpoint))).state))  # read beside the running job
        assert "second snapshot pass" in ledger, "big was not rebuilt"
        big = sorted((landing / f"{schema}.schema" / "big").glob("*.parquet"))
        assert big and all(_has_marker(f) for f in big)  # rebuilt through an incremental snapshot: marked
    finally:
        os.environ.pop("INCREMENTAL_SNAPSHOT_CHUNK_SIZE", None)
        if run is not None:  # SIGKILL, its whole group (Spark's JVM, its Python workers): a graceful stop takes ~4 s
            try:
                os.killpg(run.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            run.wait(timeout=120)
        down_and_delete(state_dir)
