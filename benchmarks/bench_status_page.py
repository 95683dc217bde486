"""``python -m benchmarks.bench_status_page``: the status page with 1,000 tables, rendered as the service does.

A ledger of ``--tables`` tables (a tenth stopped, a tenth rebuilding, Fabric's status for each), an hour of batch
history at one batch a second and 1,000 dead letters in a dead-letter folder; then ``--repeat`` times the same work
as one ``GET /`` (``StatusBoard.snapshot`` + ``render_page``) and ``GET /status.json``. Prints the median and the
worst render time with the CPU model. The target: under 200 ms for 1,000 tables. Not a timed test: a figure.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

from benchmarks.cpu import cpu_model
from connector.collect.poison import DeadLetter
from connector.config import load_settings
from connector.deadletter.folder import FolderDeadLetterWriter
from connector.fabric.status_reader import FabricDatabaseStatus, FabricTableStatus
from connector.operate.status_history import BatchSample, StatusHistory
from connector.operate.status_model import StatusBoard
from connector.operate.status_page import render_page
from connector.publish.ledger_state import LedgerState, TableState
from connector.publish.lifecycle import Lifecycle, Phase
from connector.storage import LocalStorage

TARGET_MS = 200.0


@dataclass
class Ledger:
    state: LedgerState


def build_board(tables: int, folder: Path) -> tuple[StatusBoard, dict[str, dict[str, float]]]:
    now = time.time()
    states = {}
    for i in range(tables):
        phase = Phase.STOPPED if i % 10 == 3 else Phase.WAITING if i % 10 == 7 else Phase.RUNNING
        life = Lifecycle(phase, reason=None if phase is Phase.RUNNING else "truncate (truncate_policy fail)", since=now)
        states[f"schema{i % 7}.table_{i:04d}"] = TableState(
            f"t{i}", next_number=i + 2, rows_published=i * 100, last_published_at=now - i, lifecycle=life
        )
    config = folder / "c.yaml"
    config.write_text(f"landing_zone:\n  url: {folder / 'lz'}\ncheckpoint: {folder / 'cp'}\n")
    board = StatusBoard(StatusHistory(max_samples=4000))
    board.describe(load_settings(str(config)))
    board.attach_tables(Ledger(LedgerState(tables=states)))
    board.fabric_tables(
        {t: FabricTableStatus(t, "Replicating", 1, None, None, None) for t in list(states)[: tables // 2]}
    )
    board.fabric_database(FabricDatabaseStatus("Running", None))
    for s in range(3600):
        board.history.add_batch(BatchSample(now - 3600 + s, 500, 0.4, 3, 1.5))
        board.history.add_offsets_behind(s % 50, at=now - 3600 + s)
    writer = FolderDeadLetterWriter(LocalStorage(folder / "cp" / "_deadletter"))
    names = list(states)
    for batch in range(100):
        letters = [DeadLetter("db.t", 0, batch * 10 + i, None, b"{", (), names[i], "bad JSON", None) for i in range(10)]
        writer.write(batch, letters)
    counters = {"dead_letters": dict.fromkeys(names[:10], 1.0), "schema_changes": {names[0]: 2.0}}
    return board, counters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the dead-letter writer's line per file
    with tempfile.TemporaryDirectory() as tmp:
        board, counters = build_board(args.tables, Path(tmp))
        page_ms, json_ms, size = [], [], 0
        for _ in range(args.repeat):
            start = time.perf_counter()
            html = render_page(board.snapshot((True, "running"), counters), {})
            page_ms.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            orjson.dumps(board.snapshot((True, "running"), counters))
            json_ms.append((time.perf_counter() - start) * 1000)
            size = len(html)
    cold, warm = page_ms[0], page_ms[1:] or page_ms
    verdict = "under" if max(warm) < TARGET_MS else "OVER"
    print(f"cpu: {cpu_model()}")
    print(
        f"status page, {args.tables} tables, 3600 batch samples, 1000 dead letters ({size / 1024:.0f} KiB of HTML): "
        f"median {statistics.median(warm):.1f} ms, worst {max(warm):.1f} ms ({verdict} the {TARGET_MS:.0f} ms "
        f"target); the first render, which reads the 1000 dead-letter files, {cold:.1f} ms; "
        f"/status.json median {statistics.median(json_ms):.1f} ms"
    )


if __name__ == "__main__":
    main()
