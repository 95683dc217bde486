"""What the status page and ``/status.json`` show, gathered from what the running service holds.

The board is filled as the service runs: the job's description (``describe``, no secret), the sink's ledger
(``attach_tables``), Fabric's last status reads, the batch history (``connector.operate.status_history``) and the
dead-letter folder. ``snapshot`` turns it into one JSON-able dict; ``connector.operate.status_page`` renders that
dict as HTML. Per-table lines come from ``connector.operate.table_status.table_lines``, the function ``tables``
prints, so the page and the command agree.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import orjson

from connector.config import ConnectorSettings
from connector.deadletter.writer import DEFAULT_FOLDER
from connector.fabric.status_reader import FabricDatabaseStatus, FabricTableStatus
from connector.operate.debezium_status import DebeziumConnectorStatus
from connector.operate.status_history import StatusHistory
from connector.operate.table_status import TableLine, iso_time, table_lines
from connector.publish.ledger_state import LedgerState
from connector.secrets import redact_url
from connector.storage import LocalStorage, Storage
from connector.storage.location import is_remote

log = logging.getLogger(__name__)

#: The most dead letters read back for the page (newest first).
MAX_DEAD_LETTERS = 1000
#: Counter names the page shows per table (``counters`` of ``snapshot``).
TABLE_COUNTERS = ("schema_changes", "data_gaps", "dead_letters", "publish_errors")


class LedgerHolder(Protocol):
    """What the board reads of the sink: the ledger's committed state."""

    @property
    def state(self) -> LedgerState:
        """The committed state."""


class StatusBoard:
    """Everything the status page shows, updated by the service as it runs; ``snapshot`` reads it."""

    def __init__(self, history: StatusHistory | None = None) -> None:
        self.history = history or StatusHistory()
        self._lock = threading.Lock()
        self._job: dict[str, Any] = {}
        self._tables: LedgerHolder | None = None
        self._fabric_tables: Mapping[str, FabricTableStatus] | None = None
        self._fabric_readable: bool | None = None
        self._fabric_database: FabricDatabaseStatus | None = None
        self._debezium: dict[str, DebeziumConnectorStatus] | None = None
        self._debezium_readable: bool | None = None
        self._dead_letters: Storage | None = None
        self._letter_files: dict[tuple[str, int], list[dict[str, Any]]] = {}

    def describe(self, settings: ConnectorSettings) -> None:
        """The job as the page shows it: source and landing zone without credentials or query strings."""
        source = settings.source
        job: dict[str, Any] = {
            "source": {
                "kind": source.kind,
                "topics": source.topics if source.kind == "kafka" else None,
                "bootstrap_servers": source.bootstrap_servers,  # host:port list, no credentials
                "path": source.path if source.kind == "files" else None,
            },
            "landing_zone": redact_url(settings.landing_zone.url),
            "trigger": settings.trigger,
            "dead_letter": None,
        }
        dead = settings.dead_letter
        if dead.kind == "kafka":
            job["dead_letter"] = f"kafka topic {dead.topic}"
        else:
            url = dead.url or str(Path(settings.checkpoint) / DEFAULT_FOLDER)
            job["dead_letter"] = redact_url(url)
            if not is_remote(url):  # read back for the page; a remote folder is only named
                self._dead_letters = LocalStorage(url)
        with self._lock:
            self._job = job

    def attach_tables(self, tables: LedgerHolder) -> None:
        """Read the tables from ``tables`` (the sink) from now on."""
        self._tables = tables

    def fabric_tables(self, tables: Mapping[str, FabricTableStatus] | None) -> None:
        """One read of Fabric's table status; ``None`` when unreadable (the last known tables stay)."""
        with self._lock:
            self._fabric_readable = tables is not None
            if tables is not None:
                self._fabric_tables = dict(tables)

    def fabric_database(self, status: FabricDatabaseStatus | None) -> None:
        """One read of the mirrored database's status; ``None`` (unreadable) keeps the last one."""
        if status is not None:
            with self._lock:
                self._fabric_database = status

    def debezium(self, statuses: Mapping[str, DebeziumConnectorStatus] | None) -> None:
        """One read of the Debezium connectors' status; ``None`` when unreadable (the last known stay)."""
        with self._lock:
            self._debezium_readable = statuses is not None
            if statuses is not None:
                self._debezium = dict(statuses)

    def snapshot(
        self,
        health: tuple[bool, str],
        counters: Mapping[str, Mapping[str, float]],
        now: float | None = None,
    ) -> dict[str, Any]:
        """The whole status as one JSON-able dict (what ``/status.json`` returns and the page renders)."""
        now = time.time() if now is None else now
        with self._lock:
            job, fabric, readable = dict(self._job), self._fabric_tables, self._fabric_readable
            database = self._fabric_database
            debezium, debezium_readable = self._debezium, self._debezium_readable
        state = self._tables.state if self._tables is not None else None
        lines = table_lines(state, fabric) if state is not None else []
        series = self.history.series(now)
        rates = series["events_per_s"]
        return {
            "generated_at": iso_time(now),
            "job": {
                **self._job_part(job, health, database, readable, now, rates[-1][1] if rates else None),
                "debezium_status_readable": debezium_readable,
                "debezium": None if debezium is None else [_debezium_row(s) for _, s in sorted(debezium.items())],
            },
            "tables": [_table_row(line, state, fabric, counters, now) for line in lines],
            "series": {name: [list(point) for point in points] for name, points in series.items()},
            "dead_letters": self._dead_letter_part(job, counters),
        }

    def _job_part(
        self,
        job: dict[str, Any],
        health: tuple[bool, str],
        database: FabricDatabaseStatus | None,
        readable: bool | None,
        now: float,
        rate: float | None,
    ) -> dict[str, Any]:
        ready, reason = health
        last = self.history.last_batch()
        return {
            **job,
            "state": "running" if ready else "not ready",
            "reason": reason,
            "fabric_status_readable": readable,
            "fabric_database": None
            if database is None
            else {"state": database.state, "up": database.up, "error": database.error},
            "last_batch": None
            if last is None
            else {
                "at": iso_time(last.at),
                "age_s": round(max(0.0, now - last.at), 1),
                "records": last.records,
                "files": last.files,
                "duration_s": round(last.duration_s, 3),
            },
            "events_per_s": None if rate is None else round(rate, 1),
            "lag_s": None if last is None or last.lag_s is None else round(last.lag_s, 1),
            "offsets_behind": self.history.offsets_behind(),
        }

    def _dead_letter_part(self, job: Mapping[str, Any], counters: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
        counted = int(sum(counters.get("dead_letters", {}).values()))
        items = read_dead_letters(self._dead_letters, cache=self._letter_files) if self._dead_letters else []
        return {"location": job.get("dead_letter"), "counted_since_start": counted, "items": items}


def _debezium_row(status: DebeziumConnectorStatus) -> dict[str, Any]:
    return {
        "connector": status.name,
        "state": status.instance.state,
        "up": status.up,
        "failed": status.failed,
        "problem": status.problem(),
    }


def _table_row(
    line: TableLine,
    state: LedgerState | None,
    fabric: Mapping[str, FabricTableStatus] | None,
    counters: Mapping[str, Mapping[str, float]],
    now: float,
) -> dict[str, Any]:
    """A ``tables`` line plus what only the running service knows: counters, freshness, Fabric's error."""
    table = state.tables.get(line.table) if state is not None else None
    status = fabric.get(line.table) if fabric is not None else None
    published_at = table.last_published_at if table is not None else None
    row: dict[str, Any] = dict(line.__dict__)  # flat scalars: ``asdict``'s deep copy costs 1,000 tables dearly
    row.update(
        {
            "kind": line.state.split(":", 1)[0],
            "step": line.state.split(":", 1)[1] if ":" in line.state else None,
            "freshness_s": None if published_at is None else round(max(0.0, now - published_at), 1),
            "fabric_behind_rows": None
            if status is None or status.processed_rows is None
            else max(0, line.rows - status.processed_rows),
            "fabric_error": status.error if status is not None else None,
            "fabric_failed": bool(status is not None and status.failed),
            "rebuilds": table.lifecycle.automatic_rebuilds if table is not None else 0,
        }
    )
    for name in TABLE_COUNTERS:
        row[name] = int(counters.get(name, {}).get(line.table, 0))
    row["stands_out"] = row["kind"] == "stopped" or row["fabric_failed"] or row["publish_errors"] > 0
    return row


def read_dead_letters(
    storage: Storage,
    limit: int = MAX_DEAD_LETTERS,
    cache: dict[tuple[str, int], list[dict[str, Any]]] | None = None,
) -> list[dict[str, Any]]:
    """The newest ``limit`` dead letters of a folder output, newest first (their payloads left out).

    ``cache``: letters of files already read, by (path, size); a file rewritten by a replay changes size. The
    cache keeps only the files read this time.
    """
    try:
        files = [f for folder in storage.list_dir("") if folder.is_dir for f in storage.list_dir(folder.path)]
    except OSError as exc:
        log.warning("the dead-letter folder %s cannot be listed: %s", storage.url, exc)
        return []
    # ``<table>/<batch_id:020d>.jsonl``: the newest batches first.
    files.sort(key=lambda f: f.path.rsplit("/", 1)[-1], reverse=True)
    known = dict(cache) if cache is not None else {}
    used: dict[tuple[str, int], list[dict[str, Any]]] = {}
    letters: list[dict[str, Any]] = []
    for info in files:
        if len(letters) >= limit:
            break
        key = (info.path, info.size)
        used[key] = known[key] if key in known else _letters(storage, info.path)
        letters.extend(used[key])
    if cache is not None:
        cache.clear()
        cache.update(used)
    letters.sort(key=lambda e: (e["batch_id"], e["timestamp_ms"] or 0, e["offset"]), reverse=True)
    return letters[:limit]


def _letters(storage: Storage, path: str) -> list[dict[str, Any]]:
    try:
        lines = storage.read_bytes(path).splitlines()
    except (OSError, FileNotFoundError):
        return []
    out = []
    for line in lines:
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        out.append(
            {
                "topic": str(entry.get("topic")),
                "partition": int(entry.get("partition", -1)),
                "offset": int(entry.get("offset", -1)),
                "table": str(entry.get("table")),
                "reason": str(entry.get("error")),
                "timestamp_ms": entry.get("timestamp_ms"),
                "time": iso_time(entry["timestamp_ms"] / 1000) if entry.get("timestamp_ms") else None,
                "batch_id": int(entry.get("batch_id", -1)),
            }
        )
    return out


def health_of(status: Callable[[], tuple[bool, str]] | None) -> tuple[bool, str]:
    """The health check's answer, or not ready when there is none."""
    return status() if status is not None else (False, "no health state")
