"""The driver's periodic read of Fabric's own table status, published as ``cdc_mirror_fabric_*`` metrics.

Fabric applies our files on its own schedule and can fail a table without the connector noticing: the
landing zone accepts files either way. Reading Fabric's status every ``fabric_status.poll_s`` puts its view
next to ours in Prometheus. The poller is auxiliary: whatever goes wrong in it is logged and shown as
``cdc_mirror_fabric_status_readable 0``, never raised into the streaming job.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from connector.config import ConnectorSettings
from connector.operate import metrics
from connector.operate.fabric_status import FabricStatusReader, FabricTableStatus, open_fabric_status

log = logging.getLogger(__name__)


class FabricStatusPoller:
    """Every ``interval_s``, read ``reader.tables()`` and hand the result to ``record`` (the metrics)."""

    def __init__(
        self,
        reader: FabricStatusReader,
        interval_s: float,
        record: Callable[[Mapping[str, FabricTableStatus] | None], None] = metrics.record_fabric_status,
    ) -> None:
        self.reader = reader
        self._interval_s = interval_s
        self._record = record
        self._latest: dict[str, FabricTableStatus] | None = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fabric-status", daemon=True)

    @classmethod
    def open(cls, settings: ConnectorSettings) -> FabricStatusPoller | None:
        """A poller for ``settings.fabric_status`` (not started); ``None`` when its kind is ``none``.

        Raises:
            ConfigError: The section is incomplete (so the job fails at start-up, like any config error).
        """
        reader = open_fabric_status(settings)
        return None if reader is None else cls(reader, settings.fabric_status.poll_s)

    def start(self) -> FabricStatusPoller:
        """Run the polling in a daemon thread."""
        log.info("reading Fabric's table status from %s every %gs", self.reader.location, self._interval_s)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 15.0) -> None:
        """End the polling (at shutdown): waits for a read in flight at most ``timeout_s``."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self.reader.close()

    def latest(self) -> dict[str, FabricTableStatus] | None:
        """The last read's tables by table id; ``None`` before the first read and while unreadable."""
        return self._latest

    def poll_once(self) -> dict[str, FabricTableStatus] | None:
        """One read, recorded; never raises."""
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
        return tables

    def _loop(self) -> None:
        while not self._stopped.is_set():
            self.poll_once()
            if self._stopped.wait(self._interval_s):
                return
