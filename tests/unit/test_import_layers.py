"""The floor plan holds: imports only go down the layers, and no module imports itself back through others.

Layers, top to bottom (a module may import its own room and anything on a lower layer):
``__main__`` → ``commands`` → ``stream`` → ``audit`` → ``readback``, ``mirror_writer`` → ``sink``, ``healing``,
``debezium_control`` → ``operate``, ``spark`` → ``fabric``, ``kafka``, ``deadletter`` → ``publish`` → ``collect`` →
``landing_zone`` → ``debezium``, ``kafka_client``, ``record_columns`` → ``config``, ``kafka_token`` → ``storage`` →
``secrets``, ``kcat`` → ``errors``, ``events``, ``early_stop``. Every import counts, also those
inside functions.

A room is a package. A concern whose model a lower layer needs keeps that model in the lower room: the audit's
settings are a section of ``MirrorSettings`` (``config/audit.py``), the delete rows it asks for a slice the sink
stages (``publish/key_deletes.py``), and the table status takes each table's last audit as the words ``tables``
shows, read by the command above it. The circle check follows what Python runs, each import of another package's
module through that package's face too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "connector"

LAYERS: dict[str, int] = {
    "connector": 0,  # the package's face: the version
    "errors": 0,
    "events": 0,
    "early_stop": 0,  # the stop signals of python -m connector, before any import (stdlib only)
    "secrets": 1,
    "kcat": 1,
    "storage": 2,
    "config": 3,
    # Entra ID tokens for Kafka: every client's builder, the executors' readers (collect) included, needs them.
    "kafka_token": 3,
    "debezium": 4,
    "kafka_client": 4,
    "record_columns": 4,
    "landing_zone": 5,  # the landing-zone contract: layout (folders, file names) and metadata
    "collect": 6,
    "publish": 7,
    # The Kafka room: planning, reads over collect's range reader, the offsets in Spark's checkpoint (which name the
    # ledger's published batches) and a batch's ranges. Its Entra ID tokens are ``kafka_token``, lower.
    "kafka": 8,
    "deadletter": 8,  # poison records out: the writer interface, the batch's step, the folder and Kafka outputs
    "fabric": 8,  # Fabric's REST API: the client, the database's and tables' status, init
    "operate": 9,
    "spark": 9,  # Spark and its workers: the session, its sources, JVM options, class archive, executors' slices
    "sink": 10,
    "healing": 10,  # records Kafka no longer holds, resets, resume, a failed query's cause
    "debezium_control": 10,  # Debezium's control channel: snapshot signals, notifications, settings, status
    "readback": 11,
    "mirror_writer": 11,  # the composition root of run and convert: fence, storages, ledger, sink
    "audit": 12,  # the continuous audit: comparison, its loop, its re-read signal
    "stream": 13,  # the job's loop: start-up, the query, batches, progress, stop
    "commands": 14,
    "__main__": 15,
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The connector modules ``path`` imports (``from connector import x`` counts as ``connector.x``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and target.startswith("connector"):
                found.add(target)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph = {name: _imports(name, path, known) for name, path in modules.items()}
    # ``from connector.x import y`` also names the package ``connector.x``: its face is not an edge of its own.
    return {
        name: {t for t in targets if not name.startswith(t + ".") and t != "connector"}
        | ({"connector"} if "connector" in targets and name != "connector" else set())
        for name, targets in graph.items()
    }


def _layer(module: str) -> tuple[str, int]:
    """The module's room (its package) and that room's layer."""
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "connector"
    if top not in LAYERS:
        pytest.fail(f"{module}: its package {top!r} has no layer in this test; give it one")
    return top, LAYERS[top]


def test_every_import_goes_down_a_layer_or_stays_in_its_package() -> None:
    upward = []
    for module, targets in _graph().items():
        own, level = _layer(module)
        for target in targets:
            other, other_level = _layer(target)
            if other != own and other_level >= level:
                upward.append(f"{module} ({own}, layer {level}) imports {target} ({other}, layer {other_level})")
    assert upward == []


def _runtime_graph() -> dict[str, set[str]]:
    """``_graph`` with the faces Python runs: importing ``connector.config.mirror`` runs ``config/__init__``."""
    graph = _graph()
    for module, targets in graph.items():
        for target in list(targets):
            face = target.rpartition(".")[0]
            while face not in ("", "connector"):
                if module != face and not module.startswith(face + "."):
                    targets.add(face)
                face = face.rpartition(".")[0]
    return graph


def test_no_import_circle() -> None:
    graph = _runtime_graph()
    circles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the path, 2 done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                circles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert [" -> ".join(c) for c in circles] == []


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    """The graph reader finds function-level imports, so a lazy upward import cannot hide."""
    source = tmp_path / "probe.py"
    source.write_text("def f():\n    from connector.sink import MirrorSink\n    return MirrorSink\n")
    assert _imports("connector.publish.probe", source, set(_modules())) == {"connector.sink"}
