"""Fixtures shared by every suite: the DFS test double, and a landing zone on each backend.

A test that takes ``landing`` (or ``make_landing``) runs twice: against a local folder and against
``OneLakeStorage`` on ``DfsTestServer``, the ADLS Gen2 **test double** (see tests/support/dfs_server.py).
The test reads the landing zone back through ``landing.storage`` (what ``validate`` and ``replay``
take), and hands ``landing.url`` to the command line exactly as a user would. For the OneLake backend
the environment is that of an Azure host with a managed identity (App Service style, played by the
double) whose CA the process trusts, so the CLI, in this process or in a subprocess, authenticates
through azure-identity's own code path: the connector has no switch for tests.

Two tiers (``[tool.pytest.ini_options]`` markers in pyproject.toml; README, "Run the tests"): every test
that starts a real component (a stack, a Kafka broker, a Spark JVM, a cluster, kube-apiserver; the ``e2e``,
``kafka`` and ``spark`` markers, everything under tests/e2e and tests/integration, and ``SLOW_MODULES``) is
also marked ``slow`` here, so ``pytest -m "not slow"`` is the quick inner loop and plain ``pytest`` runs
everything.

The JVMs the suite starts are short-lived, so they run with the JIT's first tier only
(``-XX:TieredStopAtLevel=1``): the same Spark, Kafka, Kafka Connect and registry code, about a third less CPU
to start and to run a test's few batches (measured: 13-15 CPU-s -> 8-10 per ``run`` of the packaged sample).
``SPARK_SUBMIT_OPTS`` carries it to every Spark driver (``python -m connector run`` and in-process sessions),
``LOCAL_JAVA_OPTS`` to the JVMs of deploy/local/*.sh. Either variable, set (even empty) before pytest starts,
is left as it is.

When the tests selected start Spark, the Spark drivers also share one class-data archive (Java's AppCDS), written
by the product's own ``class-archive`` (a ``run`` of the packaged sample) to ``.cache/spark-cds/`` (once per pyspark
and Java) while the deployment tests run, and mapped by every driver after them instead of loading and verifying
the classes again (measured: a ``run`` of the sample 8.7-9.3 s -> 6.3-7.1 s). An archive that does not fit (another
classpath, another JVM) is ignored by the JVM.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from connector.spark.class_archive import (
    ClassArchiveError,
    archive_for_this_java,
    archive_java_options,
    write_class_archive,
)
from connector.storage.local import LocalStorage
from connector.storage.onelake import OneLakeStorage
from tests.support.dfs_server import (
    OTHER_IDENTITY_VARIABLES,
    DfsTestServer,
    make_onelake_storage,
    managed_identity_environment,
)
from tests.support.landing import WORKSPACE, Landing, unique_item_root

LANDING_BACKENDS = ("local", "onelake")

# Markers whose tests start a real component; with the folders below, what ``slow`` means.
SLOW_MARKERS = ("e2e", "kafka", "spark")
SLOW_FOLDERS = ("e2e", "integration")
# Deployment tests that start real tools: kube-apiserver and etcd, a wheel built and installed, the Dockerfile's steps.
SLOW_MODULES = ("deploy/test_kube_apiserver.py", "deploy/test_packaging.py", "deploy/test_dockerfile.py")
TESTS_ROOT = Path(__file__).resolve().parent
# The suite runs on two pytest-xdist workers (``-n 2``, pyproject.toml): every end-to-end test in one unit of work
# (``pytest_xdist_make_scheduler``), so one worker runs them in order on the stacks they share
# (tests/e2e/conftest.py), while the other runs the unit, integration and deployment tests beside it. Each worker
# starts its own brokers in temporary state folders on free ports, so nothing they start collides.
STACK_FOLDER = "tests/e2e/"
# The worker that writes the suite's class archive (the others map it once it exists): one writer, not two.
ARCHIVE_WRITER = "gw0"
# JIT tier 1 only for the suite's short-lived JVMs (the module docstring); SerialGC: Spark's small test heaps.
TEST_JVM_OPTIONS = {
    "SPARK_SUBMIT_OPTS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    "LOCAL_JAVA_OPTS": "-XX:TieredStopAtLevel=1",
    # Every ``run`` the suite starts moves rebuilds on every second (5 s by default): a quiet table's rebuild waits
    # a tick at each of its steps, and the suite's end-to-end tests rebuild a few dozen tables.
    "CONNECTOR_MIRROR__REBUILD__CHECK_INTERVAL_S": "1",
}


_SUITE_SETS_SPARK_OPTIONS = "SPARK_SUBMIT_OPTS" not in os.environ
# A missing archive is written beside the first tests; the first test that may start a Spark driver waits for it.
_archive_writer: threading.Thread | None = None
# Whether this process has yet to map the archive (another worker may be writing it).
_archive_pending = False


def pytest_configure(config: pytest.Config) -> None:
    """Give every JVM the suite starts (subprocesses inherit the environment) the test JVM options."""
    for name, value in TEST_JVM_OPTIONS.items():
        os.environ.setdefault(name, value)


def pytest_collection_finish(session: pytest.Session) -> None:
    """With Spark tests selected (and the options the suite's own), every Spark driver maps one class archive.

    A missing one is written (``python -m connector class-archive``) while the deployment tests run: they come
    first, and a Spark driver one of them starts only goes without it.
    """
    global _archive_writer, _archive_pending
    if not _SUITE_SETS_SPARK_OPTIONS or not any(item.get_closest_marker("slow") for item in session.items):
        return
    archive = archive_for_this_java()
    if archive.is_file():
        _map_class_archive(archive)
        return
    _archive_pending = True
    if os.environ.get("PYTEST_XDIST_WORKER", ARCHIVE_WRITER) != ARCHIVE_WRITER:
        return  # mapped at this worker's first Spark test if the writer has finished by then (pytest_runtest_setup)
    _archive_writer = threading.Thread(
        target=_write_class_archive, args=(archive, dict(os.environ)), name="spark-class-archive", daemon=True
    )
    _archive_writer.start()


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before the first test outside tests/deploy: the class archive written, and mapped by every driver after."""
    global _archive_writer, _archive_pending
    if not _archive_pending or item.path.is_relative_to(TESTS_ROOT / "deploy"):
        return
    if _archive_writer is not None:
        _archive_writer.join()
        _archive_writer = None
    _archive_pending = False
    archive = archive_for_this_java()
    if archive.is_file():
        _map_class_archive(archive)


def _write_class_archive(archive: Path, environ: dict[str, str]) -> None:
    """The product's own writer; a failure leaves the suite without an archive (slower, not wrong)."""
    try:
        write_class_archive(archive, environ)
    except ClassArchiveError as exc:
        print(f"the Spark drivers run without a class archive: {exc}", file=sys.stderr)


def _map_class_archive(archive: Path) -> None:
    os.environ["SPARK_SUBMIT_OPTS"] += " " + archive_java_options(str(archive))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's per-scope scheduler with the end-to-end tests as one scope: one worker runs them all, in order.

    (xdist's own ``loadgroup`` cannot do it with pytest 9: it renames node ids through an attribute pytest 9 no
    longer reads, so every test stayed a group of its own and both workers started the shared stacks.)
    """
    from xdist.scheduler import LoadScopeScheduling

    class StacksOnOneWorker(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return STACK_FOLDER if nodeid.startswith(STACK_FOLDER) else nodeid

    return StacksOnOneWorker(config, log)


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects: it must see the added marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``slow`` every test that starts a stack, a broker or a JVM (see the module docstring)."""
    for item in items:
        path = item.path.relative_to(TESTS_ROOT).as_posix() if item.path.is_relative_to(TESTS_ROOT) else ""
        if (
            path.split("/", 1)[0] in SLOW_FOLDERS
            or path in SLOW_MODULES
            or any(item.get_closest_marker(name) for name in SLOW_MARKERS)
        ):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def dfs_server() -> Iterator[DfsTestServer]:
    """One fault-free DFS test double for the session; tests isolate themselves by root folder."""
    with DfsTestServer() as server:
        yield server


@pytest.fixture(params=LANDING_BACKENDS)
def landing_backend(request: pytest.FixtureRequest) -> str:
    """The backend of the test's landing zones."""
    return str(request.param)


@pytest.fixture
def make_landing(
    request: pytest.FixtureRequest,
    landing_backend: str,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Callable[[], Landing]]:
    """Return ``make_landing()``: a new, empty landing zone on the test's backend at each call."""
    opened: list[OneLakeStorage] = []
    server: DfsTestServer | None = None
    if landing_backend == "onelake":
        server = request.getfixturevalue("dfs_server")
        for name in OTHER_IDENTITY_VARIABLES:
            monkeypatch.delenv(name, raising=False)
        for name, value in managed_identity_environment(server).items():
            monkeypatch.setenv(name, value)

    def make() -> Landing:
        if server is None:
            root = tmp_path_factory.mktemp("landing-zone")
            return Landing("local", LocalStorage(root), str(root))
        item_root = unique_item_root()
        storage = make_onelake_storage(server, item_root, filesystem=WORKSPACE)
        opened.append(storage)
        # Fabric creates Files/LandingZone with the mirrored database; `run` refuses a landing zone without it.
        storage.check(create_root=True, probe_write=False)
        return Landing("onelake", storage, server.location_url(WORKSPACE, item_root))

    yield make
    for storage in opened:
        storage.close()


@pytest.fixture
def landing(make_landing: Callable[[], Landing]) -> Landing:
    """An empty landing zone on each backend (the test runs once per backend)."""
    return make_landing()
