"""Storage URLs are parsed in ``connector.storage`` only, once per setting (issue 53).

A landing zone, checkpoint, dead-letter or monitoring folder is a ``StorageLocation``: its URL is parsed once, when
the setting becomes a location, and the location answers what callers need (the item's ``Tables`` folder, a folder
beside it, containment). These checks read the source, so a module that splits a storage URL by hand again, or
parses one a second time, fails here rather than in a OneLake form nobody tried.
"""

from __future__ import annotations

import ast
import pickle
from collections.abc import Iterator
from pathlib import Path

import pytest

from connector.storage.location import StorageLocation
from connector.storage.onelake import location as onelake_location

PACKAGE = Path(__file__).resolve().parents[2] / "connector"
STORAGE = PACKAGE / "storage"

#: Modules outside storage that parse URLs which are no storage location, and which URL that is.
OTHER_URLS = {
    "secrets.py": "redact_url: any URL in a log line (databases, brokers, registries; storage uses it too)",
    "operate/connect_rest.py": "the Kafka Connect REST URL",
    "readback/database_mysql.py": "the MySQL database URL",
}

_URL_PARSERS = frozenset({"urlparse", "urlsplit"})
_SPLITS = frozenset({"split", "rsplit", "partition", "rpartition"})


def _modules(outside_storage: bool = True) -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        if outside_storage and STORAGE in path.parents:
            continue
        yield path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text(), str(path))


def _url_parser_uses(tree: ast.Module) -> list[int]:
    """Lines importing ``urlparse`` / ``urlsplit`` from ``urllib.parse``, or calling ``urllib.parse.<them>``."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "urllib.parse":
            lines += [node.lineno for alias in node.names if alias.name in _URL_PARSERS]
        elif isinstance(node, ast.Attribute) and node.attr in _URL_PARSERS:
            lines.append(node.lineno)
    return lines


def _calls_of(tree: ast.Module, name: str) -> list[int]:
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Name) and node.func.id == name)
            or (isinstance(node.func, ast.Attribute) and node.func.attr == name)
        )
    ]


def _mentions_url(node: ast.AST, tainted: set[str]) -> bool:
    """Whether ``node`` reads a URL: a name or attribute called ``*url*``, or a name assigned from one."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.Name) and ("url" in inner.id.lower() or inner.id in tainted):
            return True
        if isinstance(inner, ast.Attribute) and "url" in inner.attr.lower():
            return True
    return False


def _hand_splits(tree: ast.Module) -> list[int]:
    """Lines splitting a URL at ``/`` (or ``://``) by hand, following names assigned from a URL in each function."""
    lines = []
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        tainted: set[str] = set()
        for node in ast.walk(function):
            if isinstance(node, ast.Assign) and _mentions_url(node.value, tainted):
                tainted |= {t.id for target in node.targets for t in ast.walk(target) if isinstance(t, ast.Name)}
        for node in ast.walk(function):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _SPLITS):
                continue
            separator = node.args[0] if node.args else None
            if (
                isinstance(separator, ast.Constant)
                and isinstance(separator.value, str)
                and "/" in separator.value
                and _mentions_url(node.func.value, tainted)
            ):
                lines.append(node.lineno)
    return lines


def test_no_module_outside_storage_parses_a_storage_url_with_urllib() -> None:
    found = {name: lines for name, tree in _modules() if (lines := _url_parser_uses(tree))}
    assert {name: lines for name, lines in found.items() if name not in OTHER_URLS} == {}
    assert set(OTHER_URLS) <= set(found), "a module listed in OTHER_URLS no longer parses a URL: drop it"


def test_no_module_outside_storage_splits_a_url_by_hand() -> None:
    found = {name: lines for name, tree in _modules() if (lines := _hand_splits(tree))}
    assert found == {}


def test_parse_location_has_one_caller_the_location_of_a_setting() -> None:
    callers = {
        name: lines for name, tree in _modules(outside_storage=False) if (lines := _calls_of(tree, "parse_location"))
    }
    assert len(callers.pop("storage/location.py", [])) == 1
    assert callers == {}


def test_the_checks_see_a_hand_split_and_a_second_parse() -> None:
    """The readers catch the forms issue 53 removed: a split through a local name, ``urllib.parse.urlsplit``."""
    source = (
        "import urllib.parse\n"
        "def beside(landing_zone_url):\n"
        "    stripped = landing_zone_url.rstrip('/')\n"
        "    head, _, last = stripped.rpartition('/')\n"
        "    return urllib.parse.urlsplit(head)\n"
    )
    tree = ast.parse(source)
    assert _hand_splits(tree) == [4]
    assert _url_parser_uses(tree) == [5]
    assert _calls_of(ast.parse("from x import parse_location\nparse_location(u)\n"), "parse_location") == [2]


ONELAKE = "https://onelake.dfs.fabric.microsoft.com/ws/item.MountedRelationalDatabase/Files/LandingZone"


def test_a_location_is_parsed_once_and_opened_where_it_travels_without_parsing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    parse = onelake_location.parse_location

    def counting(url: str) -> onelake_location.OneLakeLocation:
        calls.append(url)
        return parse(url)

    monkeypatch.setattr(onelake_location, "parse_location", counting)
    location = StorageLocation(ONELAKE)
    travelled = pickle.loads(pickle.dumps(location))  # as an executor's task receives it
    storage = travelled.open()
    storage.close()
    assert travelled.address == location.address is not None
    assert calls == [ONELAKE]
