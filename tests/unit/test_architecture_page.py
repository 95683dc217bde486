"""docs/architecture.md's rooms table names every module of ``connector/`` (issue 53: the page stays true).

Each package has one row (its first cell `` `connector/<package>/` ``) that names each of its modules as
`` `file.py` `` (a sub-package's modules in the same row, e.g. ``onelake/``'s in ``storage/``'s); a module at the
top of ``connector/`` is named as `` `file.py` `` in any row. A module added, moved or renamed without its row
fails here, with the row it belongs in.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "connector"
PAGE = ROOT / "docs" / "architecture.md"


def _rooms_rows() -> dict[str, str]:
    """The rooms table's rows by their first cell (`` `connector/audit/` `` → the row's text)."""
    text = PAGE.read_text(encoding="utf-8")
    section = text[text.index("## Rooms") : text.index("<!-- end of Rooms -->")]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`connector/"):
            rows[cells[0]] = line
    return rows


def _modules() -> list[Path]:
    return sorted(path.relative_to(PACKAGE) for path in PACKAGE.rglob("*.py") if path.name != "__init__.py")


def test_every_package_has_a_row_naming_each_of_its_modules() -> None:
    rows = _rooms_rows()
    assert len(rows) > 10, "the rooms table was not found in docs/architecture.md"
    everything = "\n".join(rows.values())
    missing: list[str] = []
    for module in _modules():
        named = f"`{module.name}`"
        if len(module.parts) == 1:
            if named not in everything and f"`connector/{module.name}`" not in everything:
                missing.append(f"{module} (in any row)")
            continue
        room = f"`connector/{module.parts[0]}/`"
        if named not in rows.get(room, ""):
            missing.append(f"{module} (in the row {room})")
    assert not missing, "docs/architecture.md's rooms table does not name: " + ", ".join(missing)


def test_every_row_names_a_package_that_exists() -> None:
    gone = [
        cell for cell in _rooms_rows() for path in [ROOT / re.sub(r"[`*]", "", cell.split(",")[0])] if not path.exists()
    ]
    assert not gone, f"rows for packages or modules that no longer exist: {gone}"
