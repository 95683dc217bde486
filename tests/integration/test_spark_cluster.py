"""``run --spark-master spark://…`` on a real Spark standalone cluster over real Kafka.

The cluster is ``deploy/local/spark-cluster.sh`` (a master and two workers of one core and 1 GB each, from
the pip pyspark install), started once for this module. The connector runs as its own process (the driver);
the executors are JVMs the workers launch, with Python workers of their own. Topics have 2 partitions, and
batches are a few thousand records, so each batch is several tasks spread over both executors.

- The executors' Python workers write every staged file (an audit hook records which process made each one);
  the driver only renames and commits. The mirror is exact.
- A worker SIGKILLed (with its executor) while its executor runs a task, then started again: exact.
- An executor JVM SIGKILLed while it runs a task: Spark retries the task elsewhere: exact.
- The driver SIGKILLed at the ledger's crash points (between numbered files; after the last file, before the
  commit), then restarted: exact, nothing published is rewritten.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from connector.storage import LocalStorage
from tests.integration.test_stream_kafka import assert_mirror_equals, file_digests
from tests.support.kafka import REPO_ROOT, produce, run_connector
from tests.support.model import Workload
from tests.support.spark_cluster import SparkCluster, Task, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

AUDIT_DIR = REPO_ROOT / "tests" / "support" / "staging_audit"
# Generous bounds for a shared 2-core machine: a run's first batch waits for two executor JVMs to start.
RUN_TIMEOUT_S = 400
KILL_WAIT_S = 300


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    cluster = SparkCluster.start(tmp_path_factory.mktemp("spark-cluster"))
    try:
        yield cluster
    finally:
        cluster.stop()


def prepare(make_topic: Callable[..., str], bootstrap: str, prefix: str, operations: int) -> Workload:
    """The two-table workload on topics of 2 partitions, and a heartbeat topic."""
    workload = Workload(prefix, partitions=2)
    make_topic(workload.customers.name, 2)
    make_topic(workload.orders.name, 2)
    make_topic(f"__debezium-heartbeat.{prefix}", 1)
    produce(bootstrap, workload.records(operations))
    produce(
        bootstrap,
        [workload.customers.raw(b'{"ts_ms":1}')._replace(topic=f"__debezium-heartbeat.{prefix}", partition=0)],
    )
    return workload


def cluster_args(
    bootstrap: str, prefix: str, tmp: Path, master: str, max_offsets: int, landing_zone: str | None = None
) -> list[str]:
    config = tmp / "config.yaml"
    spark_conf = {
        # The executors' Python workers load the audit hook too (recording only where STAGING_AUDIT_LOG is set).
        "spark.executorEnv.PYTHONPATH": str(AUDIT_DIR),
        "spark.executorEnv.STAGING_AUDIT_LOG": str(tmp / "staged-by.tsv"),
    }
    config.write_text(
        orjson.dumps(
            {"mirror": {"max_rows_per_file": 400}, "spark": {"decode_on": "executors", "conf": spark_conf}}
        ).decode()
    )
    return [
        "run",
        "--config",
        str(config),
        "--spark-master",
        master,
        "--bootstrap-servers",
        bootstrap,
        "--topics",
        rf"(__debezium-heartbeat\.)?{prefix}(\..*)?",
        "--landing-zone",
        landing_zone or str(tmp / "lz"),
        "--checkpoint",
        str(tmp / "cp"),
        "--trigger",
        "available-now",
        "--max-offsets-per-trigger",
        str(max_offsets),
        "--metrics-port",
        "0",
    ]


def driver_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The driver's environment: reachable by the executors on 127.0.0.1, and audited like them."""
    return {
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYTHONPATH": str(AUDIT_DIR),
        "STAGING_AUDIT_LOG": str(tmp / "staged-by.tsv"),
        **extra,
    }


class Driver:
    """``python -m connector ARGS`` started in the background, output to a file."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "connector", *args],
                cwd=REPO_ROOT,
                env={**os.environ, **env},
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def running(self) -> bool:
        if self.process.poll() is None:
            return True
        raise AssertionError(f"the driver exited ({self.process.returncode}) early:\n{self.output()[-4000:]}")

    def wait(self) -> int:
        try:
            return self.process.wait(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise


def committed_batches(tmp: Path) -> int:
    """The ledger's last committed batch id (-1 before the first commit)."""
    state = tmp / "cp" / "ledger" / "state.json"
    if not state.exists():
        return -1
    last = orjson.loads(state.read_bytes()).get("last_committed_batch")
    return -1 if last is None else int(last)


def staged_by(tmp: Path) -> list[tuple[int, Path, str]]:
    """(pid, working folder, staged file) for every ``_staged_`` file created, from the audit hook's record."""
    record = tmp / "staged-by.tsv"
    if not record.exists():
        return []
    rows = [line.split("\t") for line in record.read_text().splitlines()]
    return [(int(pid), Path(cwd), path) for pid, cwd, path in rows]


def numbered_data_files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*.parquet") if p.name[:1].isdigit()]


def assert_exact_and_clean(tmp: Path, workload: Workload) -> None:
    assert_mirror_equals(LocalStorage(str(tmp / "lz")), workload)
    assert not list((tmp / "lz").rglob("_staged_*"))  # every staged file was published (or cleaned up)


def busy_executor(cluster: SparkCluster, worker: int, driver: Driver, tmp: Path) -> tuple[int, list[Task]] | None:
    """Worker ``worker``'s executor pid and its running tasks, once a batch was committed and it runs one."""
    if not driver.running() or committed_batches(tmp) < 0:
        return None
    pid = cluster.executor_pid(worker)
    if pid is None:
        return None
    tasks = cluster.running_tasks(pid)
    return (pid, tasks) if tasks else None


def spark_log(tmp_path: Path) -> str:
    """Spark's own ERROR lines, which the connector writes to ``<checkpoint>/logs/spark.log`` (not the console)."""
    logs = tmp_path / "cp" / "logs"
    return "".join(p.read_text(errors="replace") for p in sorted(logs.glob("spark.log*"))) if logs.is_dir() else ""


def test_executors_write_the_staged_files_and_the_mirror_is_exact(
    spark_cluster: SparkCluster, kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    prefix = "clusterexact"
    workload = prepare(make_topic, kafka_bootstrap, prefix, 3000)
    # Relative to the driver's working folder: the executors work in folders of their own.
    relative = os.path.relpath(tmp_path / "lz", REPO_ROOT)
    args = cluster_args(kafka_bootstrap, prefix, tmp_path, spark_cluster.master, 1500, landing_zone=relative)
    driver = Driver(args, driver_env(tmp_path), tmp_path / "driver.log")
    assert driver.wait() == 0, driver.output()[-4000:]
    assert '"event":"batch"' in driver.output()
    assert_exact_and_clean(tmp_path, workload)

    # Every staged file was made by a Python worker of an executor (its working folder is in a worker's
    # work folder, <work>/<app id>/<executor id>), none by the driver; and each numbered file is one of them.
    staged = staged_by(tmp_path)
    assert staged, "the audit hook recorded no staged file"
    driver_made = [(pid, cwd) for pid, cwd, _ in staged if pid == driver.process.pid or cwd == REPO_ROOT]
    assert driver_made == []
    folders = {cwd for _, cwd, _ in staged}
    for folder in folders:
        assert folder.is_relative_to(spark_cluster.state_dir), folder
        assert folder.parent.name.startswith("app-"), folder
    assert len({cwd.name for cwd in folders}) == 2  # both executors staged files
    published = numbered_data_files(tmp_path / "lz")
    assert len({path for _, _, path in staged}) == len(published)


def test_a_worker_killed_mid_batch_and_started_again_gives_an_exact_mirror(
    spark_cluster: SparkCluster, kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    prefix = "clusterworker"
    workload = prepare(make_topic, kafka_bootstrap, prefix, 6000)
    args = cluster_args(kafka_bootstrap, prefix, tmp_path, spark_cluster.master, 1500)
    driver = Driver(args, driver_env(tmp_path), tmp_path / "driver.log")
    executor, tasks = wait_for(
        "worker 1's executor runs a task after the first commit",
        lambda: busy_executor(spark_cluster, 1, driver, tmp_path),
        KILL_WAIT_S,
        interval=0.05,
    )
    killed = spark_cluster.kill_worker(1)  # the worker JVM, its executor JVM, the executor's Python
    assert executor in killed
    spark_cluster.restart_missing_workers()  # the master gives the application an executor on it again
    assert driver.wait() == 0, driver.output()[-4000:]
    output = driver.output() + spark_log(tmp_path)
    assert "Lost executor" in output, output[-4000:]
    # The kill hit a running task: a later attempt of it ran on another executor.
    assert [t for t in tasks if not spark_cluster.retried(t)] == []
    assert_exact_and_clean(tmp_path, workload)
    assert "workers=2/2" in spark_cluster.status().stdout


def test_an_executor_killed_mid_batch_has_its_tasks_retried_and_the_mirror_is_exact(
    spark_cluster: SparkCluster, kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    prefix = "clusterexecutor"
    workload = prepare(make_topic, kafka_bootstrap, prefix, 6000)
    args = cluster_args(kafka_bootstrap, prefix, tmp_path, spark_cluster.master, 1500)
    driver = Driver(args, driver_env(tmp_path), tmp_path / "driver.log")
    executor, tasks = wait_for(
        "worker 2's executor runs a task after the first commit",
        lambda: busy_executor(spark_cluster, 2, driver, tmp_path),
        KILL_WAIT_S,
        interval=0.05,
    )
    spark_cluster.kill_executor(executor)  # the worker stays and launches a new executor for the application
    assert driver.wait() == 0, driver.output()[-4000:]
    output = driver.output() + spark_log(tmp_path)
    assert "Lost executor" in output, output[-4000:]
    assert [t for t in tasks if not spark_cluster.retried(t)] == []  # Spark ran the killed task again
    assert_exact_and_clean(tmp_path, workload)


def test_driver_killed_at_the_ledger_crash_points_then_restarted_gives_an_exact_mirror(
    spark_cluster: SparkCluster, kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    """``tests.support.crash_run`` SIGKILLs the driver at a storage call, as in the local crash tests."""
    prefix = "clusterdriver"
    workload = prepare(make_topic, kafka_bootstrap, prefix, 3000)
    args = cluster_args(kafka_bootstrap, prefix, tmp_path, spark_cluster.master, 1500)
    landing = LocalStorage(str(tmp_path / "lz"))
    env = driver_env(tmp_path)

    # Between numbered files of the first batch.
    crashed = run_connector(
        *args, wrapper="tests.support.crash_run", env={**env, "CRASH_OPERATION": "rename_new", "CRASH_AT": "3"}
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-4000:]
    first = file_digests(landing)
    assert first  # the kill came in the middle of publishing, after some files

    # Restarted, it finishes that batch from the ledger's plan, then dies after the last file of the next
    # batch it publishes, before that batch's commit.
    crashed = run_connector(
        *args, wrapper="tests.support.crash_run", env={**env, "CRASH_OPERATION": "commit", "CRASH_AT": "2"}
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-4000:]
    second = file_digests(landing)
    assert {k: second[k] for k in first} == first  # never overwritten
    assert len(second) > len(first)

    restarted = run_connector(*args, env=env)
    assert restarted.returncode == 0, restarted.stderr[-4000:]
    assert_exact_and_clean(tmp_path, workload)
    final = file_digests(landing)
    assert {k: final[k] for k in second} == second
