"""Modules stay small: at most 450 lines each, in all of ``connector/`` (issue 53).

A module that needs more holds several concerns; split it along them, one concern per module.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "connector"
MAX_LINES = 450


def _module_lines() -> dict[str, int]:
    return {
        path.relative_to(PACKAGE).as_posix(): len(path.read_text().splitlines())
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def test_no_module_is_longer_than_450_lines() -> None:
    lines = _module_lines()
    assert len(lines) > 100  # the walk sees the package
    too_long = {name: n for name, n in sorted(lines.items()) if n > MAX_LINES}
    listing = ", ".join(f"{name} ({n} lines)" for name, n in too_long.items())
    assert not too_long, f"split these along their concerns (at most {MAX_LINES} lines each): {listing}"
