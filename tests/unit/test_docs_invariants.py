"""Every "invariant N" in the code, the tests and the docs is an item of the numbered list in docs/guarantees.md."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUARANTEES = ROOT / "docs" / "guarantees.md"


def _listed() -> set[int]:
    """The numbers of the list under ``## Invariants``."""
    section = GUARANTEES.read_text().split("## Invariants", 1)[1].split("\n## ", 1)[0]
    return {int(number) for number in re.findall(r"^(\d+)\. ", section, re.MULTILINE)}


def test_the_list_is_numbered_without_a_gap() -> None:
    listed = _listed()
    assert listed and listed == set(range(1, max(listed) + 1))


def test_every_cited_invariant_is_in_the_list() -> None:
    listed = _listed()
    cited = []
    for folder in ("connector", "tests", "docs", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in (".py", ".md") or not path.is_file():
                continue
            for number in re.findall(r"\binvariants? (\d+)\b", path.read_text(), re.IGNORECASE):
                cited.append((str(path.relative_to(ROOT)), int(number)))
    assert cited, "no citation found: the pattern is wrong"
    assert [(path, number) for path, number in cited if number not in listed] == []
