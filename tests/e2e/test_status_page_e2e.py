"""The status page in a real browser against a real ``run`` on the shared Postgres stack.

One ``run`` over three tables of the test's own: ``sp_keep`` (streams, and gets a poison record that goes to the
dead-letter folder), ``sp_trunc`` (a TRUNCATE under ``truncate_policy: fail`` stops it) and ``sp_rebuild`` (rebuilt
with ``python -m connector rebuild``). Headless Chromium (Debian's ``chromium`` and ``chromium-driver``, installed
by ``deploy/local/setup-tests.sh``) driven by Selenium checks that the page shows every table with the state
``tables`` prints, the stopped table's reason, the rebuild's step and its return to running, plotted points and
the dead letter; that the browser requested nothing outside the service (its performance log) and that neither the
page nor ``/status.json`` holds the config's secret. The accessibility check is ours, with Selenium: ``lang``,
one ``h1``, every form control labelled, every link and image named, every header cell scoped, and the Tab key
reaching the filters and the sort links; then axe-core (from the npm registry, cached by ``setup-tests.sh`` in
``.cache/axe-core``) runs in the page as served by default, which must show no serious or critical violation, and the
page reloads itself only once the reader turned that on with its link. The screenshot of the page as served is
saved where ``STATUS_PAGE_SCREENSHOT`` names (the docs' ``docs/status-page.png``:
``STATUS_PAGE_SCREENSHOT=docs/status-page.png``), else beside the test's other files, so a run of the suite leaves
the checkout as it found it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import Producer

from tests.support.kafka import REPO_ROOT, run_connector

pytestmark = pytest.mark.e2e

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.select import Select  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402

TABLES = ("sp_keep", "sp_trunc", "sp_rebuild")
WAIT_S = 180.0
SECRET = f"sp-secret-{uuid.uuid4().hex}"
SCREENSHOT_VARIABLE = "STATUS_PAGE_SCREENSHOT"
AXE = REPO_ROOT / ".cache" / "axe-core" / "axe.min.js"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - our own local service
        return json.loads(response.read())


def get_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - our own local service
        return str(response.read().decode())


def wait_until(what: str, check: Callable[[], Any], process: subprocess.Popen[bytes], log: Path) -> Any:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the connector exited waiting for {what}:\n{log.read_text()[-4000:]}"
        try:
            found = check()
        except OSError:
            found = None
        if found:
            return found
        time.sleep(0.5)
    pytest.fail(f"no {what} within {WAIT_S}s\n{log.read_text()[-4000:]}")


def table_state(base: str, table: str) -> dict[str, Any] | None:
    return next((t for t in get_json(f"{base}/status.json")["tables"] if t["table"] == table), None)


@pytest.fixture
def browser() -> Iterator[Any]:
    chromium = shutil.which("chromium")
    driver_path = shutil.which("chromedriver")
    # Installed by deploy/local/setup-tests.sh: a missing browser fails the test, it never passes by skipping.
    assert chromium is not None and driver_path is not None, "chromium or chromedriver missing: run setup-tests.sh"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1100"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver_path))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def running(shared_stack: dict[str, str], tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The three tables created and filled, and ``run`` on them with the status page on a free port."""
    with psycopg.connect(shared_stack["postgres"], autocommit=True) as conn:
        for table in TABLES:
            conn.execute(f"DROP TABLE IF EXISTS public.{table}")
            conn.execute(f"CREATE TABLE public.{table} (id int PRIMARY KEY, note text)")
            conn.execute(f"INSERT INTO public.{table} SELECT g, 'row ' || g FROM generate_series(1, 30) g")
    prefix = shared_stack["topic_prefix"]
    config = tmp_path / "config.yaml"
    config.write_text(
        "mirror:\n"
        "  truncate_policy: fail\n"
        "  poison_policy: dead-letter\n"
        "  on_table_stopped: stay\n"
        "  rebuild:\n"
        "    wait_s: 4\n"
        "dead_letter:\n"
        "  kind: folder\n"
        "source:\n"
        "  kafka_options:\n"
        # A secret the page must never show: librdkafka and the Kafka client ignore it over PLAINTEXT.
        f"    ssl.key.password: {SECRET}\n"
    )
    log = tmp_path / "connector.log"
    command = [sys.executable, "-m", "connector", "run", "--config", str(config)]
    command += ["--bootstrap-servers", shared_stack["bootstrap.servers"]]
    command += ["--topics", re.escape(prefix) + r"\.public\.sp_(keep|trunc|rebuild)"]
    command += ["--landing-zone", str(tmp_path / "lz"), "--checkpoint", str(tmp_path / "cp")]
    command += ["--trigger", "1s"]
    process, port = start_run(command, log)
    try:
        yield {"base": f"http://127.0.0.1:{port}", "process": process, "log": log, "tmp": tmp_path, "prefix": prefix}
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)
        with psycopg.connect(shared_stack["postgres"], autocommit=True) as conn:
            for table in TABLES:
                conn.execute(f"DROP TABLE IF EXISTS public.{table}")


def start_run(command: list[str], log: Path, attempts: int = 3) -> tuple[subprocess.Popen[bytes], int]:
    """``run`` on a free port; again on another when a concurrent process took the port first."""
    for _ in range(attempts):
        port = free_port()
        with log.open("a") as out:
            process = subprocess.Popen(
                [*command, "--metrics-port", str(port)], cwd=REPO_ROOT, stdout=out, stderr=out, env=dict(os.environ)
            )
        deadline = time.monotonic() + WAIT_S
        while process.poll() is None and time.monotonic() < deadline:
            try:
                get_text(f"http://127.0.0.1:{port}/healthz")
                return process, port
            except OSError:
                time.sleep(0.5)
        if process.poll() is None or "already in use" not in log.read_text():
            break
    if process.poll() is None:
        process.kill()
        process.wait(timeout=30)
    pytest.fail(f"run did not serve its metrics port:\n{log.read_text()[-4000:]}")


def tables_command(checkpoint: Path) -> dict[str, str]:
    """What ``tables --json`` prints: state by table."""
    done = run_connector("tables", "--checkpoint", str(checkpoint), "--json")
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {line["table"]: line["state"] for line in lines if "table" in line}


def page_states(driver: Any) -> dict[str, str]:
    rows = driver.find_elements(By.CSS_SELECTOR, "tr[data-table]")
    return {
        row.get_attribute("data-table"): row.find_element(By.CSS_SELECTOR, "td.state").get_attribute("data-state")
        for row in rows
    }


def test_status_page_in_a_browser(shared_stack: dict[str, str], running: dict[str, Any], browser: Any) -> None:
    base, ids = running["base"], [f"public.{t}" for t in TABLES]
    wait_for(running, "every table on the page", lambda: {t["table"] for t in status(base)["tables"]} >= set(ids))
    stopped = stop_one_and_dead_letter_one(shared_stack, running)
    rebuild_one(running, browser)
    check_tables_plots_and_dead_letters(running, browser, stopped)
    check_accessibility(browser)
    check_axe(browser, base)
    check_reload_only_when_asked(browser, base)
    # Filter and sort through the page's own controls (a GET form, links): still the service's own address.
    Select(browser.find_element(By.ID, "state")).select_by_value("stopped")
    browser.find_element(By.CSS_SELECTOR, 'form[role="search"] button').click()
    WebDriverWait(browser, 30).until(lambda d: "state=stopped" in d.current_url)
    assert set(page_states(browser)) == {"public.sp_trunc"}
    browser.get(base + "/?refresh=0")
    browser.find_element(By.CSS_SELECTOR, 'th a[href*="sort=table"]').click()
    WebDriverWait(browser, 30).until(lambda d: "sort=table" in d.current_url)
    assert list(page_states(browser)) == sorted(ids)
    check_no_request_outside(browser, base)
    for text in (get_text(base + "/"), get_text(base + "/status.json"), browser.page_source):
        assert SECRET not in text
    save_screenshot(browser, base, running["tmp"] / "status-page.png")


def status(base: str) -> dict[str, Any]:
    return get_json(f"{base}/status.json")


def wait_for(running: dict[str, Any], what: str, check: Callable[[], Any]) -> Any:
    return wait_until(what, check, running["process"], running["log"])


def stop_one_and_dead_letter_one(shared_stack: dict[str, str], running: dict[str, Any]) -> dict[str, Any]:
    """A poison record on sp_keep's topic (dead-lettered, its table goes on) and a TRUNCATE that stops sp_trunc."""
    base = running["base"]
    producer = Producer({"bootstrap.servers": shared_stack["bootstrap.servers"]})
    producer.produce(f"{running['prefix']}.public.sp_keep", key=b'{"id":999}', value=b'{"op":"c","after":')
    assert producer.flush(30) == 0
    with psycopg.connect(shared_stack["postgres"], autocommit=True) as conn:
        conn.execute("TRUNCATE public.sp_trunc")
        conn.execute("UPDATE public.sp_keep SET note = 'after' WHERE id <= 5")
    stopped = wait_for(
        running,
        "sp_trunc stopped",
        lambda: (t := table_state(base, "public.sp_trunc")) and t["kind"] == "stopped" and t,
    )
    wait_for(running, "the dead letter", lambda: status(base)["dead_letters"]["items"])
    return dict(stopped)


def rebuild_one(running: dict[str, Any], browser: Any) -> None:
    """``rebuild`` of sp_rebuild: the page shows its step, then the table runs again."""
    base = running["base"]
    requested = run_connector("rebuild", "public.sp_rebuild", "--checkpoint", str(running["tmp"] / "cp"))
    assert requested.returncode == 0, requested.stdout + requested.stderr
    step = wait_for(
        running,
        "sp_rebuild rebuilding",
        lambda: (t := table_state(base, "public.sp_rebuild")) and t["kind"] == "rebuilding" and t,
    )
    browser.get(base + "/?state=rebuilding&refresh=0")
    shown = page_states(browser)
    assert shown.get("public.sp_rebuild", "").startswith("rebuilding:"), (shown, step)
    assert step["step"] in {"deleting", "waiting-for-fabric"}
    wait_for(running, "sp_rebuild running again", lambda: table_state(base, "public.sp_rebuild")["kind"] == "running")


def check_tables_plots_and_dead_letters(running: dict[str, Any], browser: Any, stopped: dict[str, Any]) -> None:
    """Every table with the state ``tables`` prints (nothing moves now), the stopped one marked, plots, the letter."""
    base = running["base"]
    browser.get(base + "/")  # as served: it does not reload while the checks below hold its elements
    assert page_states(browser) == tables_command(running["tmp"] / "cp")
    row = browser.find_element(By.CSS_SELECTOR, 'tr[data-table="public.sp_trunc"]')
    assert "alert" in (row.get_attribute("class") or "")
    assert "⚠" in row.find_element(By.CSS_SELECTOR, "td.state").text
    assert stopped["reason"] and stopped["reason"] in row.find_element(By.CSS_SELECTOR, "td.reason").text
    for series in ("events_per_s", "batch_duration_s", "files"):
        svg = browser.find_element(By.CSS_SELECTOR, f'svg[data-series="{series}"]')
        assert int(svg.get_attribute("data-points") or 0) >= 1, series
    assert browser.find_elements(By.CSS_SELECTOR, 'svg[data-series="events_per_s"] polyline')
    dead = browser.find_element(By.CSS_SELECTOR, 'section[aria-labelledby="dl-h"] tbody').text
    assert f"{running['prefix']}.public.sp_keep[0]@" in dead and "public.sp_keep" in dead


def save_screenshot(browser: Any, base: str, default: Path) -> None:
    """The whole page, not the window: headless Chromium keeps the window within its virtual screen."""
    wanted = os.environ.get(SCREENSHOT_VARIABLE)
    path = REPO_ROOT / wanted if wanted else default
    browser.get(base + "/")
    height = int(browser.execute_script("return document.documentElement.scrollHeight"))
    metrics = {"width": 1400, "height": min(height, 2400), "deviceScaleFactor": 1, "mobile": False}
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    path.parent.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(path))


def check_no_request_outside(driver: Any, base: str) -> None:
    """Every request in the browser's performance log went to the service."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    assert urls, "the performance log holds no request"
    outside = [u for u in urls if not u.startswith(base + "/")]
    assert not outside, outside


def check_axe(driver: Any, base: str) -> None:
    """axe-core's WCAG rules on the page as served by default: no serious or critical violation.

    Injected through WebDriver, which the page's Content-Security-Policy (no script at all) does not govern.
    """
    assert AXE.is_file(), f"{AXE} missing: run deploy/local/setup-tests.sh"
    driver.get(base + "/")
    driver.execute_script(AXE.read_text(encoding="utf-8"))
    driver.set_script_timeout(120)
    result = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document, {resultTypes: ['violations']})"
        ".then(r => done({version: axe.version, violations: r.violations, rules: r.passes.length}))"
        ".catch(e => done({error: String(e)}));"
    )
    assert "error" not in result, result
    grave = [
        (v["id"], v["impact"], v["help"], [n["html"][:160] for n in v["nodes"][:3]])
        for v in result["violations"]
        if v["impact"] in ("serious", "critical")
    ]
    assert not grave, f"axe-core {result['version']}: {grave}"
    milder = [(v["id"], v["impact"]) for v in result["violations"]]
    print(f"axe-core {result['version']}: no serious or critical violation; others: {milder or 'none'}")


def check_reload_only_when_asked(driver: Any, base: str) -> None:
    """Served without a reload; the reader's link turns it on (a meta refresh), the other link turns it off."""
    driver.get(base + "/?state=running")
    assert not driver.find_elements(By.CSS_SELECTOR, 'meta[http-equiv="refresh"]')
    nav = driver.find_element(By.CSS_SELECTOR, 'nav[aria-label="Page reload"]')
    assert "Does not reload by itself" in nav.text
    toggle = driver.find_element(By.ID, "reload-toggle")
    assert toggle.accessible_name == "Reload every 10 s"
    toggle.click()
    WebDriverWait(driver, 30).until(lambda d: "refresh=10" in d.current_url)
    meta = driver.find_element(By.CSS_SELECTOR, 'meta[http-equiv="refresh"]')
    assert meta.get_attribute("content") == "10" and "state=running" in driver.current_url
    driver.find_element(By.ID, "reload-toggle").click()  # "Stop reloading"
    WebDriverWait(driver, 30).until(lambda d: "refresh" not in d.current_url)
    assert not driver.find_elements(By.CSS_SELECTOR, 'meta[http-equiv="refresh"]')
    assert "state=running" in driver.current_url


def check_accessibility(driver: Any) -> None:
    """Our checks: lang, one h1, labelled controls, named links and images, scoped headers, Tab reaches controls."""
    assert driver.find_element(By.TAG_NAME, "html").get_attribute("lang") == "en"
    assert len(driver.find_elements(By.TAG_NAME, "h1")) == 1
    for control in driver.find_elements(By.CSS_SELECTOR, "input:not([type=hidden]), select, button"):
        name = control.accessible_name
        assert name and name.strip(), control.get_attribute("outerHTML")
    for link in driver.find_elements(By.TAG_NAME, "a"):
        assert (link.accessible_name or "").strip(), link.get_attribute("outerHTML")
    for image in driver.find_elements(By.CSS_SELECTOR, "svg, img, [role=img]"):
        assert (image.accessible_name or "").strip(), image.get_attribute("outerHTML")[:200]
    for header in driver.find_elements(By.TAG_NAME, "th"):
        assert header.get_attribute("scope") in ("col", "row"), header.get_attribute("outerHTML")
    reached = set()
    body = driver.find_element(By.TAG_NAME, "body")
    body.send_keys(Keys.TAB)
    for _ in range(40):
        active = driver.switch_to.active_element
        reached.add(active.get_attribute("id") or active.get_attribute("href") or active.tag_name)
        active.send_keys(Keys.TAB)
    assert {"state", "q"} <= reached, reached
    assert any("sort=" in r for r in reached), reached
