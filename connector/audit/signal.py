"""Asks Debezium to read some keys of a table again: an incremental snapshot with ``additional-conditions``.

The continuous audit repairs a row the mirror lacks or holds wrongly by having Debezium read it again: the signal
``execute-snapshot`` of type ``incremental`` with ``additional-conditions``
``[{"data-collection": "<schema.table>", "filter": "<key> IN (...)"}]`` (Debezium 2.5 and later; the condition is
appended to the snapshot's SELECT), sent on the same Kafka signal channel as a rebuild's
(``connector.debezium_control.snapshot_signal``). The reads come back as upserts, after every change already in
the topic.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import uuid
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import orjson

from connector.config import RebuildSettings, SourceSettings
from connector.debezium_control.snapshot_signal import DELIVERY_TIMEOUT_S, signal_producer_config, signal_target
from connector.publish.rebuild import RebuildError

log = logging.getLogger(__name__)

MAX_KEYS_PER_SIGNAL = 500
"""Keys per signal: Debezium's filter is one SQL condition, kept to a reasonable length."""


def sql_literal(value: Any, *, mysql: bool = False) -> str:
    """A key value as a SQL literal (numbers bare, everything else a quoted string the column's type casts).

    ``mysql``: MySQL/MariaDB's spelling (bytes as ``X'…'``, a backslash escaped: it is an escape in their strings).
    """
    if value is None:
        msg = "a key value is NULL: it cannot be re-read by key"
        raise ValueError(msg)
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (int, Decimal)) or (isinstance(value, float) and value == value):
        return str(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        value = value.isoformat()
    if isinstance(value, bytes):
        return f"X'{value.hex()}'" if mysql else "'\\x" + value.hex() + "'"
    text = str(value).replace("\\", "\\\\") if mysql else str(value)
    return "'" + text.replace("'", "''") + "'"


def key_filter(key_columns: Sequence[str], keys: Sequence[tuple[Any, ...]], *, mysql: bool = False) -> str:
    """``"id" IN (1, 2)``, or ``("a", "b") IN (('x', 1), ...)`` for a composite key (MySQL/MariaDB: backticks)."""
    names = [f"`{name.replace('`', '``')}`" if mysql else f'"{name}"' for name in key_columns]
    if len(names) == 1:
        values = ", ".join(sql_literal(key[0], mysql=mysql) for key in keys)
        return f"{names[0]} IN ({values})"
    rows = ", ".join("(" + ", ".join(sql_literal(v, mysql=mysql) for v in key) + ")" for key in keys)
    return f"({', '.join(names)}) IN ({rows})"


def keyed_snapshot_value(collection: str, condition: str, signal_id: str) -> bytes:
    """The ``execute-snapshot`` signal for the rows of one data collection that ``condition`` selects."""
    pattern = re.escape(collection)
    return orjson.dumps(
        {
            "id": signal_id,
            "type": "execute-snapshot",
            "data": {
                "data-collections": [pattern],
                "type": "incremental",
                "additional-conditions": [{"data-collection": pattern, "filter": condition}],
            },
        }
    )


class KeyedSnapshotSignal:
    """Sends keyed re-read signals to Debezium's Kafka signal channel (the source's security settings apply).

    ``mysql``: the filter is in MySQL/MariaDB's SQL (Debezium appends it to its own SELECT on the source).
    """

    def __init__(self, source: SourceSettings, rebuild: RebuildSettings, *, mysql: bool = False) -> None:
        self._config = signal_producer_config(source, "the audit")
        self._rebuild = rebuild
        self._mysql = mysql

    def reread(self, topic: str, key_columns: Sequence[str], keys: Sequence[tuple[Any, ...]]) -> list[str]:
        """Ask Debezium to read ``keys`` of the table of ``topic`` again; the signals' ids."""
        from confluent_kafka import Producer

        signal_topic, signal_key, collection = signal_target(topic, self._rebuild)
        failures: list[str] = []
        ids = []
        producer = Producer(self._config)
        for start in range(0, len(keys), MAX_KEYS_PER_SIGNAL):
            signal_id = uuid.uuid4().hex
            condition = key_filter(key_columns, keys[start : start + MAX_KEYS_PER_SIGNAL], mysql=self._mysql)
            value = keyed_snapshot_value(collection, condition, signal_id)
            producer.produce(
                signal_topic,
                key=signal_key.encode(),
                value=value,
                on_delivery=lambda err, _msg: failures.append(err.str()) if err is not None else None,
            )
            ids.append(signal_id)
        undelivered = producer.flush(DELIVERY_TIMEOUT_S)
        if failures or undelivered:
            why = failures[0] if failures else f"not acknowledged within {DELIVERY_TIMEOUT_S:.0f} s"
            msg = f"signal topic {signal_topic}: {why}"
            raise RebuildError(msg)
        return ids
