"""Fixtures for the storage suites: the DFS test double and a ``storage`` fixture over both backends."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from connector.storage.base import Storage
from connector.storage.local import LocalStorage
from tests.support.dfs_server import DfsTestServer, make_onelake_storage

BACKENDS = ["local", "onelake"]


@pytest.fixture(scope="session")
def dfs_server() -> Iterator[DfsTestServer]:
    """One fault-free DFS test double for the session; tests isolate themselves by root folder."""
    with DfsTestServer() as server:
        yield server


@pytest.fixture
def faulty_dfs_server() -> Iterator[DfsTestServer]:
    """A DFS test double of the test's own, so fault plans and counters never leak between tests."""
    with DfsTestServer(seed=20240917) as server:
        yield server


def unique_root() -> str:
    """A landing-zone root in a fresh item, shaped like a real one."""
    return f"{uuid.uuid4().hex[:12]}.MountedRelationalDatabase/Files/LandingZone"


@pytest.fixture(params=BACKENDS)
def storage(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Storage]:
    """The same empty landing zone, on local disk and on OneLake (the DFS test double)."""
    if request.param == "local":
        yield LocalStorage(tmp_path_factory.mktemp("landing"))
        return
    server: DfsTestServer = request.getfixturevalue("dfs_server")
    backend = make_onelake_storage(server, unique_root())
    try:
        yield backend
    finally:
        backend.close()
