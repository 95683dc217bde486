"""What a reader of Fabric's status reports, and how: per table, for the database, and never an exception.

The connector knows what it published; only Fabric knows whether it applied it. A reader (``status_rest``: the
Fabric REST API; ``status_monitoring``: the item's ``Files/Monitoring`` folder; ``status.open_fabric_status``
chooses) gives Fabric's view, one table per entry, for the ``cdc_mirror_fabric_*`` metrics, the ``tables``
command and table rebuilds. Reading is best effort: a status that cannot be read is ``None`` and one warning
naming the URL, never an exception, so neither the streaming job nor a command fails because Fabric's status does.

Both sources list tables as the REST API's ``TableMirroringStatusResponse`` (``status_rest`` quotes its shape):
``add_entries`` reads them, keeping whatever is absent as ``None``. Table ids are ours
(``connector.landing_zone.TableRef.id``): ``schema.table``, or ``table`` for an entry without a schema. A table
published without a schema folder may be listed by Fabric under the mirrored database's default schema
(``dbo``); this module does not guess, it reports what Fabric says.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from connector.errors import ConnectorError, first_line
from connector.landing_zone.layout import TableRef

# The name the readers logged under before they had modules of their own: log filters name it.
log = logging.getLogger("connector.fabric.status")

#: Table states that mean Fabric stopped applying the table's files (compared case-insensitively).
FAILED_STATES = frozenset({"failed", "error"})

#: Returns a bearer token for the REST API; raises ``FabricStatusUnreadable`` when there is none.
TokenSource = Callable[[], str]


@dataclass(frozen=True)
class FabricTableStatus:
    """One table as Fabric reports it.

    Attributes:
        table: Our table id: ``schema.table``, or ``table`` without a schema.
        state: Fabric's state as reported (``Replicating``, ``Failed``, …; ``Unknown`` when absent).
        processed_rows: Rows Fabric has applied (``metrics.processedRows``), when reported.
        processed_bytes: Bytes Fabric has applied (``metrics.processedBytes``), when reported.
        last_sync: When Fabric last applied changes (``metrics.lastSyncDateTime``, ISO 8601 UTC), when reported.
        error: Fabric's error for the table (``errorCode: message``), when it reports one.
    """

    table: str
    state: str
    processed_rows: int | None
    processed_bytes: int | None
    last_sync: str | None
    error: str | None

    @property
    def failed(self) -> bool:
        """Whether Fabric stopped applying this table's files (state Failed or Error)."""
        return self.state.lower() in FAILED_STATES


@dataclass(frozen=True)
class FabricDatabaseStatus:
    """The mirrored database as a whole, from ``getMirroringStatus``.

    Attributes:
        state: ``Running``, ``Stopped``, ``Paused``, … as reported (``Unknown`` when absent).
        error: Fabric's error for the database (``errorCode: message``), when it reports one.
    """

    state: str
    error: str | None

    @property
    def up(self) -> bool:
        """Whether mirroring reads the landing zone now: ``Running`` and no error."""
        return self.state.lower() == "running" and self.error is None

    def describe(self) -> str:
        """``Stopped`` or ``Running (error: Code: message)``, for log lines and ``/readyz``."""
        return self.state + (f" (error: {self.error})" if self.error else "")


class FabricStatusUnreadable(ConnectorError):
    """Why one read of the status failed; ``FabricStatusReader.tables`` turns it into a warning.

    ``status`` is the HTTP status when the API answered (a 404 or 403 is a wrong id or a missing role,
    not an outage).
    """

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message, status)
        self.status = status

    def __str__(self) -> str:
        return str(self.args[0])


class FabricStatusReader(ABC):
    """Reads Fabric's per-table status; ``tables()`` never raises for an unreadable status.

    Attributes:
        location: Where the status is read (a URL or path), safe to log.
    """

    location: str

    def __init__(self) -> None:
        self._problem: str | None = None
        self._database_problem: str | None = None

    def tables(self) -> dict[str, FabricTableStatus] | None:
        """Fabric's tables by table id, or ``None`` when the status cannot be read now.

        An unreadable status logs one warning (no traceback) naming the location and the reason; a reader
        polled repeatedly warns again only when the reason changes, and says when the status is readable again.
        """
        try:
            tables = self._read()
        except FabricStatusUnreadable as exc:
            problem = str(exc)
            if problem != self._problem:
                log.warning("Fabric status %s cannot be read: %s", self.location, problem)
            else:
                log.debug("Fabric status %s still cannot be read: %s", self.location, problem)
            self._problem = problem
            return None
        if self._problem is not None:
            log.info("Fabric status %s is readable again (%d tables)", self.location, len(tables))
            self._problem = None
        return tables

    def database(self) -> FabricDatabaseStatus | None:
        """The database's own status, or ``None`` when it cannot be read now (or this source has none).

        Warns like ``tables()``: once per distinct reason, and once when readable again.
        """
        try:
            status = self.read_database()
        except FabricStatusUnreadable as exc:
            problem = str(exc)
            if problem != self._database_problem:
                log.warning("Fabric database status %s cannot be read: %s", self.location, problem)
            self._database_problem = problem
            return None
        if self._database_problem is not None and status is not None:
            log.info("Fabric database status %s is readable again: %s", self.location, status.describe())
            self._database_problem = None
        return status

    def read_database(self) -> FabricDatabaseStatus | None:
        """Read the database's status once; ``None`` when this source does not report it.

        Raises:
            FabricStatusUnreadable: with a one-line reason (and the HTTP status, when there was an answer).
        """
        return None

    @abstractmethod
    def _read(self) -> dict[str, FabricTableStatus]:
        """Read the whole status once.

        Raises:
            FabricStatusUnreadable: with a one-line reason that holds no secret.
        """

    def close(self) -> None:  # noqa: B027 - optional hook: most readers hold no connection
        """Release connections (the default has none)."""


def add_entries(tables: dict[str, FabricTableStatus], entries: list[Any]) -> None:
    """Add each entry that names a table to ``tables`` (a later page's entry replaces an earlier one's)."""
    skipped = 0
    for raw in entries:
        entry = _entry(raw)
        if entry is None:
            skipped += 1
        else:
            tables[entry.table] = entry
    if skipped:
        log.debug("Fabric status: %d entries without a table name were skipped", skipped)


def _entry(raw: Any) -> FabricTableStatus | None:
    """One ``TableMirroringStatusResponse`` (or ``tables.json`` entry); ``None`` when it names no table."""
    if not isinstance(raw, dict):
        return None
    name = raw.get("sourceTableName")
    if not isinstance(name, str) or not name:
        return None
    schema = raw.get("sourceSchemaName")
    status = raw.get("status")
    metrics = raw.get("metrics")
    metrics = metrics if isinstance(metrics, dict) else {}
    last_sync = metrics.get("lastSyncDateTime")
    return FabricTableStatus(
        table=TableRef(schema if isinstance(schema, str) and schema else None, name).id,
        state=status if isinstance(status, str) and status else "Unknown",
        processed_rows=_count(metrics.get("processedRows")),
        processed_bytes=_count(metrics.get("processedBytes")),
        last_sync=last_sync if isinstance(last_sync, str) and last_sync else None,
        error=error_text(raw.get("error")),
    )


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)


def error_text(error: Any) -> str | None:
    """``errorCode: message`` of an ``ErrorResponse`` (a plain string is kept as it is)."""
    if isinstance(error, str):
        return error or None
    if not isinstance(error, dict):
        return None
    code, message = error.get("errorCode"), error.get("message")
    parts = [str(p) for p in (code, message) if p]
    return ": ".join(parts) if parts else None


def json_object(raw: bytes, what: str) -> dict[str, Any]:
    """``raw`` as a JSON object; anything else is unreadable, ``what`` (``the answer``, ``the file``) named."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        msg = f"{what} is not JSON: {first_line(raw[:200].decode('utf-8', 'replace'))!r}"
        raise FabricStatusUnreadable(msg) from None
    if not isinstance(body, dict):
        msg = f"{what} is a JSON {type(body).__name__}, not an object"
        raise FabricStatusUnreadable(msg)
    return body
