"""The full local stack (Postgres -> Debezium/Kafka Connect -> Kafka) from ``deploy/local/stack.sh``.

``stack`` is module-scoped: each e2e test module gets a fresh stack in a temporary ``STATE_DIR``, with
the workload schema and ``SNAPSHOT_ROWS`` rows per table loaded through ``--init-sql`` *before* the
Debezium connector is registered, so those rows arrive as snapshot reads (``op=r``). ``down`` always
runs when the module is done. Set ``E2E_KEEP_STATE=1`` to keep the state directory (logs) afterwards.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e import workload

REPO_ROOT = Path(__file__).resolve().parents[2]
STACK_SH = REPO_ROOT / "deploy" / "local" / "stack.sh"

SNAPSHOT_ROWS = 20
SNAPSHOT_SEED = 1
# A cold start may install Postgres (apt-get) and fetch the jars from Maven Central.
UP_TIMEOUT_S = 1200
DOWN_TIMEOUT_S = 180
PRINTED_KEYS = ("postgres", "bootstrap.servers", "topics", "connect", "connector")

StackCtl = Callable[..., str]


def _run(state_dir: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run stack.sh with this STATE_DIR; its stderr is appended to STATE_DIR/stack-sh.log."""
    env = dict(os.environ, STATE_DIR=str(state_dir))
    with open(state_dir / "stack-sh.log", "a", encoding="utf-8") as err:
        return subprocess.run(
            ["bash", str(STACK_SH), *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            timeout=timeout,
            check=False,
        )


def _parse(stdout: str) -> dict[str, str]:
    values = dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)
    missing = [k for k in PRINTED_KEYS if k not in values]
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


@pytest.fixture(scope="module")
def stack_state_dir() -> Iterator[Path]:
    # Not tmp_path: pytest makes its temp dirs 0700, and Postgres runs as another user when we are root.
    state_dir = Path(tempfile.mkdtemp(prefix="e2e-stack-"))
    state_dir.chmod(0o755)
    yield state_dir
    if os.environ.get("E2E_KEEP_STATE") != "1":
        shutil.rmtree(state_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def stack(stack_state_dir: Path) -> Iterator[dict[str, str]]:
    """Bring the stack up; return the printed values plus ``state_dir``. Always ``down`` at the end."""
    init_sql = stack_state_dir / "init.sql"
    init_sql.write_text(workload.init_sql(SNAPSHOT_ROWS, SNAPSHOT_SEED), encoding="utf-8")
    try:
        try:
            result = _run(stack_state_dir, "up", "--init-sql", str(init_sql), timeout=UP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"stack.sh up timed out after {UP_TIMEOUT_S}s:\n{_log_tail(stack_state_dir)}")
        if result.returncode != 0:
            pytest.fail(f"stack.sh up failed (exit {result.returncode}):\n{_log_tail(stack_state_dir)}")
        values = _parse(result.stdout)
        values["state_dir"] = str(stack_state_dir)
        yield values
    finally:
        down = _run(stack_state_dir, "down", timeout=DOWN_TIMEOUT_S)
        left = _our_processes(stack_state_dir)
        if down.returncode != 0 or left:
            pytest.fail(
                f"stack.sh down failed (exit {down.returncode}), still running: {left}\n{_log_tail(stack_state_dir)}"
            )


@pytest.fixture(scope="module")
def stack_ctl(stack: dict[str, str]) -> StackCtl:
    """``stack_ctl("restart-debezium")``: run another stack.sh command on this stack; return its stdout."""
    state_dir = Path(stack["state_dir"])

    def ctl(*args: str, timeout: float = UP_TIMEOUT_S) -> str:
        result = _run(state_dir, *args, timeout=timeout)
        if result.returncode != 0:
            msg = f"stack.sh {' '.join(args)} failed (exit {result.returncode}):\n{_log_tail(state_dir)}"
            raise RuntimeError(msg)
        return result.stdout

    return ctl
