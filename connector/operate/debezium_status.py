"""The Debezium connectors' run state as Kafka Connect reports it (``GET /connectors?expand=status``).

A Debezium task that fails (a purged binlog or GTID, a lost replication slot, a converter error) stays
FAILED until someone restarts it. Kafka keeps its topics, so the mirror stays exactly as it was and every
table still looks healthy: nothing reaches the connector to say the source stopped. Reading Connect's own
status is the only way to see it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from connector.errors import ConnectorError
from connector.operate.connect_rest import get_json

RUNNING = "RUNNING"
FAILED = "FAILED"
#: The state given to a configured connector Kafka Connect does not list (deleted, or never registered).
UNREGISTERED = "UNREGISTERED"
_TRACE_CHARS = 600


@dataclass(frozen=True)
class WorkUnit:
    """The connector's own instance (``task`` None) or one of its tasks, as Connect reports it."""

    task: int | None
    state: str
    worker: str
    trace: str  # Connect's trace in one line (``reason``); "" when none

    @property
    def name(self) -> str:
        """How Connect's own UI names it: ``connector`` or ``task N``."""
        return "connector" if self.task is None else f"task {self.task}"

    def describe(self) -> str:
        """``task 0 FAILED on host:8083: the exception``: one line for a log or the status page."""
        where = f" on {self.worker}" if self.worker else ""
        why = f": {self.trace}" if self.trace else ""
        return f"{self.name} {self.state}{where}{why}"


@dataclass(frozen=True)
class DebeziumConnectorStatus:
    """One connector: its instance and its tasks."""

    name: str
    instance: WorkUnit
    tasks: tuple[WorkUnit, ...]

    @property
    def failed(self) -> int:
        """How many of the instance and its tasks are FAILED."""
        return sum(unit.state == FAILED for unit in (self.instance, *self.tasks))

    @property
    def up(self) -> bool:
        """The instance and every task RUNNING, and at least one task: changes flow."""
        return self.instance.state == RUNNING and bool(self.tasks) and all(t.state == RUNNING for t in self.tasks)

    @property
    def stays_down(self) -> bool:
        """FAILED or not registered: stays so until someone acts (paused or unassigned may be an act or a rebalance)."""
        return self.failed > 0 or self.instance.state == UNREGISTERED

    def problem(self) -> str | None:
        """Why changes do not flow, one line; None when ``up``."""
        if self.up:
            return None
        if self.instance.state == UNREGISTERED:
            return "not registered on Kafka Connect"
        if self.instance.state == RUNNING and not self.tasks:
            return "RUNNING without a task"
        units = [u for u in (self.instance, *self.tasks) if u.state != RUNNING]
        return "; ".join(unit.describe() for unit in units)


def read_debezium_status(connect_url: str, names: Sequence[str] = ()) -> dict[str, DebeziumConnectorStatus]:
    """The status of connectors ``names`` (empty: every registered one), one request for all.

    A named connector Connect does not list is reported ``UNREGISTERED``, not dropped: it feeds nothing.

    Raises:
        ConnectorError: Connect does not answer, answers with an error or with something else than statuses.
    """
    url = f"{connect_url.rstrip('/')}/connectors?expand=status"
    return statuses_from_answer(get_json(url, connect_url), names, url)


def statuses_from_answer(answer: Any, names: Sequence[str], url: str) -> dict[str, DebeziumConnectorStatus]:
    """``read_debezium_status`` once Connect answered ``url`` with ``answer``."""
    if not isinstance(answer, dict):
        msg = f"{url}: unexpected answer from Kafka Connect (not an object of connectors)"
        raise ConnectorError(msg)
    statuses = {str(name): parse_status(str(name), entry, url) for name, entry in answer.items()}
    if not names:
        return statuses
    missing = WorkUnit(None, UNREGISTERED, "", "")
    return {name: statuses.get(name) or DebeziumConnectorStatus(name, missing, ()) for name in names}


def parse_status(name: str, entry: Any, url: str) -> DebeziumConnectorStatus:
    """One connector's entry of the expanded listing: ``{"status": {"connector": {...}, "tasks": [...]}}``."""
    status = entry.get("status") if isinstance(entry, Mapping) else None
    instance = status.get("connector") if isinstance(status, Mapping) else None
    tasks = status.get("tasks") if isinstance(status, Mapping) else None
    if not isinstance(instance, Mapping) or not isinstance(tasks, list):
        msg = f"{url}: unexpected status of connector {name!r} (no connector state or task list)"
        raise ConnectorError(msg)
    units = sorted((_unit(task, int(task.get("id", -1))) for task in tasks if isinstance(task, Mapping)), key=_order)
    return DebeziumConnectorStatus(name, _unit(instance, None), tuple(units))


def _unit(raw: Mapping[str, Any], task: int | None) -> WorkUnit:
    state, worker = str(raw.get("state", "UNKNOWN")), str(raw.get("worker_id", ""))
    return WorkUnit(task, state, worker, reason(str(raw.get("trace") or "")))


def reason(trace: str) -> str:
    """A Java trace in one line: its exception, and the root cause when there is one (Debezium wraps them)."""
    lines = [line.strip() for line in trace.strip().splitlines()]
    if not lines:
        return ""
    causes = [line.removeprefix("Caused by: ") for line in lines if line.startswith("Caused by: ")]
    text = lines[0] if not causes else f"{lines[0]}; caused by {causes[-1]}"
    return text[:_TRACE_CHARS]


def _order(unit: WorkUnit) -> int:
    return -1 if unit.task is None else unit.task
