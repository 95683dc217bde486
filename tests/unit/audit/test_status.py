"""Each table's last audit, kept in the checkpoint and shown by ``tables`` (``audit=``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from connector.audit.status import AUDIT_STATUS_FILE, TableAuditStatus, read_audit_status, write_audit_status
from connector.commands.tables import tables_command
from connector.config import MirrorSettings
from connector.sink import MirrorSink
from connector.storage.local import LocalStorage
from tests.support.debezium import Topic, field

AT = 1_767_323_045.0  # 2026-01-02T03:04:05Z
COLUMNS = [field("id", "int32", optional=False), field("name", "string")]


def test_the_last_clean_time_outlives_a_round_that_found_differences(tmp_path: Path) -> None:
    checkpoint = LocalStorage(tmp_path)
    write_audit_status(checkpoint, "public.items", TableAuditStatus(AT, 10, 0, "none", AT))
    write_audit_status(checkpoint, "public.items", TableAuditStatus(AT + 60, 10, 3, "rows"))
    status = read_audit_status(checkpoint)["public.items"]
    assert status.last_clean_at == AT and status.differences == 3
    assert status.text() == "2026-01-02T03:05:05Z:3 differences -> rows"


def test_an_unreadable_status_reads_as_none(tmp_path: Path) -> None:
    checkpoint = LocalStorage(tmp_path)
    checkpoint.replace(AUDIT_STATUS_FILE, b"{not json")
    assert read_audit_status(checkpoint) == {}


def test_tables_shows_each_tables_last_audit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = LocalStorage(tmp_path / "cp")
    sink = MirrorSink(LocalStorage(tmp_path / "lz"), checkpoint, MirrorSettings())
    items, orders = Topic("dbserver1.public.items", COLUMNS, ["id"]), Topic("dbserver1.public.orders", COLUMNS, ["id"])
    sink.process_batch(0, [items.record("c", None, {"id": 1, "name": "a"}), orders.record("c", None, {"id": 2})])
    write_audit_status(checkpoint, "public.items", TableAuditStatus(AT, 2, 0, "none", AT))
    capsys.readouterr()
    assert tables_command(checkpoint, as_json=False) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "audit=2026-01-02T03:04:05Z:clean" in lines["public.items"]
    assert "audit=" not in lines["public.orders"]  # never audited
