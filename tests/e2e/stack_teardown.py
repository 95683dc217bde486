"""How the suite takes a stack down: at once (``stack.sh down --kill``), as its state dir is deleted next.

A graceful ``down`` spends about 7 s per stack stopping Connect, Kafka and the database cleanly, for state
nobody reads again. ``E2E_KEEP_STATE=1`` keeps the state dir for a look afterwards, and then stops it cleanly.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
STACK_SH = REPO_ROOT / "deploy" / "local" / "stack.sh"


def keep_state() -> bool:
    return os.environ.get("E2E_KEEP_STATE") == "1"


def down_command() -> tuple[str, ...]:
    """``stack.sh``'s arguments that take a stack of the suite down."""
    return ("down",) if keep_state() else ("down", "--kill")


def down_and_delete(state_dir: Path) -> None:
    """Take the stack of ``state_dir`` down and delete its state (its Kafka and database: about 1.5 GB)."""
    subprocess.run(
        ["bash", str(STACK_SH), *down_command()],
        env=dict(os.environ, STATE_DIR=str(state_dir)),
        capture_output=True,
        timeout=300,
        check=False,
    )
    if not keep_state():
        shutil.rmtree(state_dir, ignore_errors=True)
