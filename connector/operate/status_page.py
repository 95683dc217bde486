"""The status page: ``/`` on the metrics port, rendered on the server from a ``StatusBoard`` snapshot.

No script at all and no external resource: one inline stylesheet, allowed by its hash in the
Content-Security-Policy (``CSP``), plots drawn as inline SVG, sorting and filtering done with links and a GET form
(query string: ``state``, ``q``, ``sort``, ``dir``, ``dlpage``). The page reloads itself only when the reader asks
(``refresh``: a link turns it on, ``?refresh=10``, and one turns it off): a reload the reader did not ask for throws a
keyboard or screen-reader user back to the top of the page (WCAG 2.2.1, axe-core's ``meta-refresh``). Every value is
HTML-escaped; the snapshot holds no secret (``StatusBoard.describe``).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Mapping, Sequence
from html import escape
from typing import Any
from urllib.parse import urlencode

from connector.operate.status_history import SERIES

#: Seconds between the page's own reloads once the reader turned them on (the link's ``?refresh=``).
REFRESH_S = 10
#: The shortest reload interval a ``?refresh=`` may ask for: a page rendered for every table must not be hammered.
REFRESH_MIN_S = 5
#: Dead letters per page.
DEAD_LETTERS_PER_PAGE = 20
#: The state filter's choices (the first word of a table's state).
STATES = ("all", "running", "stopped", "rebuilding", "refreshing")

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1rem 2rem;color:#1b1b1b;background:#fff}
h1{font-size:1.4rem;margin:.2rem 0}h2{font-size:1.1rem;margin:1.2rem 0 .4rem}
dl.job{display:grid;grid-template-columns:max-content auto;gap:.15rem 1rem;margin:0}dt{font-weight:600}dd{margin:0}
table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid #ccc;padding:.2rem .4rem;text-align:left;
vertical-align:top}th a{color:#00449e}tr.alert{background:#fde8e8}tr.alert td.state{color:#8a0000;font-weight:700}
tr.busy td.state{color:#7a4a00;font-weight:600}.num{text-align:right;font-variant-numeric:tabular-nums}
.plots{display:flex;flex-wrap:wrap;gap:1rem}figure{margin:0}figcaption{font-weight:600}
svg{border:1px solid #ccc;background:#fafafa}form{margin:.4rem 0}label{margin-right:.3rem}
a:focus,input:focus,select:focus,button:focus{outline:3px solid #ff9800;outline-offset:1px}
.bad{color:#8a0000;font-weight:700}.ok{color:#155724;font-weight:600}
"""
_STYLE_HASH = base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode()
#: The page's Content-Security-Policy: nothing but its own stylesheet and its own address.
CSP = (
    f"default-src 'none'; style-src 'sha256-{_STYLE_HASH}'; img-src 'self'; form-action 'self'; "
    "base-uri 'none'; frame-ancestors 'none'"
)
#: Headers of the HTML page (and, but for the type, of ``/status.json``).
HEADERS = [
    ("Content-Type", "text/html; charset=utf-8"),
    ("Content-Security-Policy", CSP),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"),
]

#: Sortable columns: (query key, header, the row's value to sort by).
_COLUMNS: tuple[tuple[str, str, Callable[[Mapping[str, Any]], Any]], ...] = (
    ("table", "Table", lambda r: r["table"]),
    ("state", "State", lambda r: (not r["stands_out"], r["state"])),
    ("last_file", "Last file", lambda r: r["last_file"]),
    ("last_batch", "Last file at", lambda r: r["last_batch"] or ""),
    ("rows", "Rows", lambda r: r["rows"]),
    ("freshness", "Freshness (s)", lambda r: r["freshness_s"] if r["freshness_s"] is not None else float("inf")),
    ("fabric", "Fabric", lambda r: r["fabric_state"] or ""),
    ("fabric_behind", "Fabric rows behind", lambda r: r["fabric_behind_rows"] or 0),
    ("rebuilds", "Rebuilds", lambda r: r["rebuilds"]),
    ("schema_changes", "Schema changes", lambda r: r["schema_changes"]),
    ("data_gaps", "Data gaps", lambda r: r["data_gaps"]),
    ("dead_letters", "Dead letters", lambda r: r["dead_letters"]),
)


def render_page(snapshot: Mapping[str, Any], query: Mapping[str, str]) -> str:
    """The whole page for ``snapshot`` (``StatusBoard.snapshot``) and the request's query string."""
    job = snapshot["job"]
    tables = snapshot["tables"]
    stopped = sum(1 for t in tables if t["kind"] == "stopped")
    title = f"Mirror status: {job.get('state', 'unknown')}, {len(tables)} tables, {stopped} stopped"
    refresh = _refresh_s(query)
    parts = [
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="refresh" content="{refresh}">' if refresh > 0 else "",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>",
        "<header><h1>Debezium → Fabric mirror</h1>",
        f"<p>Generated {escape(str(snapshot['generated_at']))}. "
        '<a href="/status.json">status.json</a> · <a href="/metrics">metrics</a></p>',
        _reload_nav(query, refresh),
        "</header><main>",
        _job_section(job),
        _tables_section(tables, query),
        _plots_section(snapshot["series"]),
        _dead_letters_section(snapshot["dead_letters"], query),
        "</main></body></html>",
    ]
    return "".join(parts)


def _refresh_s(query: Mapping[str, str]) -> int:
    """The reload interval the reader asked for (``?refresh=``), 0 (no reload) by default or when unreadable."""
    asked = _int(query.get("refresh"), 0)
    return max(asked, REFRESH_MIN_S) if asked > 0 else 0


def _reload_nav(query: Mapping[str, str], refresh: int) -> str:
    """The reader's control over reloads: a link that turns them on, or off, keeping the rest of the query."""
    if refresh > 0:
        state = f"Reloads every {refresh} s."
        link = f'<a href="{_link(query, refresh="")}" id="reload-toggle">Stop reloading</a>'
    else:
        state = "Does not reload by itself."
        here = _link(query)
        link = (
            f'<a href="{here}" id="reload-now">Reload now</a> · '
            f'<a href="{_link(query, refresh=str(REFRESH_S))}" id="reload-toggle">Reload every {REFRESH_S} s</a>'
        )
    return f'<nav aria-label="Page reload"><p>{state} {link}</p></nav>'


def _job_section(job: Mapping[str, Any]) -> str:
    source = job.get("source") or {}
    where = source.get("topics") or source.get("path") or "-"
    database = job.get("fabric_database")
    last = job.get("last_batch")
    state_class = "ok" if job.get("state") == "running" else "bad"
    items = [
        ("Job", f'<span class="{state_class}">{_e(job.get("state"))}</span>: {_e(job.get("reason"))}'),
        ("Source", f"{_e(source.get('kind'))} {_e(where)}" + _opt(" from ", source.get("bootstrap_servers"))),
        ("Landing zone", _e(job.get("landing_zone"))),
        ("Fabric database", "not read" if database is None else _e(database["state"]) + _opt(": ", database["error"])),
        ("Debezium", _debezium(job.get("debezium"), job.get("debezium_status_readable"))),
        ("Last batch", "none yet" if last is None else _last_batch(last)),
        ("Events/s", _e(job.get("events_per_s"))),
        ("Lag", f"{_e(job.get('lag_s'))} s; {_e(job.get('offsets_behind'))} Kafka offsets behind"),
        ("Dead letters", _e(job.get("dead_letter"))),
    ]
    rows = "".join(f"<dt>{name}</dt><dd>{value}</dd>" for name, value in items)
    return f'<section aria-labelledby="job-h"><h2 id="job-h">Job</h2><dl class="job">{rows}</dl></section>'


def _debezium(connectors: list[Mapping[str, Any]] | None, readable: bool | None) -> str:
    """Each connector as Kafka Connect reports it; a stopped one in red, with Connect's reason."""
    if connectors is None:
        return "not read" if readable is None else "Kafka Connect does not answer"
    parts = [
        f'{_e(c["connector"])}: <span class="ok">running</span>'
        if c["up"]
        else f'{_e(c["connector"])}: <span class="bad">{_e(c["problem"])}</span>'
        for c in connectors
    ]
    stale = "" if readable else " (last known: Kafka Connect does not answer)"
    return ("; ".join(parts) or "no connectors registered") + stale


def _last_batch(last: Mapping[str, Any]) -> str:
    return (
        f"{_e(last['at'])} ({_e(last['age_s'])} s ago): {_e(last['records'])} records, "
        f"{_e(last['files'])} files in {_e(last['duration_s'])} s"
    )


def _tables_section(tables: Sequence[Mapping[str, Any]], query: Mapping[str, str]) -> str:
    state = query.get("state", "all") if query.get("state") in STATES else "all"
    needle = query.get("q", "").strip()
    shown = [
        t
        for t in tables
        if (state == "all" or t["kind"] == state) and (not needle or needle.lower() in t["table"].lower())
    ]
    sort = query.get("sort", "state")
    descending = query.get("dir") == "desc"
    key = next((k for name, _, k in _COLUMNS if name == sort), _COLUMNS[1][2])
    shown = sorted(shown, key=key, reverse=descending)
    options = "".join(f'<option value="{s}"{" selected" if s == state else ""}>{s}</option>' for s in STATES)
    form = (
        '<form method="get" action="/" role="search" aria-label="Filter tables">'
        f'<label for="state">State</label><select id="state" name="state">{options}</select> '
        f'<label for="q">Table name contains</label><input id="q" name="q" type="search" value="{_e(needle)}"> '
        + (f'<input type="hidden" name="refresh" value="{_e(query["refresh"])}">' if "refresh" in query else "")
        + f'<input type="hidden" name="sort" value="{_e(sort)}"><input type="hidden" name="dir" '
        f'value="{"desc" if descending else "asc"}"><button type="submit">Filter</button></form>'
    )
    head = "".join(_header(name, label, query, sort, descending) for name, label, _ in _COLUMNS)
    body = "".join(_table_row(t) for t in shown) or f'<tr><td colspan="{len(_COLUMNS) + 1}">no table</td></tr>'
    return (
        '<section aria-labelledby="tables-h">'
        f'<h2 id="tables-h">Tables ({len(shown)} of {len(tables)} shown)</h2>{form}'
        f"<table><caption>One row per table; stopped and failing tables first by default</caption><thead><tr>{head}"
        f'<th scope="col">Reason / Fabric error</th></tr></thead><tbody>{body}</tbody></table></section>'
    )


def _header(name: str, label: str, query: Mapping[str, str], sort: str, descending: bool) -> str:
    current = name == sort
    direction = "asc" if not current or descending else "desc"
    href = _link(query, sort=name, dir=direction)
    aria = f' aria-sort="{"descending" if descending else "ascending"}"' if current else ""
    hint = f"Sort by {label}, {'descending' if direction == 'desc' else 'ascending'}"
    return f'<th scope="col"{aria}><a href="{href}" aria-label="{_e(hint)}">{_e(label)}</a></th>'


def _table_row(t: Mapping[str, Any]) -> str:
    css = "alert" if t["stands_out"] else ("busy" if t["kind"] in ("rebuilding", "refreshing") else "")
    state = _e(t["state"])
    if t["kind"] == "stopped":
        state = f"⚠ {state}"
    elif t["fabric_failed"]:
        state = f"{state} (Fabric failed)"
    if t.get("keyless"):
        state = f"{state} (no key: inserts only)"
    why = " ".join(_e(x) for x in (t["reason"], t["fabric_error"]) if x)
    cells = [
        f'<th scope="row">{_e(t["table"])}</th>',
        f'<td class="state" data-state="{_e(t["state"])}">{state}</td>',
        _num(t["last_file"]),
        f"<td>{_e(t['last_batch'] or '-')}</td>",
        _num(t["rows"]),
        _num(t["freshness_s"]),
        f"<td>{_e(t['fabric_state'] or '-')}</td>",
        _num(t["fabric_behind_rows"]),
        _num(t["rebuilds"]),
        _num(t["schema_changes"]),
        _num(t["data_gaps"]),
        _num(t["dead_letters"]),
        f'<td class="reason">{why}</td>',
    ]
    return f'<tr class="{css}" data-table="{_e(t["table"])}">{"".join(cells)}</tr>'


def _plots_section(series: Mapping[str, Sequence[Sequence[float]]]) -> str:
    figures = "".join(plot_svg(name, title, unit, series.get(name, [])) for name, title, unit in SERIES)
    head = '<section aria-labelledby="plots-h"><h2 id="plots-h">Last hour</h2>'
    return f'{head}<div class="plots">{figures}</div></section>'


def plot_svg(name: str, title: str, unit: str, points: Sequence[Sequence[float]], width: int = 300) -> str:
    """One small time plot as inline SVG: a polyline over the points, the newest value in the caption."""
    height, pad = 90, 4
    newest = f"{points[-1][1]:.3g} {unit}" if points else "no data yet"
    label = f"{title}: {len(points)} points over the last hour, newest {newest}"
    line = ""
    if points:
        points = _thin(points, width)
        t0, t1 = points[0][0], points[-1][0]
        top = max(p[1] for p in points) or 1.0
        span = (t1 - t0) or 1.0
        xy = " ".join(
            f"{pad + (p[0] - t0) / span * (width - 2 * pad):.1f},{height - pad - p[1] / top * (height - 2 * pad):.1f}"
            for p in points
        )
        line = f'<polyline fill="none" stroke="#00449e" stroke-width="1.5" points="{xy}"/>'
        line += f'<text x="{pad}" y="12" font-size="10" fill="#333">max {top:.3g} {_e(unit)}</text>'
    return (
        f'<figure><figcaption id="plot-{name}">{_e(title)}: {_e(newest)}</figcaption>'
        f'<svg role="img" aria-label="{_e(label)}" data-series="{name}" '
        f'data-points="{len(points)}" width="{width}" height="{height}" viewBox="0 0 {width} {height}">'
        f"<title>{_e(label)}</title>{line}</svg></figure>"
    )


def _thin(points: Sequence[Sequence[float]], width: int) -> Sequence[Sequence[float]]:
    """At most about two points per pixel column: each bucket's highest point (a peak must not vanish)."""
    step = len(points) // (2 * width) + 1
    if step == 1:
        return points
    return [max(points[i : i + step], key=lambda p: p[1]) for i in range(0, len(points), step)]


def _dead_letters_section(dead: Mapping[str, Any], query: Mapping[str, str]) -> str:
    items = dead.get("items") or []
    pages = max(1, -(-len(items) // DEAD_LETTERS_PER_PAGE))
    page = min(max(1, _int(query.get("dlpage"), 1)), pages)
    shown = items[(page - 1) * DEAD_LETTERS_PER_PAGE : page * DEAD_LETTERS_PER_PAGE]
    rows = "".join(
        f'<tr><th scope="row">{_e(d["topic"])}[{_e(d["partition"])}]@{_e(d["offset"])}</th>'
        f"<td>{_e(d['table'])}</td><td>{_e(d['reason'])}</td><td>{_e(d['time'] or '-')}</td></tr>"
        for d in shown
    )
    nav = ""
    if pages > 1:
        links = []
        if page > 1:
            links.append(f'<a href="{_link(query, dlpage=str(page - 1))}" rel="prev">Newer dead letters</a>')
        if page < pages:
            links.append(f'<a href="{_link(query, dlpage=str(page + 1))}" rel="next">Older dead letters</a>')
        nav = f'<nav aria-label="Dead-letter pages"><p>Page {page} of {pages} {" ".join(links)}</p></nav>'
    where = _e(dead.get("location") or "no dead-letter output (poison_policy stop)")
    return (
        '<section aria-labelledby="dl-h"><h2 id="dl-h">Dead letters</h2>'
        f"<p>{len(items)} in {where} ({_e(dead.get('counted_since_start'))} since this process started), "
        "newest first.</p>"
        '<table><caption>Poison records kept aside</caption><thead><tr><th scope="col">Record</th>'
        '<th scope="col">Table</th><th scope="col">Reason</th><th scope="col">Time</th></tr></thead>'
        f"<tbody>{rows or _NONE_ROW}</tbody></table>{nav}</section>"
    )


_NONE_ROW = '<tr><td colspan="4">none</td></tr>'


def _link(query: Mapping[str, str], **changes: str) -> str:
    merged = {k: v for k, v in {**query, **changes}.items() if v}
    return escape("/?" + urlencode(merged)) if merged else "/"


def _num(value: Any) -> str:
    text = "-" if value is None else str(value) if isinstance(value, int | float) else _e(value)
    return f'<td class="num">{text}</td>'


def _opt(prefix: str, value: Any) -> str:
    return f"{prefix}{_e(value)}" if value else ""


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def _e(value: Any) -> str:
    return escape("-" if value is None else str(value))
