"""The driver's periodic read of the Debezium connectors' status from Kafka Connect, as metrics and log lines.

A FAILED Debezium task (a purged binlog or GTID, a dropped replication slot, a converter error) sends
nothing more, so the mirror stops changing while every table looks fine. With
``source.debezium_connect_url`` set, ``run`` reads Connect's status every ``source.debezium_status_poll_s``:
``cdc_mirror_debezium_up`` / ``cdc_mirror_debezium_failed`` per connector (the ``CdcMirrorDebeziumTaskFailed``
and ``CdcMirrorDebeziumNotRunning`` alerts), a log line with Connect's reason when a connector stops and when
it runs again, and a line on the status page. Readiness is left alone: the connector itself works, and a
restart of its pod would not restart Debezium. The poller is auxiliary: Connect not answering is logged and
shown as ``cdc_mirror_debezium_status_readable 0``, never raised into the streaming job.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from connector.config import ConnectorSettings
from connector.operate import metrics
from connector.operate.debezium_status import UNREGISTERED, DebeziumConnectorStatus, read_debezium_status
from connector.operate.polling import PollingThread

log = logging.getLogger(__name__)

Statuses = Mapping[str, DebeziumConnectorStatus]


class DebeziumStatusPoller(PollingThread):
    """Every ``interval_s``, read the connectors' status and hand it to ``record`` (the metrics)."""

    def __init__(
        self,
        connect_url: str,
        connectors: list[str],
        interval_s: float,
        record: Callable[[Statuses | None], None] = metrics.record_debezium_status,
        read: Callable[[str, list[str]], dict[str, DebeziumConnectorStatus]] = read_debezium_status,
    ) -> None:
        super().__init__("debezium-status", interval_s)
        self.connect_url = connect_url
        self._connectors = connectors
        self._record = record
        self._read = read
        self._problems: dict[str, str | None] = {}
        self._unreadable = False

    @classmethod
    def open(cls, settings: ConnectorSettings) -> DebeziumStatusPoller | None:
        """A poller (not started) for ``source.debezium_connect_url``; ``None`` without it or with a 0 interval."""
        source = settings.source
        if not source.debezium_connect_url or not source.debezium_status_poll_s:
            return None
        return cls(source.debezium_connect_url, list(source.debezium_connectors), source.debezium_status_poll_s)

    def start(self) -> DebeziumStatusPoller:
        """Run the polling in a daemon thread."""
        which = ", ".join(self._connectors) or "every connector"
        log.info("reading the status of %s from Kafka Connect %s every %gs", which, self.connect_url, self._interval_s)
        self.start_polling()
        return self

    def poll_once(self) -> dict[str, DebeziumConnectorStatus] | None:
        """One read, logged where a connector's state changed and recorded; ``None`` when unreadable."""
        try:
            statuses: dict[str, DebeziumConnectorStatus] | None = self._read(self.connect_url, self._connectors)
        except Exception as exc:  # noqa: BLE001 - the job must outlive Connect and any reader bug
            if not self._unreadable:
                log.warning("Debezium connectors' status not read: %s", exc)
            statuses = None
        self._unreadable = statuses is None
        if statuses is not None:
            self._note_changes(statuses)
        try:
            self._record(statuses)
        except Exception as exc:  # noqa: BLE001 - metrics are not worth the job
            log.warning("Debezium status metrics not updated: %s: %s", type(exc).__name__, exc)
        return statuses

    def _note_changes(self, statuses: Statuses) -> None:
        """A line when a connector stops feeding the mirror (or why changes), an INFO line when it runs again."""
        for name, status in statuses.items():
            problem = status.problem()
            if name in self._problems and self._problems[name] == problem:
                continue
            if problem is not None:
                log.log(
                    logging.ERROR if status.stays_down else logging.WARNING,
                    "Debezium connector %s sends no changes: %s; the mirror stays where it is until it runs again%s",
                    name,
                    problem,
                    _remedy(status),
                )
            elif name in self._problems:
                log.info("Debezium connector %s runs again", name)
            self._problems[name] = problem
        for gone in set(self._problems) - set(statuses):
            del self._problems[gone]


def _remedy(status: DebeziumConnectorStatus) -> str:
    """What to ask Kafka Connect for, when the state says it."""
    url = f"/connectors/{status.name}"
    if status.failed:
        return f" (fix the cause, then restart it: POST {url}/restart?includeTasks=true&onlyFailed=true)"
    if status.instance.state == UNREGISTERED:
        return " (register it again, or correct source.debezium_connectors)"
    if status.instance.state in ("PAUSED", "STOPPED"):
        return f" (resume it: PUT {url}/resume)"
    return ""
