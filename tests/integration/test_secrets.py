"""A planted secret never shows: not in debug logs, /metrics, files, nor any process's command line.

The secret is given the way operators give it (``${env:NAME}`` in ``source.kafka_options`` and in
``spark.conf``) to the real job on the real broker. Before the fix, py4j's DEBUG log carried every
``.option(...)`` with the resolved SASL JAAS line, and ``spark.conf`` values were ``--conf`` arguments of
the JVM, readable in ``/proc/<pid>/cmdline``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.test_graceful_stop import committed_batch
from tests.integration.test_stream_kafka import connector_args, prepare
from tests.support.kafka import REPO_ROOT

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

PLANTED = "planted-S3cr3t-value-7f3a9c"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def process_tree(root: int) -> list[int]:
    """``root`` and all its descendants (the JVM is a child of the Python driver)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def test_planted_secret_appears_in_no_log_metric_file_or_command_line(
    kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    prepare(make_topic, kafka_bootstrap, "secrets", 3000)
    args = connector_args(kafka_bootstrap, "secrets", tmp_path)
    config = Path(args[args.index("--config") + 1])
    config.write_text(
        "mirror:\n  max_rows_per_file: 400\n"
        "source:\n  kafka_options:\n"
        # PLAINTEXT ignores the SASL settings, so the job runs; the value still travels to the consumer.
        "    kafka.sasl.mechanism: PLAIN\n"
        "    kafka.sasl.jaas.config: >-\n"
        "      org.apache.kafka.common.security.plain.PlainLoginModule required\n"
        '      username="mirror" password="${env:MIRROR_PLANTED_SECRET}";\n'
        "spark:\n  conf:\n"
        "    spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net: ${env:MIRROR_PLANTED_SECRET}\n"
    )
    port = free_port()
    args[args.index("--trigger") + 1] = "2s"
    args[args.index("--metrics-port") + 1] = str(port)
    log = tmp_path / "run.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "connector", "--log-level", "debug", *args],
            cwd=REPO_ROOT,
            stderr=sink,
            stdout=sink,
            env={**os.environ, "MIRROR_PLANTED_SECRET": PLANTED},
        )
    try:
        deadline = time.monotonic() + 300
        while committed_batch(tmp_path / "cp") < 1:
            assert process.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(0.5)
        command_lines = {pid: _cmdline(pid) for pid in process_tree(process.pid)}
        assert any("java" in line for line in command_lines.values()), command_lines  # the JVM was seen
        for pid, line in command_lines.items():
            assert PLANTED not in line, f"secret in /proc/{pid}/cmdline"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            assert PLANTED not in response.read().decode()
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)
    output = log.read_text()
    assert PLANTED not in output
    for path in tmp_path.rglob("*"):
        if path.is_file() and path != config:
            assert PLANTED.encode() not in path.read_bytes(), f"secret in {path}"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
