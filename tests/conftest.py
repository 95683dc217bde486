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
and Java) beside the first tests, and mapped by every driver started after it exists instead of loading and verifying
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
# The suite runs on three pytest-xdist workers (``-n 3``, pyproject.toml) on two cores: most of an end-to-end test's
# time is spent waiting on Debezium, Kafka Connect and a database, and with two workers a third of the CPU stayed
# idle. The end-to-end tests are two units of work (``pytest_xdist_make_scheduler``), each run in order by one
# worker on the session stacks it starts (tests/e2e/conftest.py): the tests on the MariaDB stack, with modules that
# start stacks of their own to even the two out, and the tests on the Postgres stacks. The third worker, and each
# of the two when its unit is done, runs the deployment, integration and unit tests, one module at a time. Every
# worker starts its own brokers and stacks in temporary state folders on free ports, so nothing they start collides.
STACK_FOLDER = "tests/e2e/"
# The MariaDB unit: the modules on the session's MariaDB stack (test_mariadb_e2e's tests mirror every table of it,
# so their relative order is kept), and modules with stacks of their own (about 850 s of the 1,700 on Intel Xeon).
MARIADB_UNIT_MODULES = frozenset(
    f"{STACK_FOLDER}{name}.py"
    for name in (
        "test_check_source",
        "test_entra_stack_e2e",
        "test_initial_load_e2e",
        "test_initial_load_fresh_e2e",
        "test_mariadb_avro_e2e",
        "test_mariadb_e2e",
        "test_mariadb_empty_tables_e2e",
        "test_mariadb_keyless_e2e",
        "test_mariadb_with_audit_e2e",
        "test_rebuild_mariadb_e2e",
        "test_resets_mariadb_e2e",
    )
)
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
# A missing archive is written beside the first tests; each worker maps it from its first test after it exists.
_archive_writer: threading.Thread | None = None
# The archive this process has yet to map (another worker may be writing it); found once, at collection.
_archive_to_map: Path | None = None


def pytest_configure(config: pytest.Config) -> None:
    """Give every JVM the suite starts (subprocesses inherit the environment) the test JVM options."""
    for name, value in TEST_JVM_OPTIONS.items():
        os.environ.setdefault(name, value)


def pytest_collection_finish(session: pytest.Session) -> None:
    """With Spark tests selected (and the options the suite's own), every Spark driver maps one class archive.

    A missing one is written (``python -m connector class-archive``) beside the first tests; the drivers started
    before it exists go without it (``pytest_runtest_setup``).
    """
    global _archive_writer, _archive_to_map
    if not _SUITE_SETS_SPARK_OPTIONS or not any(item.get_closest_marker("slow") for item in session.items):
        return
    archive = archive_for_this_java()
    if archive.is_file():
        _map_class_archive(archive)
        return
    _archive_to_map = archive
    if os.environ.get("PYTEST_XDIST_WORKER", ARCHIVE_WRITER) != ARCHIVE_WRITER:
        return  # mapped from this worker's first test after the writer's worker wrote it (pytest_runtest_setup)
    _archive_writer = threading.Thread(
        target=_write_class_archive, args=(archive, dict(os.environ)), name="spark-class-archive", daemon=True
    )
    _archive_writer.start()


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before each test outside tests/deploy until it is mapped: the class archive mapped by every later driver
    once it exists (it appears whole: written aside and renamed). No worker waits for it: the first tests of the
    end-to-end units spend its writing starting their stacks."""
    global _archive_writer, _archive_to_map
    if _archive_to_map is None or item.path.is_relative_to(TESTS_ROOT / "deploy"):
        return
    if _archive_to_map.is_file():
        _map_class_archive(_archive_to_map)
        _archive_to_map = None
    elif _archive_writer is not None and not _archive_writer.is_alive():
        _archive_writer = None
        _archive_to_map = None  # this worker's writer failed and said why: the drivers go without


def _write_class_archive(archive: Path, environ: dict[str, str]) -> None:
    """The product's own writer; a failure leaves the suite without an archive (slower, not wrong)."""
    try:
        write_class_archive(archive, environ)
    except ClassArchiveError as exc:
        print(f"the Spark drivers run without a class archive: {exc}", file=sys.stderr)


def _map_class_archive(archive: Path) -> None:
    os.environ["SPARK_SUBMIT_OPTS"] += " " + archive_java_options(str(archive))


def stack_unit(nodeid: str) -> str | None:
    """The end-to-end unit of work a test belongs to (``None`` outside tests/e2e)."""
    if not nodeid.startswith(STACK_FOLDER):
        return None
    module, _, test = nodeid.partition("::")
    # test_stack_signals holds one test per stack: each runs on the worker that has that stack up.
    on_mariadb = module in MARIADB_UNIT_MODULES or (
        module == f"{STACK_FOLDER}test_stack_signals.py" and "mariadb" in test
    )
    return f"{STACK_FOLDER} on the MariaDB stack" if on_mariadb else f"{STACK_FOLDER} on the Postgres stacks"


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's per-scope scheduler with the end-to-end tests as two scopes, each run in order by one worker.

    The scopes are handed out in collection order (``--no-loadscope-reorder``), where the end-to-end tests come
    first (``pytest_collection_modifyitems``): the two longest units start at once, the integration modules (the
    longer ones) come next and the unit tests fill the end. xdist's default order, the scopes with most tests
    first, would start the end-to-end units after unit-test modules with many parameters.
    (xdist's own ``loadgroup`` cannot do it with pytest 9: it renames node ids through an attribute pytest 9 no
    longer reads, so every test stayed a group of its own and every worker started the shared stacks.)
    """
    from xdist.scheduler import LoadScopeScheduling

    class StacksInTwoUnits(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return stack_unit(nodeid) or nodeid

    config.option.loadscopereorder = False
    return StacksInTwoUnits(config, log)


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects: it must see the added marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put the end-to-end tests first (``pytest_xdist_make_scheduler``); mark ``slow`` every test that starts a
    stack, a broker or a JVM (see the module docstring)."""
    items.sort(key=lambda item: stack_unit(item.nodeid) is None)  # stable: the end-to-end tests first, in order
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
