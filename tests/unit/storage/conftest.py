"""Fixtures for the storage suites: the DFS test double and a ``storage`` fixture over every backend.

``storage`` runs the contract against local disk, against ``OneLakeStorage`` on the DFS test double,
and, opt-in, against a real OneLake / ADLS Gen2 folder: set ``ONELAKE_TEST_URL`` to a scratch folder
(a Lakehouse ``Files/...`` folder, not a live landing zone: each test creates and deletes a
``contract-<id>`` folder there) and ``ONELAKE_TEST_CREDENTIAL`` to a credential kind (default
``default``, with the usual ``AZURE_*`` variables).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from connector.storage.base import Storage
from connector.storage.local import LocalStorage
from connector.storage.onelake import open_onelake, parse_location
from tests.support.dfs_server import DfsTestServer, make_onelake_storage

BACKENDS = ["local", "onelake", "onelake-live"]


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
    """The same empty landing zone on each backend."""
    if request.param == "local":
        yield LocalStorage(tmp_path_factory.mktemp("landing"))
        return
    if request.param == "onelake-live":
        yield from _live_storage()
        return
    server: DfsTestServer = request.getfixturevalue("dfs_server")
    backend = make_onelake_storage(server, unique_root())
    try:
        yield backend
    finally:
        backend.close()


def _live_storage() -> Iterator[Storage]:
    url = os.environ.get("ONELAKE_TEST_URL", "").rstrip("/")
    if not url:
        pytest.skip("live OneLake run: set ONELAKE_TEST_URL (a scratch folder) and credentials")
    kind = os.environ.get("ONELAKE_TEST_CREDENTIAL", "default")
    folder = f"contract-{uuid.uuid4().hex[:12]}"
    parent = open_onelake(parse_location(url), kind)
    backend = open_onelake(parse_location(f"{url}/{folder}"), kind)
    try:
        yield backend
    finally:
        backend.close()
        parent.delete_tree(folder)
        parent.close()
