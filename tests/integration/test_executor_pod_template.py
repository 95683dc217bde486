"""Executors run as the chart's executor pod template says, on a Spark standalone cluster: the mirror is exact.

The cluster is ``deploy/local/spark-cluster.sh``, started inside a mount namespace (``unshare``) whose root
filesystem is read-only except ``/tmp`` (the template's ``emptyDir``; the workers' folders, where each
executor's working directory is, live there too), with the template's environment (``HOME=/tmp`` and the
service principal's variables, resolved from the values a Secret would hold, as the kubelet does). Its
executors decode, encode and write the staged files (``spark.decode_on: executors``, the chart's default);
the connector, as the driver, runs outside. What differs from a pod: the executor's working directory is the
worker's folder for it rather than ``/opt/connector/work``, and the image's paths are this machine's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from connector.storage import LocalStorage
from tests.deploy.tooling import CHART, find_tool, run
from tests.integration.test_stream_kafka import assert_mirror_equals
from tests.support.kafka import REPO_ROOT, produce
from tests.support.model import Workload

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

SPARK_CLUSTER_SH = REPO_ROOT / "deploy" / "local" / "spark-cluster.sh"
SECRET_VALUES = {"AZURE_CLIENT_ID": "app-id", "AZURE_TENANT_ID": "tenant-id", "AZURE_CLIENT_SECRET": "s3cr3t-value"}
# Generous bounds on a shared 2-core machine: they end a hang, they measure nothing.
START_TIMEOUT_S = 240
RUN_TIMEOUT_S = 400


def template_env() -> dict[str, str]:
    """The executor container's env from the rendered template, secretKeyRefs resolved as the kubelet does."""
    args = [find_tool("helm"), "template", "mirror", str(CHART), "-n", "cdc"]
    args += ["-f", str(CHART / "ci" / "k8s-spark-values.yaml"), "--set", "kafka.security.protocol=PLAINTEXT"]
    args += ["--set", "identity.type=servicePrincipalSecret", "--set", "identity.servicePrincipal.existingSecret=az"]
    result = run(args)
    assert result.returncode == 0, result.stderr
    config_map = next(d for d in yaml.safe_load_all(result.stdout) if d and d["kind"] == "ConfigMap")
    template = yaml.safe_load(config_map["data"]["executor-pod-template.yaml"])
    env: dict[str, str] = {}
    for var in template["spec"]["containers"][0]["env"]:
        if "value" in var:
            env[var["name"]] = var["value"]
        else:
            env[var["name"]] = SECRET_VALUES[var["valueFrom"]["secretKeyRef"]["key"]]
    assert env["HOME"] == "/tmp"
    assert template["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    return env


def cluster_script(command: str, state_dir: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script_env = {**os.environ, **env, "STATE_DIR": str(state_dir), "WORKERS": "2", "WORKER_CORES": "1"}
    cmd = ["bash", str(SPARK_CLUSTER_SH), command]
    if command == "start":
        # Root read-only, /tmp writable; the daemons and their executors stay in this mount namespace.
        remount = 'set -e; mount --bind /tmp /tmp; mount -o remount,bind,ro /; exec "$@"'
        cmd = ["unshare", "--mount", "--propagation", "private", "bash", "-c", remount, "remount", *cmd]
    return subprocess.run(cmd, env=script_env, capture_output=True, text=True, timeout=START_TIMEOUT_S, check=False)


@pytest.fixture(scope="module")
def pod_like_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, dict[str, str]]]:
    state_dir = tmp_path_factory.mktemp("spark-cluster-ro")
    assert str(state_dir).startswith("/tmp/")
    env = template_env()
    started = cluster_script("start", state_dir, env)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        master = started.stdout.strip().removeprefix("spark.master=")
        yield master, state_dir, env
    finally:
        stopped = cluster_script("stop", state_dir, {})
        assert stopped.returncode == 0, stopped.stderr


def executors_of(state_dir: Path) -> list[int]:
    """Executor JVMs whose working directory is in this cluster's state folder."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue
        if b"CoarseGrainedExecutorBackend" in cmdline and cwd.startswith(str(state_dir)):
            found.append(int(proc.name))
    return found


def root_mount_options(pid: int) -> set[str]:
    for line in (Path("/proc") / str(pid) / "mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == "/":
            return set(fields[5].split(","))
    raise AssertionError(f"no root mount for {pid}")


def environ(pid: int) -> dict[str, str]:
    pairs = (Path("/proc") / str(pid) / "environ").read_bytes().split(b"\0")
    return dict(p.decode(errors="replace").split("=", 1) for p in pairs if b"=" in p)


def test_executors_as_the_pod_template_says_mirror_exactly(
    pod_like_cluster: tuple[str, Path, dict[str, str]],
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    master, state_dir, env = pod_like_cluster
    prefix = "podspec"
    workload = Workload(prefix, partitions=2)
    make_topic(workload.customers.name, 2)
    make_topic(workload.orders.name, 2)
    produce(kafka_bootstrap, workload.records(3000))

    config = tmp_path / "config.yaml"
    config.write_text(orjson.dumps({"spark": {"decode_on": "executors"}}).decode())
    args = ["run", "--config", str(config), "--spark-master", master, "--bootstrap-servers", kafka_bootstrap]
    args += ["--topics", rf"{prefix}\..*", "--landing-zone", str(tmp_path / "lz"), "--checkpoint", str(tmp_path / "cp")]
    args += ["--trigger", "available-now", "--max-offsets-per-trigger", "2000", "--metrics-port", "0"]
    (tmp_path / "lz").mkdir()
    (tmp_path / "cp").mkdir()
    log = tmp_path / "driver.log"
    with log.open("wb") as out:
        driver = subprocess.Popen(
            [sys.executable, "-m", "connector", *args],
            cwd=REPO_ROOT,
            env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    seen: dict[int, tuple[set[str], dict[str, str]]] = {}
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while driver.poll() is None:
        for pid in executors_of(state_dir):
            if pid not in seen:
                try:
                    seen[pid] = (root_mount_options(pid), environ(pid))
                except OSError:
                    continue
        if time.monotonic() > deadline:
            driver.kill()
            driver.wait()
            pytest.fail(f"the run did not finish:\n{log.read_text(errors='replace')[-4000:]}", pytrace=False)
        time.sleep(0.2)
    output = log.read_text(errors="replace")
    assert driver.returncode == 0, output[-6000:]

    assert seen, "no executor of the read-only cluster was seen"
    for options, executor_env in seen.values():
        assert "ro" in options  # the executor's root filesystem is read-only
        expected: dict[str, Any] = env
        assert {k: executor_env.get(k) for k in expected} == expected
    assert_mirror_equals(LocalStorage(str(tmp_path / "lz")), workload)
