"""``tables`` and the status page say which tables have no key (mirrored without keyColumns, inserts only)."""

from __future__ import annotations

from connector.operate.table_status import table_lines
from connector.publish.ledger_state import LedgerState, TableState


def test_a_keyless_table_is_shown_without_a_key() -> None:
    state = LedgerState(
        tables={
            "public.logs": TableState(folder="public.schema/logs", keyless=True, next_number=3, rows_published=9),
            "public.orders": TableState(folder="public.schema/orders", key_columns=("id",), next_number=2),
        }
    )
    logs, orders = table_lines(state)
    assert logs.keyless and "key=none" in logs.text()
    assert not orders.keyless and "key=" not in orders.text()
    assert logs.__dict__["keyless"] is True  # the status page's row and ``tables --json`` carry it
