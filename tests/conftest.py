"""Fixtures shared by every suite: the DFS test double, and a landing zone on each backend.

A test that takes ``landing`` (or ``make_landing``) runs twice: against a local folder and against
``OneLakeStorage`` on ``DfsTestServer``, the ADLS Gen2 **test double** (see tests/support/dfs_server.py).
The test reads the landing zone back through ``landing.storage`` (what ``validate`` and ``replay``
take), and hands ``landing.url`` to the command line exactly as a user would. For the OneLake backend
the environment is that of an Azure host with a managed identity (App Service style, played by the
double) whose CA the process trusts, so the CLI, in this process or in a subprocess, authenticates
through azure-identity's own code path: the connector has no switch for tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from connector.storage.local import LocalStorage
from connector.storage.onelake import OneLakeStorage
from tests.support.dfs_server import (
    OTHER_IDENTITY_VARIABLES,
    DfsTestServer,
    make_onelake_storage,
    managed_identity_environment,
)
from tests.support.landing import WORKSPACE, Landing, unique_item_root

LANDING_BACKENDS = ("local", "onelake")


@pytest.fixture(scope="session")
def dfs_server() -> Iterator[DfsTestServer]:
    """One fault-free DFS test double for the session; tests isolate themselves by root folder."""
    with DfsTestServer() as server:
        yield server


@pytest.fixture(params=LANDING_BACKENDS)
def landing_backend(request: pytest.FixtureRequest) -> str:
    """The backend of the test's landing zones."""
    return str(request.param)


@pytest.fixture
def make_landing(
    request: pytest.FixtureRequest,
    landing_backend: str,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Callable[[], Landing]]:
    """Return ``make_landing()``: a new, empty landing zone on the test's backend at each call."""
    opened: list[OneLakeStorage] = []
    server: DfsTestServer | None = None
    if landing_backend == "onelake":
        server = request.getfixturevalue("dfs_server")
        for name in OTHER_IDENTITY_VARIABLES:
            monkeypatch.delenv(name, raising=False)
        for name, value in managed_identity_environment(server).items():
            monkeypatch.setenv(name, value)

    def make() -> Landing:
        if server is None:
            root = tmp_path_factory.mktemp("landing-zone")
            return Landing("local", LocalStorage(root), str(root))
        item_root = unique_item_root()
        storage = make_onelake_storage(server, item_root, filesystem=WORKSPACE)
        opened.append(storage)
        # Fabric creates Files/LandingZone with the mirrored database; `run` refuses a landing zone without it.
        storage.check(create_root=True, probe_write=False)
        return Landing("onelake", storage, server.location_url(WORKSPACE, item_root))

    yield make
    for storage in opened:
        storage.close()


@pytest.fixture
def landing(make_landing: Callable[[], Landing]) -> Landing:
    """An empty landing zone on each backend (the test runs once per backend)."""
    return make_landing()
