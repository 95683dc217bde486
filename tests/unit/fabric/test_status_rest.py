"""Reading Fabric's per-table and database status from its REST API (against a local test double), and its tokens."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from connector.config import load_settings
from connector.errors import ConfigError
from connector.fabric.status import open_fabric_status
from connector.fabric.status_reader import FabricStatusReader, FabricTableStatus
from connector.fabric.status_rest import FABRIC_API_SCOPE, RestFabricStatus, identity_token, static_token
from tests.support.fabric_api_double import MIRRORED_DATABASE_ID, TOKEN, WORKSPACE_ID, FabricApiDouble


@pytest.fixture
def fabric() -> Iterator[FabricApiDouble]:
    with FabricApiDouble(page_size=2) as double:
        yield double


def rest_reader(double: FabricApiDouble, **overrides: Any) -> FabricStatusReader:
    settings = load_settings(
        None,
        **{
            "fabric_status.kind": "rest",
            "fabric_status.api_url": double.api_url,
            "fabric_status.workspace_id": WORKSPACE_ID,
            "fabric_status.mirrored_database_id": MIRRORED_DATABASE_ID,
            "fabric_status.bearer_token": TOKEN,
            "fabric_status.request_timeout_s": 2,
            **overrides,
        },
    )
    reader = open_fabric_status(settings)
    assert isinstance(reader, RestFabricStatus)
    return reader


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "connector.fabric.status" and r.levelno >= logging.WARNING]


def test_rest_reads_every_page_with_the_bearer_token(fabric: FabricApiDouble) -> None:
    for i in range(5):
        fabric.set_table("public", f"t{i}", processed_rows=i * 10, processed_bytes=i * 100)
    tables = rest_reader(fabric).tables()
    assert tables is not None
    assert sorted(tables) == [f"public.t{i}" for i in range(5)]
    assert tables["public.t3"] == FabricTableStatus(
        table="public.t3",
        state="Replicating",
        processed_rows=30,
        processed_bytes=300,
        last_sync="2024-10-08T05:07:11.0663362Z",
        error=None,
    )
    calls = fabric.table_calls()
    assert [c.continuation_token for c in calls] == [None, "page-2", "page-4"]
    assert {c.authorization for c in calls} == {f"Bearer {TOKEN}"}
    assert {c.method for c in calls} == {"POST"}


def test_rest_a_removed_table_is_missing_and_a_failed_one_says_why(fabric: FabricApiDouble) -> None:
    fabric.set_table("public", "customers", processed_rows=7)
    fabric.set_table("sales", "orders", "Failed", error=("SchemaChange", "column type changed"))
    fabric.set_table("sales", "lines")
    reader = rest_reader(fabric)
    first = reader.tables()
    assert first is not None and set(first) == {"public.customers", "sales.orders", "sales.lines"}
    assert first["sales.orders"].failed and first["sales.orders"].error == "SchemaChange: column type changed"
    assert not first["public.customers"].failed

    fabric.remove_table("sales", "lines")
    second = reader.tables()
    assert second is not None and "sales.lines" not in second and set(second) == {"public.customers", "sales.orders"}


def test_rest_an_empty_database_is_readable_and_empty(fabric: FabricApiDouble) -> None:
    assert rest_reader(fabric).tables() == {}


def test_rest_a_wrong_token_is_unreadable_with_one_warning(
    fabric: FabricApiDouble, caplog: pytest.LogCaptureFixture
) -> None:
    fabric.set_table("public", "customers")
    reader = rest_reader(fabric, **{"fabric_status.bearer_token": "not-the-token"})
    with caplog.at_level(logging.DEBUG, logger="connector.fabric.status"):
        assert reader.tables() is None
        assert reader.tables() is None  # same reason: no second warning
    [warning] = warnings_of(caplog)
    assert warning.exc_info is None
    message = warning.getMessage()
    assert fabric.tables_url in message and "HTTP 401 TokenExpired" in message
    assert "not-the-token" not in caplog.text


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        ("unavailable", "HTTP 503 ServiceUnavailable"),
        ("throttled", "HTTP 429 ServiceUnavailable: try again later (retry after 7s)"),
        ("malformed", "not JSON"),
        ("unknown item", "HTTP 404 ItemNotFound"),
    ],
)
def test_rest_failures_are_unreadable(
    fabric: FabricApiDouble, caplog: pytest.LogCaptureFixture, fault: str, expected: str
) -> None:
    overrides = {}
    if fault == "unavailable":
        fabric.unavailable_status = 503
    elif fault == "throttled":
        fabric.unavailable_status = 429
    elif fault == "malformed":
        fabric.malformed = True
    else:
        overrides["fabric_status.mirrored_database_id"] = "00000000-0000-0000-0000-000000000000"
    reader = rest_reader(fabric, **overrides)
    with caplog.at_level(logging.WARNING, logger="connector.fabric.status"):
        assert reader.tables() is None
    [warning] = warnings_of(caplog)
    assert expected in warning.getMessage() and warning.exc_info is None


def test_rest_a_stopped_service_is_unreadable_then_readable_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    double = FabricApiDouble().start()
    double.set_table("public", "customers")
    reader = rest_reader(double)
    assert reader.tables() is not None
    url = double.api_url
    double.stop()
    with caplog.at_level(logging.INFO, logger="connector.fabric.status"):
        assert reader.tables() is None
    [warning] = warnings_of(caplog)
    assert url in warning.getMessage() and "ConnectError" in warning.getMessage()


def test_rest_token_from_an_environment_reference(
    fabric: FabricApiDouble, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fabric.set_table("public", "customers")
    reader = rest_reader(fabric, **{"fabric_status.bearer_token": "${env:FABRIC_DOUBLE_TOKEN}"})
    monkeypatch.delenv("FABRIC_DOUBLE_TOKEN", raising=False)
    with caplog.at_level(logging.WARNING, logger="connector.fabric.status"):
        assert reader.tables() is None
    assert "FABRIC_DOUBLE_TOKEN, which is not set" in warnings_of(caplog)[0].getMessage()
    assert fabric.requests == []  # no request without a token
    monkeypatch.setenv("FABRIC_DOUBLE_TOKEN", TOKEN)
    tables = reader.tables()
    assert tables is not None and set(tables) == {"public.customers"}


def test_rest_repeated_continuation_token_is_unreadable(
    fabric: FabricApiDouble, caplog: pytest.LogCaptureFixture
) -> None:
    fabric.set_table("public", "customers")
    fabric.page_size = 0  # every page is empty and points at page-0 again: a service stuck in a loop
    reader = RestFabricStatus(fabric.api_url, WORKSPACE_ID, MIRRORED_DATABASE_ID, lambda: TOKEN)
    with caplog.at_level(logging.WARNING, logger="connector.fabric.status"):
        assert reader.tables() is None
    assert "same continuationToken twice" in warnings_of(caplog)[0].getMessage()
    assert len(fabric.table_calls()) == 2


@pytest.mark.parametrize(
    "url",
    ["http://fabric.example.com", "ftp://127.0.0.1", "http://127.0.0.1.evil.example:80", "api.fabric.microsoft.com"],
)
def test_api_url_must_not_send_the_token_in_clear_text(url: str) -> None:
    with pytest.raises(ConfigError, match="fabric_status.api_url"):
        load_settings(None, **{"fabric_status.api_url": url})


def test_api_url_accepts_https_and_loopback() -> None:
    for url in ("https://api.fabric.microsoft.com/", "http://127.0.0.1:8080", "http://localhost"):
        assert not load_settings(None, **{"fabric_status.api_url": url}).fabric_status.api_url.endswith("/")


def test_bearer_token_is_a_secret() -> None:
    settings = load_settings(None, **{"fabric_status.kind": "rest", "fabric_status.bearer_token": "s3cret"})
    assert "s3cret" not in repr(settings) and "s3cret" not in settings.model_dump_json()
    assert static_token(settings.fabric_status.bearer_token)() == "s3cret"  # type: ignore[arg-type]


def test_identity_token_is_scoped_to_the_fabric_api(monkeypatch: pytest.MonkeyPatch) -> None:
    from azure.core.credentials import AccessToken

    from connector.storage import credentials

    scopes: list[tuple[str, ...]] = []

    class FakeDefault:
        def __init__(self, **_: Any) -> None:
            pass

        def get_token(self, *requested: str, **_: Any) -> AccessToken:
            scopes.append(requested)
            return AccessToken("identity-token", 0)

    monkeypatch.setattr(credentials, "DefaultAzureCredential", FakeDefault)
    assert identity_token("default", "fabric_status.credential")() == "identity-token"
    assert scopes == [(FABRIC_API_SCOPE,)]
