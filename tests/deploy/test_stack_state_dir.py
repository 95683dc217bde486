"""A state dir holds one source's stack: stack.sh / stack-mariadb.sh refuse the other source's state dir.

No stack starts here: the refusal comes before anything is installed, started or written.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

LOCAL = Path(__file__).resolve().parents[2] / "deploy" / "local"


def _run(script: str, state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, STATE_DIR=str(state_dir))
    return subprocess.run(  # noqa: S603 - the repository's own scripts
        ["bash", str(LOCAL / script), *args],  # noqa: S607
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _state(tmp_path: Path, source: str, *, recorded: bool) -> Path:
    state = tmp_path / f"state-{source}"
    if recorded:  # what `up` writes now
        state.mkdir()
        (state / "stack.env").write_text(f"SOURCE={source}\n")
    else:  # a state dir from before the record: known by its database folder
        (state / source).mkdir(parents=True)
    return state


@pytest.mark.parametrize("recorded", [True, False])
@pytest.mark.parametrize(
    ("held", "script", "args", "wanted"),
    [
        ("postgres", "stack.sh", ("up", "--source", "mariadb"), "mariadb"),
        ("mariadb", "stack.sh", ("up",), "postgres"),
        ("mariadb", "stack.sh", ("up", "--source", "postgres"), "postgres"),
        ("postgres", "stack-mariadb.sh", ("up",), "mariadb"),
        ("postgres", "stack-mariadb.sh", ("down",), "mariadb"),
    ],
)
def test_the_other_sources_state_dir_is_refused(
    tmp_path: Path, held: str, script: str, args: tuple[str, ...], wanted: str, *, recorded: bool
) -> None:
    state = _state(tmp_path, held, recorded=recorded)
    before = sorted(p.relative_to(state) for p in state.rglob("*"))
    result = _run(script, state, *args)
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    errors = [line for line in result.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1, result.stderr
    assert f"STATE_DIR {state} holds the {held} stack" in errors[0]
    assert f"for {wanted} set another STATE_DIR" in errors[0]
    assert sorted(p.relative_to(state) for p in state.rglob("*")) == before  # nothing written


def test_an_unknown_source_is_refused(tmp_path: Path) -> None:
    result = _run("stack.sh", tmp_path / "state", "up", "--source", "oracle")
    assert result.returncode == 1
    assert "--source is postgres or mariadb, got 'oracle'" in result.stderr
