"""What ``verify`` needs from a source database (``SourceReader``), and what its readers share.

One reader per kind of database (``database_postgres``, ``database_mysql``): each knows how to list the tables
of a schema (``verify`` judges the mirrored schemas whole, so a table without a folder is found), and how
to read a mirrored table's rows from its database and compare them with the table Delta gives back, in the
forms its types need, and its columns with the mirror's. ``verify`` runs one loop over the tables with
whichever reader the URL names.

Each reader names its database driver (``driver``), a package of the ``verify`` extra
(``connector.readback.extra``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from typing import Any, Protocol

import pyarrow as pa

from connector.landing_zone.layout import TableRef
from connector.readback.table_report import TableReport

Row = dict[str, Any]


class SourceReader(Protocol):
    """A source database, read one mirrored table at a time; used as a context manager (connects, closes)."""

    driver: str
    """The module of its database driver (a package of the ``verify`` extra)."""

    def __enter__(self) -> SourceReader:
        """Connect.

        Raises:
            ConnectorError: the database cannot be reached (named without a password).
        """

    def __exit__(self, *exc: object) -> None:
        """Close the connection."""

    def tables(self, schemas: Collection[str | None]) -> list[str]:
        """The ids of the source's tables in ``schemas``, as the landing zone names them (``schema.table``).

        A schema is a Postgres schema or a MySQL/MariaDB database; ``None`` stands for the one a table without
        a schema is read from (``TableRef`` without a schema), and its tables are listed by name alone. Only
        tables that hold rows Debezium captures are listed (no views, no temporary tables).

        Raises:
            ConnectorError: ``None`` is asked for and the source names no database for it.
        """

    def check(self, table: TableRef) -> None:
        """Make sure the source has ``table``, before its mirror is built.

        Raises:
            ConnectorError: the source has no table for it.
        """

    def compare(self, table: TableRef, key_columns: list[str], mirror: pa.Table) -> TableReport:
        """Read ``table``'s rows from the source and compare them with ``mirror`` (what Delta holds).

        The column sets are compared too (``TableReport.judge_columns``): the rows are compared on the
        source's columns only, so a column the source lost would otherwise go unseen.
        """


def show(value: Any) -> str:
    """A value as an example line shows it: its repr, cut when long."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}...({len(text)} chars)"


def time_micros(value: Any) -> Any:
    """Signed microseconds of a time: ``timedelta`` (a MySQL ``TIME``), ``time`` or ``[-]H:MM:SS[.f]`` text."""
    if isinstance(value, dt.timedelta):
        return (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    if isinstance(value, dt.time):
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
    if isinstance(value, str):
        return _time_text_micros(value)
    return value


def _time_text_micros(text: str) -> Any:
    body = text.strip()
    sign = -1 if body.startswith("-") else 1
    body = body.lstrip("+-")
    whole, _, fraction = body.partition(".")
    pieces = whole.split(":")
    if len(pieces) != 3 or not all(p.isdigit() for p in pieces) or (fraction and not fraction.isdigit()):
        return text
    hours, minutes, seconds = (int(p) for p in pieces)
    micros = int((fraction + "000000")[:6]) if fraction else 0
    if len(fraction) > 6 and int(fraction[6:]):
        return text  # finer than a microsecond: no MySQL TIME holds it, keep it visibly different
    return sign * (((hours * 60 + minutes) * 60 + seconds) * 1_000_000 + micros)
