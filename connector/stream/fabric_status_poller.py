"""The driver's periodic read of Fabric's own status, published as ``cdc_mirror_fabric_*`` metrics.

Fabric applies our files on its own schedule and can fail a table, or stop the whole mirrored database,
without the connector noticing: the landing zone accepts files either way. Reading Fabric's status every
``fabric_status.poll_s`` puts its view next to ours in Prometheus, and a database that is not Running turns
``/readyz`` unready at the first read that sees it (and ready again at the first that sees it Running).
The poller is auxiliary: whatever goes wrong in it is logged and shown as
``cdc_mirror_fabric_status_readable 0``, never raised into the streaming job. Only at start does a definite
answer stop the job (``check_database_at_start``): a wrong id, a refused identity or a stopped database.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from connector.config import ConnectorSettings
from connector.errors import ConfigError
from connector.fabric.status import open_fabric_status
from connector.fabric.status_reader import (
    FabricDatabaseStatus,
    FabricStatusReader,
    FabricStatusUnreadable,
    FabricTableStatus,
)
from connector.operate import metrics
from connector.operate.health import HealthState
from connector.operate.polling import PollingThread

#: Answers that are a setting's fault, not an outage: they stop ``run`` at start.
_DEFINITE_REFUSALS = frozenset({400, 401, 403, 404})

log = logging.getLogger(__name__)


class FabricStatusPoller(PollingThread):
    """Every ``interval_s``, read ``reader.tables()`` and hand the result to ``record`` (the metrics)."""

    def __init__(
        self,
        reader: FabricStatusReader,
        interval_s: float,
        record: Callable[[Mapping[str, FabricTableStatus] | None], None] = metrics.record_fabric_status,
        health: HealthState | None = None,
        record_database: Callable[[FabricDatabaseStatus | None], None] = metrics.record_fabric_database,
    ) -> None:
        super().__init__("fabric-status", interval_s)
        self.reader = reader
        self._record = record
        self._health = health
        self._record_database = record_database
        self._database: FabricDatabaseStatus | None = None
        self._latest: dict[str, FabricTableStatus] | None = None

    @classmethod
    def open(cls, settings: ConnectorSettings, health: HealthState | None = None) -> FabricStatusPoller | None:
        """A poller for ``settings.fabric_status`` (not started); ``None`` when its kind is ``none``.

        With ``health`` (``run``), the database's status is checked once first (``check_database_at_start``).

        Raises:
            ConfigError: The section is incomplete, or the database is missing, refuses the identity or is
                not running (so the job fails at start-up, like any config error).
        """
        reader = open_fabric_status(settings)
        if reader is None:
            return None
        poller = cls(reader, settings.fabric_status.poll_s, health=health)
        if health is not None:
            try:
                poller.check_database_at_start()
            except ConfigError:
                reader.close()
                raise
        return poller

    def check_database_at_start(self) -> FabricDatabaseStatus | None:
        """Read the database's status once; refuse a definite problem, only warn about an outage.

        Returns:
            The status, or ``None`` when this source has none or the API could not answer now.

        Raises:
            ConfigError: The API answered that the ids are wrong or the identity is refused, or the database
                is not Running; the message names the setting and the fix.
        """
        try:
            status = self.reader.read_database()
        except FabricStatusUnreadable as exc:
            if exc.status in _DEFINITE_REFUSALS:
                msg = (
                    f"fabric_status: {self.reader.location} refused: {exc}; check fabric_status.workspace_id, "
                    "fabric_status.mirrored_database_id and the identity's role on the workspace "
                    "(python -m connector check-config --online FILE names the failing step)"
                )
                raise ConfigError(msg) from None
            log.warning("Fabric database status not checked at start: %s (the job starts anyway)", exc)
            return None
        if status is not None and not status.up:
            msg = (
                f"fabric_status: the mirrored database is {status.describe()}, so mirroring would not read "
                "the files: start it (python -m connector init --start, or Start mirroring in the Fabric portal)"
            )
            raise ConfigError(msg)
        self._note_database(status)
        return status

    def start(self) -> FabricStatusPoller:
        """Run the polling in a daemon thread."""
        log.info("reading Fabric's table status from %s every %gs", self.reader.location, self._interval_s)
        self.start_polling()
        return self

    def stop(self, timeout_s: float = 15.0) -> None:
        """End the polling (at shutdown), then close the reader unless a read is still in flight."""
        super().stop(timeout_s)
        if self.stopped:
            self.reader.close()

    def latest(self) -> dict[str, FabricTableStatus] | None:
        """The last read's tables by table id; ``None`` before the first read and while unreadable."""
        return self._latest

    def database(self) -> FabricDatabaseStatus | None:
        """The database's last known status (kept while unreadable); ``None`` before the first read."""
        return self._database

    def poll_once(self) -> dict[str, FabricTableStatus] | None:
        """One read of the tables and of the database, recorded; never raises."""
        try:
            tables = self.reader.tables()
        except Exception as exc:  # noqa: BLE001 - the job must outlive any reader bug
            log.warning("Fabric status %s: read failed: %s: %s", self.reader.location, type(exc).__name__, exc)
            tables = None
        self._latest = tables
        try:
            self._record(tables)
        except Exception as exc:  # noqa: BLE001 - same: metrics are not worth the job
            log.warning("Fabric status metrics not updated: %s: %s", type(exc).__name__, exc)
        try:
            self._note_database(self.reader.database())
        except Exception as exc:  # noqa: BLE001 - same
            log.warning("Fabric database status not updated: %s: %s", type(exc).__name__, exc)
        return tables

    def _note_database(self, status: FabricDatabaseStatus | None) -> None:
        """Metric and readiness from a read; an unreadable status (``None``) changes neither."""
        if status is None:
            return
        previous, self._database = self._database, status
        if previous is None or previous.up != status.up:
            level = logging.INFO if status.up else logging.ERROR
            log.log(level, "Fabric mirrored database is %s", status.describe())
        self._record_database(status)
        if self._health is not None:
            self._health.fabric_database(None if status.up else status.describe())
