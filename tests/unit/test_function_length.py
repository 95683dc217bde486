"""Functions stay short: at most 60 lines from ``def`` to the last line (docstring included), in all of ``connector/``.

A function that needs more does several things; split it into named steps. The allow-list below only shrinks:
an entry whose function got short (or gone) fails too, so it is removed with the change that shortens it.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "connector"
MAX_LINES = 60

#: ``path:qualified name`` of the functions still longer than ``MAX_LINES``. Only ever remove entries.
ALLOWED = {
    "stream/job.py:_start_up",
    "stream/preflight.py:check_kafka",
}


def _function_lengths() -> dict[str, int]:
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, where: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                lengths[f"{where}:{name}"] = (child.end_lineno or child.lineno) - child.lineno + 1
                visit(child, where, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, where, f"{prefix}{child.name}.")
            else:
                visit(child, where, prefix)

    for path in sorted(PACKAGE.rglob("*.py")):
        visit(ast.parse(path.read_text(), str(path)), path.relative_to(PACKAGE).as_posix(), "")
    return lengths


def test_no_function_is_longer_than_60_lines() -> None:
    lengths = _function_lengths()
    assert len(lengths) > 100  # the walk sees the package
    too_long = {name: n for name, n in lengths.items() if n > MAX_LINES and name not in ALLOWED}
    assert too_long == {}, f"split these into named steps (at most {MAX_LINES} lines each): {too_long}"


def test_the_allow_list_only_holds_functions_still_too_long() -> None:
    lengths = _function_lengths()
    stale = sorted(name for name in ALLOWED if lengths.get(name, 0) <= MAX_LINES)
    assert stale == [], f"now at most {MAX_LINES} lines (or gone): remove them from ALLOWED: {stale}"
