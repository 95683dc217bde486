"""The status page and /status.json: what they show, that they agree with ``tables``, and what they never do."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from connector.collect.poison import DeadLetter
from connector.config import load_settings
from connector.deadletter.folder import FolderDeadLetterWriter
from connector.fabric.status_reader import FabricDatabaseStatus, FabricTableStatus
from connector.operate import metrics_server, status_page
from connector.operate.health import HealthState
from connector.operate.status_history import BatchSample, StatusHistory
from connector.operate.status_model import StatusBoard, read_dead_letters
from connector.operate.table_status import table_lines
from connector.publish.ledger_state import LedgerState, TableState
from connector.publish.lifecycle import Lifecycle, Phase
from connector.storage import LocalStorage

NOW = 1_800_000_000.0


@dataclass
class Ledger:
    state: LedgerState = field(default_factory=LedgerState)


def ledger_state() -> LedgerState:
    return LedgerState(
        tables={
            "public.orders": TableState("orders", next_number=8, rows_published=70, last_published_at=NOW - 5),
            "public.gone": TableState(
                "gone", lifecycle=Lifecycle(Phase.STOPPED, reason="truncate under truncate_policy fail", since=NOW)
            ),
            "public.<script>x": TableState("x", lifecycle=Lifecycle(Phase.DELETING, reason="operator", since=NOW)),
        }
    )


def board(tmp_path: Path) -> StatusBoard:
    config = tmp_path / "c.yaml"
    config.write_text(
        "source:\n  bootstrap_servers: k:9092\n  topics: db\\..*\n  kafka_options:\n    sasl.password: hunter2secret\n"
        f"landing_zone:\n  url: {tmp_path / 'lz'}\ncheckpoint: {tmp_path / 'cp'}\n"
    )
    result = StatusBoard(StatusHistory())
    result.describe(load_settings(str(config)))
    result.attach_tables(Ledger(ledger_state()))
    for i in range(5):
        result.history.add_batch(BatchSample(NOW - 50 + i * 10, 100 * i, 0.5, i, 2.0))
    result.history.add_offsets_behind(42, at=NOW)
    result.fabric_tables(
        {"public.orders": FabricTableStatus("public.orders", "Failed", 60, None, None, "E1: column mismatch")}
    )
    result.fabric_database(FabricDatabaseStatus("Running", None))
    return result


def test_the_page_shows_what_tables_prints_and_marks_stopped_and_failing_tables(tmp_path: Path) -> None:
    snap = board(tmp_path).snapshot((True, "running"), {"dead_letters": {"public.orders": 2}}, now=NOW)
    printed = {line.table: line.state for line in table_lines(ledger_state(), None)}
    assert {t["table"]: t["state"] for t in snap["tables"]} == printed
    rows = {t["table"]: t for t in snap["tables"]}
    assert rows["public.gone"]["stands_out"] and rows["public.gone"]["reason"] == "truncate under truncate_policy fail"
    assert rows["public.orders"]["fabric_failed"] and rows["public.orders"]["fabric_behind_rows"] == 10
    assert rows["public.orders"]["freshness_s"] == 5.0 and rows["public.orders"]["dead_letters"] == 2
    assert rows["public.<script>x"]["step"] == "deleting"
    page = status_page.render_page(snap, {})
    assert "⚠ stopped" in page and "E1: column mismatch" in page and "rebuilding:deleting" in page
    assert "<script" not in page  # the table name is escaped, and the page has no script of its own
    assert "&lt;script&gt;x" in page
    assert "hunter2secret" not in page and "hunter2secret" not in json.dumps(snap)
    assert snap["job"]["offsets_behind"] == 42 and snap["job"]["fabric_database"]["up"]


def test_filters_sorting_and_dead_letter_paging_are_links(tmp_path: Path) -> None:
    snap = board(tmp_path).snapshot((True, "running"), {}, now=NOW)
    stopped_only = status_page.render_page(snap, {"state": "stopped"})
    assert re.findall(r'data-table="([^"]+)"', stopped_only) == ["public.gone"]
    by_rows = status_page.render_page(snap, {"sort": "rows", "dir": "desc"})
    assert re.findall(r'data-table="([^"]+)"', by_rows)[0] == "public.orders"
    assert 'aria-sort="descending"' in by_rows
    letters = [
        {"topic": "t", "partition": 0, "offset": i, "table": "a", "reason": "bad", "time": None, "batch_id": 1}
        for i in range(45)
    ]
    page2 = status_page.render_page({**snap, "dead_letters": {"items": letters, "location": "x"}}, {"dlpage": "2"})
    assert "Page 2 of 3" in page2 and "t[0]@20" in page2 and "t[0]@19" not in page2
    assert 'href="/?dlpage=1"' in page2 and 'href="/?dlpage=3"' in page2


def test_the_plots_have_a_point_per_batch() -> None:
    history = StatusHistory(window_s=100)
    for i in range(4):
        history.add_batch(BatchSample(NOW + i, 10, 0.2, 1, None))
    assert len(history.series(NOW + 3)["events_per_s"]) == 3  # a rate needs the batch before
    history.add_batch(BatchSample(NOW + 500, 10, 0.2, 1, None))  # the older ones leave the window
    assert len(history.series(NOW + 500)["files"]) == 1
    svg = status_page.plot_svg("files", "Files per batch", "files", [[NOW, 1.0], [NOW + 1, 3.0]])
    assert 'data-points="2"' in svg and "<polyline" in svg and 'role="img"' in svg


def test_csp_allows_exactly_the_inline_stylesheet() -> None:
    page = status_page.render_page({"generated_at": "x", "job": {}, "tables": [], "series": {}, "dead_letters": {}}, {})
    style = re.search(r"<style>(.*?)</style>", page, re.S)
    assert style is not None
    digest = base64.b64encode(hashlib.sha256(style.group(1).encode()).digest()).decode()
    assert f"'sha256-{digest}'" in status_page.CSP and "default-src 'none'" in status_page.CSP
    assert not re.search(r"\b(src|href)=\"(https?:)?//", page)  # nothing from elsewhere
    assert ' style="' not in page and "<script" not in page
    paused = status_page.render_page(
        {"generated_at": "x", "job": {}, "tables": [], "series": {}, "dead_letters": {}}, {"refresh": "0"}
    )
    assert 'http-equiv="refresh"' not in paused and 'href="/?"' not in paused


EMPTY = {"generated_at": "x", "job": {}, "tables": [], "series": {}, "dead_letters": {}}


def test_the_page_reloads_only_when_the_reader_asks() -> None:
    """No reload by default (it throws keyboard and screen-reader users to the top); a link turns it on, one off."""
    page = status_page.render_page(EMPTY, {})
    assert "http-equiv" not in page
    assert '<nav aria-label="Page reload">' in page and "Does not reload by itself." in page
    assert '<a href="/?refresh=10" id="reload-toggle">Reload every 10 s</a>' in page
    assert '<a href="/" id="reload-now">Reload now</a>' in page
    reloading = status_page.render_page(EMPTY, {"refresh": "10", "state": "stopped"})
    assert '<meta http-equiv="refresh" content="10">' in reloading and "Reloads every 10 s." in reloading
    assert '<a href="/?state=stopped" id="reload-toggle">Stop reloading</a>' in reloading
    assert '<input type="hidden" name="refresh" value="10">' in reloading  # filtering keeps the reader's choice
    turned_on = status_page.render_page(EMPTY, {"state": "stopped", "sort": "rows"})
    assert 'href="/?state=stopped&amp;sort=rows&amp;refresh=10"' in turned_on
    assert '<meta http-equiv="refresh" content="5">' in status_page.render_page(EMPTY, {"refresh": "1"})
    for off in ("0", "-3", "soon", ""):
        assert "http-equiv" not in status_page.render_page(EMPTY, {"refresh": off}), off


def test_dead_letters_read_back_newest_first(tmp_path: Path) -> None:
    writer = FolderDeadLetterWriter(LocalStorage(tmp_path))
    writer.write(3, [DeadLetter("t", 0, 7, None, b"{", (), "public.a", "bad json", 1_700_000_000_000)])
    writer.write(9, [DeadLetter("t", 1, 2, None, b"{", (), "public.b", "worse", None)])
    letters = read_dead_letters(LocalStorage(tmp_path))
    assert [(d["table"], d["offset"], d["reason"]) for d in letters] == [
        ("public.b", 2, "worse"),
        ("public.a", 7, "bad json"),
    ]
    assert letters[1]["time"] == "2023-11-14T22:13:20Z"


def test_the_server_routes_the_page_and_json_and_can_turn_them_off() -> None:
    health = HealthState()
    health.set(True, "running")
    server = metrics_server.serve(0, health, host="127.0.0.1")
    off = metrics_server.serve(0, health, host="127.0.0.1", page=False)
    try:
        base = f"http://127.0.0.1:{server.server_port}"
        with urllib.request.urlopen(base + "/") as response:
            assert response.headers["Content-Security-Policy"] == status_page.CSP
            assert b"<h1>" in response.read()
        with urllib.request.urlopen(base + "/status.json") as response:
            assert json.loads(response.read())["job"]["state"] == "running"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(base + "/", data=b"x", method="POST"))
        assert refused.value.code == 405
        with urllib.request.urlopen(f"http://127.0.0.1:{off.server_port}/") as response:
            assert b"cdc_mirror_build_info" in response.read()  # without the page, / is the metrics as before
    finally:
        server.shutdown()
        off.shutdown()


def test_an_idle_browser_connection_does_not_hold_up_probes() -> None:
    """Browsers open connections ahead of use; a one-thread server would wait on them and miss probes."""
    health = HealthState()
    server = metrics_server.serve(0, health, host="127.0.0.1")
    try:
        with socket.create_connection(("127.0.0.1", server.server_port)):  # opened, nothing sent
            with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/healthz", timeout=10) as response:
                assert response.read() == b"ok\n"
    finally:
        server.shutdown()


def test_a_table_without_a_key_says_so(tmp_path: Path) -> None:
    result = board(tmp_path)
    state = ledger_state()
    state.tables["public.events"] = TableState("events", next_number=3, rows_published=9, keyless=True)
    result.attach_tables(Ledger(state))
    snap = result.snapshot((True, "running"), {}, now=NOW)
    rows = {t["table"]: t for t in snap["tables"]}
    assert rows["public.events"]["keyless"] and not rows["public.orders"]["keyless"]
    page = status_page.render_page(snap, {})
    events_row = re.search(r'<tr[^>]*data-table="public.events">.*?</tr>', page, re.S)
    orders_row = re.search(r'<tr[^>]*data-table="public.orders">.*?</tr>', page, re.S)
    assert events_row is not None and "(no key: inserts only)" in events_row.group(0)
    assert orders_row is not None and "no key" not in orders_row.group(0)
