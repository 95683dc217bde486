"""Writes connector/sample/*.jsonl, the embedded default source of ``run`` (kcat -J dumps).

Run from the repository root: ``python -m tests.support.sample_events``. The events follow real
Debezium Postgres output (JsonConverter, schemas enabled for customers, disabled for orders).
"""

from __future__ import annotations

from pathlib import Path

from connector.kcat import kcat_line
from tests.support.debezium import Topic, decimal_field, encode_decimal, field

OUT = Path(__file__).resolve().parents[2] / "connector" / "sample"


def customers_topic() -> Topic:
    return Topic(
        "inventory.public.customers",
        [
            field("id", "int32", optional=False),
            field("name", "string"),
            field("email", "string"),
            decimal_field("credit_limit", 12, 2),
            field("created_at", "string", "io.debezium.time.ZonedTimestamp"),
            field("birthday", "int32", "io.debezium.time.Date"),
        ],
        ["id"],
    )


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    c = customers_topic()

    def cust(i: int, name: str, limit: str) -> dict[str, object]:
        return {
            "id": i,
            "name": name,
            "email": f"{name.lower().replace(' ', '.')}@example.com",
            "credit_limit": encode_decimal(limit, 2),
            "created_at": f"2024-05-0{i % 9 + 1}T08:30:00.{i:06d}Z",
            "birthday": 7000 + i * 97,
        }

    records = [
        c.record("r", None, cust(i, n, lim))
        for i, n, lim in [
            (1, "Ada Lovelace", "1500.00"),
            (2, "Alan Turing", "-20.55"),
            (3, "Grace Hopper", "99999999.99"),
        ]
    ]
    records += [
        c.record("c", None, cust(4, "Edsger Dijkstra", "0.01")),
        c.record("u", None, cust(2, "Alan M. Turing", "250.00")),
        c.record("d", {"id": 3}, None),
        c.tombstone({"id": 3}),
        c.record("d", {"id": 4}, None, headers=(("__debezium.newkey", b'{"id":40}'),)),
        c.tombstone({"id": 4}),
        c.record("c", None, cust(40, "Edsger Dijkstra", "0.01"), headers=(("__debezium.oldkey", b'{"id":4}'),)),
    ]
    o = Topic("inventory.public.orders", [], ["order_id", "line"], with_schema=False)
    orders = [
        o.record("r", None, {"order_id": 10, "line": 1, "product": "keyboard", "quantity": 2, "note": None}),
        o.record("r", None, {"order_id": 10, "line": 2, "product": "mouse", "quantity": 1, "note": "gift"}),
        o.record("c", None, {"order_id": 11, "line": 1, "product": "monitor", "quantity": 1, "note": None}),
        o.record("u", None, {"order_id": 10, "line": 1, "product": "keyboard", "quantity": 3, "note": "rush"}),
        o.record("d", {"order_id": 10, "line": 2}, None),
        o.tombstone({"order_id": 10, "line": 2}),
    ]
    heartbeat = Topic("__debezium-heartbeat.inventory", [], [], with_schema=False).raw(b'{"ts_ms":1700000000000}')
    (OUT / "0001-customers.jsonl").write_bytes(b"".join(kcat_line(r) for r in records))
    (OUT / "0002-orders.jsonl").write_bytes(b"".join(kcat_line(r) for r in [*orders, heartbeat]))


if __name__ == "__main__":
    main()
