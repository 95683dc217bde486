"""A deterministic workload of Debezium change events with the source state it must produce.

Two tables: ``customers`` (JsonConverter with schemas, decimals and timestamps) and ``orders``
(schemaless, composite key). Every operation is turned into the records real Debezium emits for it
(including the delete/tombstone/create triple of a primary-key update), and applied to ``state``,
which is what a replayed landing zone must equal.
"""

from __future__ import annotations

import datetime as dt
import decimal
import random
from typing import Any

from connector.events import KafkaRecord
from tests.support.debezium import Topic, decimal_field, encode_decimal, field

CUSTOMER_COLUMNS = [
    field("id", "int32", optional=False),
    field("name", "string"),
    decimal_field("balance", 12, 2),
    field("updated", "int64", "io.debezium.time.MicroTimestamp"),
    field("birthday", "int32", "io.debezium.time.Date"),
]


class Workload:
    """Generates operations on two tables and keeps the expected source state."""

    def __init__(self, prefix: str, partitions: int = 3, seed: int = 7) -> None:
        self.rng = random.Random(seed)
        self.partitions = partitions
        self.customers = Topic(f"{prefix}.public.customers", CUSTOMER_COLUMNS, ["id"])
        self.orders = Topic(f"{prefix}.sales.orders", [], ["order_id", "line"], with_schema=False)
        self.state: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {"public.customers": {}, "sales.orders": {}}
        self.next_id = 1
        self.clock = 1_700_000_000_000_000

    # -- rows ------------------------------------------------------------------------------------------------

    def _customer(self, cid: int) -> tuple[dict[str, Any], dict[str, Any]]:
        self.clock += self.rng.randint(1, 10_000_000)
        balance = decimal.Decimal(self.rng.randint(-10_000_000, 10_000_000)).scaleb(-2)
        days = self.rng.randint(-3000, 20000)
        wire = {
            "id": cid,
            "name": f"customer-{cid}-{self.rng.randint(0, 999)}",
            "balance": encode_decimal(str(balance), 2),
            "updated": self.clock,
            "birthday": days,
        }
        typed = {
            "id": cid,
            "name": wire["name"],
            "balance": balance,
            "updated": dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=self.clock),
            "birthday": dt.date(1970, 1, 1) + dt.timedelta(days=days),
        }
        return wire, typed

    def _partition(self, key: Any) -> int:
        # Orders are partitioned by line only, so an order line moved to another order (a key change
        # inside one 'u') stays in its partition: Kafka orders records within a partition only.
        if isinstance(key, tuple):
            return int(key[1]) % self.partitions
        return int(key) % self.partitions

    # -- operations ------------------------------------------------------------------------------------------

    def step(self) -> list[KafkaRecord]:
        """One random operation → its Debezium records."""
        customers = self.state["public.customers"]
        orders = self.state["sales.orders"]
        roll = self.rng.random()
        if roll < 0.35 or not customers:
            cid = self.next_id
            self.next_id += 1
            wire, typed = self._customer(cid)
            customers[(cid,)] = typed
            return [self.customers.record("c", None, wire, partition=self._partition(cid))]
        if roll < 0.55:
            cid = self.rng.choice(sorted(customers))[0]
            wire, typed = self._customer(cid)
            customers[(cid,)] = typed
            return [self.customers.record("u", None, wire, partition=self._partition(cid))]
        if roll < 0.62:
            cid = self.rng.choice(sorted(customers))[0]
            del customers[(cid,)]
            p = self._partition(cid)
            return [
                self.customers.record("d", {"id": cid}, None, partition=p),
                self._tombstone(self.customers, {"id": cid}, p),
            ]
        if roll < 0.68:
            old = self.rng.choice(sorted(customers))[0]
            new = self.next_id
            self.next_id += 1
            row = customers.pop((old,))
            wire, typed = self._customer(new)
            customers[(new,)] = typed
            return [
                self.customers.record(
                    "d",
                    {"id": old},
                    None,
                    partition=self._partition(old),
                    headers=(("__debezium.newkey", f'{{"id":{new}}}'.encode()),),
                ),
                self._tombstone(self.customers, {"id": old}, self._partition(old)),
                self.customers.record(
                    "c",
                    None,
                    wire,
                    partition=self._partition(new),
                    headers=(("__debezium.oldkey", f'{{"id":{old}}}'.encode()),),
                ),
            ]
        if roll < 0.88 or not orders:
            key = (self.rng.randint(1, 200), self.rng.randint(1, 3))
            row = {
                "order_id": key[0],
                "line": key[1],
                "product": self.rng.choice(["pen", "ink", "pad"]),
                "qty": self.rng.randint(1, 9),
            }
            op = "u" if key in orders else "c"
            orders[key] = row
            return [self.orders.record(op, None, row, partition=self._partition(key))]
        if roll < 0.94:
            key = self.rng.choice(sorted(orders))
            del orders[key]
            return [self.orders.record("d", {"order_id": key[0], "line": key[1]}, None, partition=self._partition(key))]
        # An update that moves an order line to another order: a key change inside one 'u' (MySQL style).
        key = self.rng.choice(sorted(orders))
        new_key = (key[0] + 1000, key[1])
        if new_key in orders:
            return []
        before = orders.pop(key)
        after = {**before, "order_id": new_key[0]}
        orders[new_key] = after
        return [self.orders.record("u", before, after, partition=self._partition(key))]

    def _tombstone(self, topic: Topic, key: dict[str, Any], partition: int) -> KafkaRecord:
        record = topic.tombstone(key)
        return KafkaRecord(record.topic, partition, record.offset, record.key, record.value, record.headers)

    def records(self, operations: int) -> list[KafkaRecord]:
        """Records of ``operations`` random operations, in the order the source committed them."""
        out: list[KafkaRecord] = []
        for _ in range(operations):
            out.extend(self.step())
        return out

    def expected(self) -> dict[str, list[dict[str, Any]]]:
        """Expected table contents, rows sorted by key."""
        return {table: [rows[k] for k in sorted(rows)] for table, rows in self.state.items()}


def replayed_rows(tables: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Replay output (Arrow tables) as rows sorted by key, comparable with ``Workload.expected``."""
    keys = {"public.customers": ("id",), "public.clients": ("id",), "sales.orders": ("order_id", "line")}
    out = {}
    for name, table in tables.items():
        key = keys.get(name, ())
        out[name] = sorted(table.to_pylist(), key=lambda r: tuple(r[c] for c in key))
    return out
