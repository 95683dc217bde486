"""Functions stay short: at most 60 lines from ``def`` to the last line (docstring included), in all of ``connector/``.

A function that needs more does several things; split it into named steps.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "connector"
MAX_LINES = 60


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
    too_long = {name: n for name, n in lengths.items() if n > MAX_LINES}
    assert too_long == {}, f"split these into named steps (at most {MAX_LINES} lines each): {too_long}"
