"""The full local stacks (Postgres or MariaDB -> Debezium/Kafka Connect -> Kafka) from ``deploy/local/stack.sh``.

Which stack fixture to take (every one yields ``stack.sh up``'s printed values plus ``state_dir``; every stack
gets a temporary ``STATE_DIR`` and is always brought ``down``; ``E2E_KEEP_STATE=1`` keeps the state dirs, logs
included). A stack start costs 15-60 s on this 2-core machine, so share one unless the test cannot:

- ``shared_stack`` / ``shared_stack_ctl`` (session): Postgres, started once, for every test that keeps to tables
  of its own: it creates them under names no other test uses, reads and mirrors only their topics (a regex over
  its own tables, not ``topics``), with its own landing zone and checkpoint (``tmp_path``). New Postgres tests
  (schema changes, ...) belong here.
- ``mariadb_stack`` / ``mariadb_stack_ctl`` / ``mariadb`` (session): the MariaDB stack, on the same terms
  (``test_rebuild_mariadb_e2e`` is the pattern: its own tables, a topics regex over them). The ``mirror_source``
  tests of ``test_mariadb_e2e`` mirror every table of the stack, so they run first (module order) on it.
- ``stack`` / ``stack_ctl`` (module): a fresh Postgres stack per module, for modules whose tests see every table
  of the ``public`` schema (``test_stack``'s exact topic set, the ``mirror_source`` tests' and
  ``test_rebuild_e2e``'s mirror of ``topics``): another module's tables would leak into them.
- ``avro_stack`` (module), ``mariadb_avro_stack`` (module), ``registry`` (session): the Avro variants below.

``stack`` and ``shared_stack`` hold the workload schema and ``SNAPSHOT_ROWS`` rows per table loaded through
``--init-sql`` *before* the Debezium connector is registered, so those rows arrive as snapshot reads
(``op=r``); ``mariadb_stack`` likewise with ``tests.e2e.workload_mariadb``.

``avro_stack`` is the same stack with Debezium's key and value in Avro (Apicurio's converter, Confluent wire
format) against the real Apicurio Registry of the ``registry`` fixture (``deploy/local/registry.sh``), plus a
JSON twin connector (``AVRO_TWIN_CONNECTOR``, topic prefix ``AVRO_TWIN_PREFIX``) on the same database, so the
same changes can be read in both encodings. Decode Avro with ``schema.registry.url`` (the registry's
Confluent-compatible API, for ``confluent_kafka.schema_registry.SchemaRegistryClient``).
``mariadb_avro_stack`` is the MariaDB stack (``mariadb_stack``) with that converter and registry.

Every stack also prints its Debezium signalling facts (``SIGNAL_KEYS``): ``topic_prefix`` (the key every signal
message must carry), ``signal_topic`` (Debezium's Kafka signal channel, ``<topic_prefix>-signal``) and
``notification_topic`` (Debezium's sink notifications, ``<topic_prefix>-notifications``, in the connector's
converter). ``tests.support.debezium.execute_snapshot_signal`` builds an incremental snapshot request for it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import workload
from tests.e2e.mirror_source import MirrorSource, connect_mariadb, mariadb_source, postgres_source
from tests.e2e.stack_teardown import STACK_SH, down_command, keep_state

REPO_ROOT = Path(__file__).resolve().parents[2]

SNAPSHOT_ROWS = 20
SNAPSHOT_SEED = 1
# A cold start may install Postgres (apt-get) and fetch the jars from Maven Central.
UP_TIMEOUT_S = 1200
DOWN_TIMEOUT_S = 180
SIGNAL_KEYS = ("topic_prefix", "signal_topic", "notification_topic")
PRINTED_KEYS = ("postgres", "bootstrap.servers", "topics", "connect", "connector", *SIGNAL_KEYS)
REGISTRY_SH = REPO_ROOT / "deploy" / "local" / "registry.sh"
REGISTRY_KEYS = ("registry.url", "schema.registry.url", "apicurio.registry.url")
# A cold start may fetch the registry (~140 MB) from Maven Central.
REGISTRY_START_TIMEOUT_S = 900
AVRO_TWIN_CONNECTOR = "mirror-source-json"
AVRO_TWIN_PREFIX = "dbserver1json"
# shared_stack's Connect commits offsets (and so Debezium's slot confirms positions) every second; set
# CONNECT_OFFSET_FLUSH_MS before pytest to override.
SHARED_STACK_ENV = {"CONNECT_OFFSET_FLUSH_MS": os.environ.get("CONNECT_OFFSET_FLUSH_MS", "1000")}

StackCtl = Callable[..., str]


def _run(
    state_dir: Path, *args: str, timeout: float, env: dict[str, str] | None = None, script: Path = STACK_SH
) -> subprocess.CompletedProcess[str]:
    """Run stack.sh (or ``script``) with this STATE_DIR; its stderr is appended to STATE_DIR/stack-sh.log."""
    env = dict(os.environ, **(env or {}), STATE_DIR=str(state_dir))
    with open(state_dir / "stack-sh.log", "a", encoding="utf-8") as err:
        return subprocess.run(
            ["bash", str(script), *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            timeout=timeout,
            check=False,
        )


def _parse(stdout: str, keys: tuple[str, ...] = PRINTED_KEYS) -> dict[str, str]:
    values = dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)
    missing = [k for k in keys if k not in values]
    if missing:
        msg = f"stack.sh printed no {missing}; stdout:\n{stdout}"
        raise RuntimeError(msg)
    return values


def _log_tail(state_dir: Path, lines: int = 60) -> str:
    try:
        text = (state_dir / "stack-sh.log").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _our_processes(state_dir: Path) -> list[str]:
    """Processes whose command line mentions the state dir (Postgres -D, Kafka/Connect configs)."""
    found = []
    needle = str(state_dir).encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if needle in cmdline:
            args = cmdline.replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{proc.name}: {args}")
    return found


@contextmanager
def _state_dir(prefix: str) -> Iterator[Path]:
    # Not tmp_path: pytest makes its temp dirs 0700, and Postgres runs as another user when we are root.
    state_dir = Path(tempfile.mkdtemp(prefix=prefix))
    state_dir.chmod(0o755)
    yield state_dir
    if not keep_state():
        shutil.rmtree(state_dir, ignore_errors=True)


@contextmanager
def _stack_up(
    state_dir: Path,
    *up_args: str,
    env: dict[str, str] | None = None,
    init_sql: str | None = None,
    keys: tuple[str, ...] = PRINTED_KEYS,
) -> Iterator[dict[str, str]]:
    """``stack.sh up --init-sql <init_sql> *up_args``; yield the printed values plus ``state_dir``; always down.

    ``init_sql`` defaults to the Postgres workload's schema and snapshot rows; ``keys`` are the lines ``up``
    must print.
    """
    sql_file = state_dir / "init.sql"
    if init_sql is None:
        init_sql = workload.init_sql(SNAPSHOT_ROWS, SNAPSHOT_SEED)
    sql_file.write_text(init_sql, encoding="utf-8")
    command = " ".join(("stack.sh up", *up_args))
    try:
        try:
            result = _run(state_dir, "up", "--init-sql", str(sql_file), *up_args, timeout=UP_TIMEOUT_S, env=env)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{command} timed out after {UP_TIMEOUT_S}s:\n{_log_tail(state_dir)}")
        if result.returncode != 0:
            pytest.fail(f"{command} failed (exit {result.returncode}):\n{_log_tail(state_dir)}")
        values = _parse(result.stdout, keys)
        values["state_dir"] = str(state_dir)
        yield values
    finally:
        down = _run(state_dir, *down_command(), timeout=DOWN_TIMEOUT_S)
        left = _our_processes(state_dir)
        if down.returncode != 0 or left:
            pytest.fail(f"stack.sh down failed (exit {down.returncode}), still running: {left}\n{_log_tail(state_dir)}")


def _ctl(state_dir: Path, env: dict[str, str] | None = None) -> StackCtl:
    def ctl(*args: str, timeout: float = UP_TIMEOUT_S) -> str:
        result = _run(state_dir, *args, timeout=timeout, env=env)
        if result.returncode != 0:
            msg = f"stack.sh {' '.join(args)} failed (exit {result.returncode}):\n{_log_tail(state_dir)}"
            raise RuntimeError(msg)
        return result.stdout

    return ctl


@pytest.fixture(scope="module")
def stack_state_dir() -> Iterator[Path]:
    with _state_dir("e2e-stack-") as state_dir:
        yield state_dir


@pytest.fixture(scope="module")
def stack(stack_state_dir: Path) -> Iterator[dict[str, str]]:
    """Bring the stack up; return the printed values plus ``state_dir``. Always ``down`` at the end."""
    with _stack_up(stack_state_dir) as values:
        yield values


@pytest.fixture(scope="module")
def stack_ctl(stack: dict[str, str]) -> StackCtl:
    """``stack_ctl("restart-debezium")``: run another stack.sh command on this stack; return its stdout."""
    return _ctl(Path(stack["state_dir"]))


@pytest.fixture(scope="session")
def shared_stack() -> Iterator[dict[str, str]]:
    """One Postgres stack for the whole session, shared by the tests that keep to tables of their own.

    The same stack and values as ``stack`` (the workload schema and snapshot rows included), started once. A
    test on it creates its own tables (names no other test uses), reads and mirrors only their topics (a
    regex over its own tables, never ``topics``: other tests' tables are there, mid-DDL perhaps), and uses its
    own landing zone and checkpoint (``tmp_path``). It leaves the workload tables and Kafka Connect as it found
    them (``shared_stack_ctl("restart-debezium")`` is fine: it waits until Debezium streams again).

    Its Kafka Connect commits source offsets every second (``SHARED_STACK_ENV``), not every 10 s: Debezium's slot
    confirms a position only at a commit, and ``verify`` against Fabric's tables and the audit wait for that (their
    lag gate) before each judgement. No test on it counts on what a restart re-sends (``stack``'s do).
    """
    with _state_dir("e2e-shared-stack-") as state_dir, _stack_up(state_dir, env=SHARED_STACK_ENV) as values:
        yield values


@pytest.fixture(scope="session")
def shared_stack_ctl(shared_stack: dict[str, str]) -> StackCtl:
    """Like ``stack_ctl``, for ``shared_stack``."""
    return _ctl(Path(shared_stack["state_dir"]), SHARED_STACK_ENV)


@pytest.fixture(scope="session")
def registry() -> Iterator[dict[str, str]]:
    """A real Apicurio Registry (``deploy/local/registry.sh``, in-memory storage), once per session.

    Shared by the Avro stacks (``avro_stack``, ``mariadb_avro_stack``): their subjects are their topics'
    names, distinct per stack (topic prefixes ``dbserver1`` and ``mariadb1``).

    Returns ``registry.url`` (base), ``schema.registry.url`` (Confluent-compatible API: give it to
    ``SchemaRegistryClient``), ``apicurio.registry.url`` (Apicurio's own API) and ``state_dir``.
    """
    with _state_dir("e2e-registry-") as state_dir:
        try:
            try:
                result = _run(state_dir, "start", timeout=REGISTRY_START_TIMEOUT_S, script=REGISTRY_SH)
            except subprocess.TimeoutExpired:
                pytest.fail(f"registry.sh start timed out after {REGISTRY_START_TIMEOUT_S}s:\n{_log_tail(state_dir)}")
            if result.returncode != 0:
                pytest.fail(f"registry.sh start failed (exit {result.returncode}):\n{_log_tail(state_dir)}")
            values = _parse(result.stdout, REGISTRY_KEYS)
            values["state_dir"] = str(state_dir)
            yield values
        finally:
            stop = _run(state_dir, "stop", timeout=DOWN_TIMEOUT_S, script=REGISTRY_SH)
            left = _our_processes(state_dir)
            if stop.returncode != 0 or left:
                pytest.fail(f"registry.sh stop failed (exit {stop.returncode}), still running: {left}")


@pytest.fixture(scope="module")
def avro_stack_state_dir() -> Iterator[Path]:
    with _state_dir("e2e-avro-stack-") as state_dir:
        yield state_dir


@pytest.fixture(scope="module")
def avro_stack(avro_stack_state_dir: Path, registry: dict[str, str]) -> Iterator[dict[str, str]]:
    """The stack with the Avro converter against ``registry``, plus a JSON twin connector on the same database.

    The values of ``stack`` (``topics`` are the Avro topics, ``converter`` is ``avro``), ``registry.url``,
    ``schema.registry.url``, and ``json_topics`` / ``json_connector`` for the twin (topic prefix
    ``AVRO_TWIN_PREFIX``, Kafka's JsonConverter with schemas, as ``stack``), and ``json_topic_prefix`` /
    ``json_signal_topic`` / ``json_notification_topic``: the twin's signalling facts. Always ``down`` at the end.
    """
    env = {"REGISTRY_URL": registry["registry.url"]}
    with _stack_up(avro_stack_state_dir, "--avro", env=env) as values:
        assert values.get("converter") == "avro", values
        assert values.get("schema.registry.url") == registry["schema.registry.url"], values
        out = _ctl(avro_stack_state_dir, env)("register-connector", AVRO_TWIN_CONNECTOR, AVRO_TWIN_PREFIX, "json")
        twin = _parse(out, ("connector", "topics", "converter", *SIGNAL_KEYS))
        values["json_topics"] = twin["topics"]
        values["json_connector"] = twin["connector"]
        for key in SIGNAL_KEYS:
            values[f"json_{key}"] = twin[key]
        yield values


@pytest.fixture(scope="module")
def avro_stack_ctl(avro_stack: dict[str, str]) -> StackCtl:
    """Like ``stack_ctl``, for ``avro_stack``."""
    return _ctl(Path(avro_stack["state_dir"]), {"REGISTRY_URL": avro_stack["registry.url"]})


MARIADB_KEYS = ("mariadb", "bootstrap.servers", "topics", "connect", "connector", *SIGNAL_KEYS)


@contextmanager
def _mariadb_stack_up(prefix: str, *up_args: str, env: dict[str, str] | None = None) -> Iterator[dict[str, str]]:
    """``stack.sh up --source mariadb *up_args`` with the MariaDB workload in a fresh state dir; always down."""
    from tests.e2e import workload_mariadb

    with (
        _state_dir(prefix) as state_dir,
        _stack_up(
            state_dir,
            "--source",
            "mariadb",
            *up_args,
            env=env,
            init_sql=workload_mariadb.init_sql(SNAPSHOT_SEED),
            keys=MARIADB_KEYS,
        ) as values,
    ):
        yield values


@pytest.fixture(scope="session")
def mariadb_stack() -> Iterator[dict[str, str]]:
    """The MariaDB stack (``stack.sh up --source mariadb``), once per test session, shared by the MariaDB tests.

    The ``tests.e2e.workload_mariadb`` schema and snapshot rows are loaded through ``--init-sql`` before the
    Debezium MariaDB connector is registered (so they arrive as snapshot reads). Returns the printed values
    (``mariadb`` is the ``mysql://`` URL) plus ``state_dir``. Always ``down`` at the end.
    """
    with _mariadb_stack_up("e2e-mariadb-") as values:
        yield values


@pytest.fixture(scope="module")
def mariadb_avro_stack(registry: dict[str, str]) -> Iterator[dict[str, str]]:
    """The MariaDB stack with the Avro converter (``stack.sh up --source mariadb --avro``) against ``registry``.

    Its own state dir, the same workload as ``mariadb_stack``; Debezium's keys and values are Apicurio's Avro
    in Confluent wire format. The values of ``mariadb_stack`` (``converter`` is ``avro``) plus ``registry.url``
    and ``schema.registry.url``. Always ``down`` at the end (the registry is the fixture's: not stopped).
    """
    with _mariadb_stack_up("e2e-mariadb-avro-", "--avro", env={"REGISTRY_URL": registry["registry.url"]}) as values:
        assert values.get("converter") == "avro", values
        assert values.get("schema.registry.url") == registry["schema.registry.url"], values
        yield values


@pytest.fixture(scope="session")
def mariadb_stack_ctl(mariadb_stack: dict[str, str]) -> StackCtl:
    """``mariadb_stack_ctl("restart-debezium")``: another stack command on the MariaDB stack; its stdout."""
    return _ctl(Path(mariadb_stack["state_dir"]))


@pytest.fixture
def mariadb(mariadb_stack: dict[str, str]) -> Iterator[Any]:
    """An autocommit PyMySQL connection to the MariaDB stack's database, in UTC.

    A module may override ``mariadb_stack`` (``test_mariadb_avro_e2e`` does, with ``mariadb_avro_stack``).
    """
    conn = connect_mariadb(mariadb_stack["mariadb"])
    try:
        yield conn
    finally:
        conn.close()


@pytest.fixture(params=["postgres", "mariadb"])
def mirror_source(request: pytest.FixtureRequest) -> MirrorSource:
    """The source database a mirror test runs against, one per source; a module picks its own with
    ``pytest.mark.parametrize("mirror_source", ["mariadb"], indirect=True)``.

    ``postgres`` is the ``stack`` fixture's database, ``mariadb`` the ``mariadb_stack``'s (a module's override
    of ``mariadb_stack`` counts) through the ``mariadb`` connection.
    """
    if request.param == "postgres":
        return postgres_source(request.getfixturevalue("stack"))
    return mariadb_source(request.getfixturevalue("mariadb_stack"), request.getfixturevalue("mariadb"))
