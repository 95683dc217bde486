"""OneLake backend under failure: throttling, dropped connections, lost answers, denial, wrong URLs.

Drives the real ``azure-storage-file-datalake`` client against ``DfsTestServer`` (a test double of the
ADLS Gen2 DFS API). Backoff is milliseconds via ``FAST_RETRY``; nothing here asserts on wall time.
"""

from __future__ import annotations

import os
import pickle
import random
import traceback
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from azure.core.exceptions import ClientAuthenticationError, ResourceExistsError
from azure.identity import (
    CertificateCredential,
    ClientSecretCredential,
    DefaultAzureCredential,
    ManagedIdentityCredential,
    WorkloadIdentityCredential,
)
from azure.storage.filedatalake import FileSystemClient
from pydantic import SecretStr

from connector.storage import onelake, retry
from connector.storage.credentials import (
    STORAGE_SCOPE,
    CredentialConfig,
    StorageIdentity,
    StorageScopedCredential,
    build_credential,
    describe,
)
from connector.storage.errors import StorageAccessDenied, StorageError, StorageNotFound, StorageUnavailable
from connector.storage.onelake import OneLakeStorage, open_onelake
from connector.storage.onelake.location import OneLakeLocation, parse_location
from connector.storage.retry import RetrySettings, parse_retry_after, retry_delay
from tests.support.dfs_server import (
    FAST_RETRY,
    DfsTestServer,
    FakeTokenCredential,
    FaultPlan,
    fake_identity,
    iter_files,
    make_onelake_storage,
)

ROOT = "Sales.MountedRelationalDatabase/Files/LandingZone"
FS = "workspace"
SECRET = "s3cr3t-Value-That-Must-Never-Leak~42"
TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"
CLIENT = "1b2c3d4e-0000-4000-8000-123456789abc"

#: Enough retries that a 26% fault rate never exhausts them; short read timeout for "timeout" faults.
FAULTY_RETRY = replace(FAST_RETRY, max_retries=12, read_timeout=0.4)


def temporary_files(server: DfsTestServer) -> list[str]:
    return [p for p in iter_files(server, FS) if p.rsplit("/", 1)[-1].startswith("_tmp_")]


def wrapped(identity: StorageIdentity) -> object:
    """The azure-identity credential ``build_credential`` chose."""
    assert isinstance(identity.credential, StorageScopedCredential)
    return identity.credential.wrapped


def secret_identity() -> StorageIdentity:
    """A service-principal identity whose bearer token is SECRET (sent on every request)."""
    return StorageIdentity(
        FakeTokenCredential(token=SECRET), "client_secret", describe("client_secret", TENANT, CLIENT)
    )


# -- faults: the acceptance run ---------------------------------------------------------------------


def test_300_round_trips_survive_throttling_drops_timeouts_and_lost_answers(faulty_dfs_server: DfsTestServer) -> None:
    server = faulty_dfs_server
    storage = make_onelake_storage(server, ROOT, retry=FAULTY_RETRY)
    server.set_faults(
        FaultPlan(
            transient_rate=0.20,
            retry_after="0",
            drop_rate=0.03,
            timeout_rate=0.003,
            timeout_seconds=0.8,
            lose_response_rate=0.03,
        )
    )
    rng = random.Random(7)
    expected: dict[str, bytes] = {}
    for n in range(1, 301):
        data = rng.randbytes(rng.randrange(0, 4096))
        staged = f"_staging/batch-{n}.parquet"
        final = f"orders/{n:020d}.parquet"
        storage.create(staged, data)
        storage.rename_new(staged, final, size=len(data) if n % 2 else None)  # the publisher's way, and without
        expected[f"{ROOT}/{final}"] = data
    server.set_faults()

    stored = {p: server.file_bytes(FS, p) for p in iter_files(server, FS)}
    assert stored == expected  # every file present, correct, nothing else (no _tmp_, no staging)
    for fault in ("429", "503", "drop", "timeout", "lose_response"):
        assert server.injected[fault] > 0, f"{fault} was never injected: {server.injected}"
    assert server.injected["429"] + server.injected["503"] > 300


def test_existing_files_are_never_overwritten_under_faults(faulty_dfs_server: DfsTestServer) -> None:
    server = faulty_dfs_server
    storage = make_onelake_storage(server, ROOT, retry=FAULTY_RETRY)
    for n in range(1, 41):
        storage.create(f"t/{n:020d}.parquet", f"original {n}".encode())
    server.set_faults(transient_rate=0.2, drop_rate=0.05, lose_response_rate=0.1)
    for n in range(1, 41):
        with pytest.raises(FileExistsError):
            storage.create(f"t/{n:020d}.parquet", b"impostor")
        storage.create(f"_staging/{n}", b"impostor")
        with pytest.raises(FileExistsError):
            storage.rename_new(f"_staging/{n}", f"t/{n:020d}.parquet")
        storage.delete(f"_staging/{n}")
    server.set_faults()
    assert {p: server.file_bytes(FS, p) for p in iter_files(server, FS)} == {
        f"{ROOT}/t/{n:020d}.parquet": f"original {n}".encode() for n in range(1, 41)
    }
    assert server.injected["lose_response"] > 0


@pytest.mark.parametrize("size_known", [False, True], ids=["size-read", "size-given"])
@pytest.mark.parametrize("destination_first", [False, True], ids=["404-source-missing", "409-destination-exists"])
def test_a_rename_whose_answer_was_lost_is_success_not_conflict(destination_first: bool, size_known: bool) -> None:
    with DfsTestServer(rename_checks_destination_first=destination_first) as server:
        storage = make_onelake_storage(server, ROOT)
        storage.create("_staging/a", b"payload")
        server.set_faults(lose_response_rate=1.0, operations=frozenset({"rename"}), max_faults=1)
        storage.rename_new("_staging/a", "t/00000000000000000001.parquet", size=7 if size_known else None)
        assert server.injected["lose_response"] == 1
        assert storage.read_bytes("t/00000000000000000001.parquet") == b"payload"
        assert not storage.exists("_staging/a")

        server.injected.clear()
        server.set_faults(lose_response_rate=1.0, operations=frozenset({"rename"}), max_faults=1)
        storage.create("t/00000000000000000002.parquet", b"two")
        assert server.injected["lose_response"] == 1
        assert storage.read_bytes("t/00000000000000000002.parquet") == b"two"
        assert temporary_files(server) == []


@pytest.mark.parametrize("operation", ["create", "append", "flush", "delete"])
def test_lost_answers_of_upload_steps_are_retried_safely(faulty_dfs_server: DfsTestServer, operation: str) -> None:
    server = faulty_dfs_server
    storage = make_onelake_storage(server, ROOT)
    server.set_faults(lose_response_rate=1.0, operations=frozenset({operation}), max_faults=1)
    storage.create("t/f", b"content")
    storage.delete("t/f")
    storage.create("t/f", b"content again")
    assert server.injected["lose_response"] == 1
    assert storage.read_bytes("t/f") == b"content again"
    assert temporary_files(server) == []


def test_large_files_are_sent_in_several_appends_even_with_drops(
    faulty_dfs_server: DfsTestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(onelake.transfer, "_APPEND_CHUNK", 1000)
    server = faulty_dfs_server
    storage = make_onelake_storage(server, ROOT)
    data = os.urandom(10_500)
    server.set_faults(drop_rate=0.3, operations=frozenset({"append"}))
    storage.create("t/big.parquet", data)
    server.set_faults()
    assert storage.read_bytes("t/big.parquet") == data
    assert server.injected["drop"] > 0


# -- retry policy -----------------------------------------------------------------------------------


def test_retry_after_from_the_server_is_honoured(
    faulty_dfs_server: DfsTestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits: list[float] = []
    monkeypatch.setattr(retry, "time", SimpleNamespace(sleep=waits.append))
    server = faulty_dfs_server
    storage = make_onelake_storage(server, ROOT, retry=replace(FAST_RETRY, max_retry_after=60.0))
    storage.create("t/f", b"x")
    server.set_faults(transient_rate=1.0, retry_after="3", max_faults=2)
    assert storage.size("t/f") == 1
    assert server.injected["429"] + server.injected["503"] == 2
    assert len(waits) == 2 and all(w >= 3.0 for w in waits)


def test_retries_run_out_as_storage_unavailable(faulty_dfs_server: DfsTestServer) -> None:
    server = faulty_dfs_server
    storage = make_onelake_storage(server, ROOT, retry=replace(FAST_RETRY, max_retries=3))
    server.set_faults(transient_rate=1.0)
    with pytest.raises(StorageUnavailable) as info:
        storage.size("t/f")
    assert server.injected["429"] + server.injected["503"] == 4  # first attempt + 3 retries
    assert info.value.transient
    assert "t/f" in str(info.value) and "3 retries" in str(info.value)

    server.injected.clear()
    server.set_faults(drop_rate=1.0)
    with pytest.raises(StorageUnavailable):
        storage.create("t/f", b"x")


def test_parse_retry_after_forms() -> None:
    future = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert parse_retry_after({"Retry-After": "7"}) == 7.0
    assert parse_retry_after({"retry-after": "0.5"}) == 0.5
    assert 20.0 < (parse_retry_after({"Retry-After": future}) or 0) <= 30.0
    assert parse_retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    assert parse_retry_after({"x-ms-retry-after-ms": "250"}) == 0.25
    assert parse_retry_after({"retry-after-ms": "1500"}) == 1.5
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({}) is None


def test_retry_delay_grows_exponentially_with_jitter_and_respects_retry_after() -> None:
    settings = RetrySettings(initial_backoff=1.0, max_backoff=8.0, max_retry_after=60.0)
    rng = random.Random(1)
    for _ in range(100):
        assert 0.5 <= retry_delay(settings, 0, None, rng) <= 1.0
        assert 2.0 <= retry_delay(settings, 2, None, rng) <= 4.0
        assert 4.0 <= retry_delay(settings, 30, None, rng) <= 8.0
    assert retry_delay(settings, 0, 12.0, rng) == 12.0
    assert retry_delay(settings, 0, 3600.0, rng) == 60.0  # capped


# -- access denied ----------------------------------------------------------------------------------


def test_403_fails_fast_naming_path_and_identity_but_never_the_secret(faulty_dfs_server: DfsTestServer) -> None:
    server = faulty_dfs_server
    storage = make_onelake_storage(server, ROOT, identity=secret_identity())
    storage.create("_staging/s", b"x")
    server.set_faults(deny_all=True)
    operations: dict[str, Callable[[], object]] = {
        "create": lambda: storage.create("t/00000000000000000001.parquet", b"x"),
        "replace": lambda: storage.replace("_state/ledger.json", b"{}"),
        "read": lambda: storage.read_bytes("t/00000000000000000001.parquet"),
        "size": lambda: storage.size("t/00000000000000000001.parquet"),
        "list": lambda: storage.list_dir("t"),
        "rename_new": lambda: storage.rename_new("_staging/s", "t/00000000000000000001.parquet"),
        "delete": lambda: storage.delete("_staging/s"),
        "delete_tree": lambda: storage.delete_tree("t"),
        "check": storage.check,
    }
    for name, call in operations.items():
        with pytest.raises(StorageAccessDenied) as info:
            call()
        err = info.value
        text = "".join(traceback.format_exception(err))
        assert SECRET not in text, name
        assert f"client_secret (tenant {TENANT}, client id {CLIENT})" in str(err), name
        assert "AuthorizationPermissionMismatch" in str(err) and "Contributor" in str(err), name
        assert err.operation == name
    create_err = pytest.raises(StorageAccessDenied, operations["create"]).value
    assert f"{storage.url}/t/00000000000000000001.parquet" in str(create_err)
    assert create_err.path == "t/00000000000000000001.parquet"

    clone = pickle.loads(pickle.dumps(create_err))
    assert type(clone) is StorageAccessDenied and str(clone) == str(create_err) and clone.path == create_err.path

    server.injected.clear()
    with pytest.raises(StorageAccessDenied):
        storage.size("t/f")
    assert server.injected["403"] == 1  # not retried


class FailingTokenCredential:
    """TEST DOUBLE of a credential whose token request is refused by Microsoft Entra."""

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        raise ClientAuthenticationError(message="AADSTS7000215: Invalid client secret provided.\nTrace ID: 0")


def test_a_credential_that_cannot_get_a_token_fails_fast(dfs_server: DfsTestServer) -> None:
    identity = StorageIdentity(FailingTokenCredential(), "client_secret", describe("client_secret", TENANT, CLIENT))
    storage = make_onelake_storage(dfs_server, ROOT, identity=identity)
    before = sum(dfs_server.requests.values())
    with pytest.raises(StorageAccessDenied) as info:
        storage.create("t/f", b"x")
    assert "could not get a token" in str(info.value) and "AADSTS7000215" in str(info.value)
    assert f"client id {CLIENT}" in str(info.value)
    assert sum(dfs_server.requests.values()) == before  # nothing was sent without a token


# -- not found --------------------------------------------------------------------------------------


def test_missing_filesystem_fails_fast_with_a_hint(dfs_server: DfsTestServer) -> None:
    location = parse_location(dfs_server.location_url("no-such-workspace", ROOT))
    storage = OneLakeStorage(location, fake_identity(), FAST_RETRY, ca_bundle=dfs_server.ca_file)
    calls: dict[str, Callable[[], object]] = {
        "check": storage.check,
        "size": lambda: storage.size("t/f"),
        "list": lambda: storage.list_dir("t"),
        "read": lambda: storage.read_bytes("t/f"),
        "create": lambda: storage.create("t/f", b"x"),
        "delete": lambda: storage.delete("t/f"),
    }
    for name, call in calls.items():
        with pytest.raises(StorageNotFound) as info:
            call()
        assert "not found" in str(info.value) and "Check the URL" in str(info.value), name
        assert not info.value.transient


def test_onelake_not_found_hint_points_at_the_home_page(dfs_server: DfsTestServer) -> None:
    location = OneLakeLocation(dfs_server.url, "missing-workspace", ROOT, "onelake")
    storage = OneLakeStorage(location, fake_identity(), FAST_RETRY, ca_bundle=dfs_server.ca_file)
    with pytest.raises(StorageNotFound, match="workspace not found.*Home page"):
        storage.check()


def test_check_reports_a_missing_root_and_can_create_it(dfs_server: DfsTestServer) -> None:
    storage = make_onelake_storage(dfs_server, "ckpt.Lakehouse/Files/connector/checkpoint")
    with pytest.raises(StorageNotFound, match="folder not found"):
        storage.check()
    storage.check(create_root=True)
    storage.check()
    assert storage.list_dir("") == []  # the write probe cleaned up after itself


# -- housekeeping -----------------------------------------------------------------------------------


def test_cleanup_temporary_removes_only_stale_temporary_files(dfs_server: DfsTestServer) -> None:
    storage = make_onelake_storage(dfs_server, "cleanup.MountedRelationalDatabase/Files/LandingZone")
    storage.create("t/00000000000000000001.parquet", b"keep")
    storage.create("t/_tmp_crashed.part", b"stale")
    storage.create("s.schema/t2/_tmp_0123.part", b"stale")
    storage.create("t/_metadata.json", b"{}")
    assert storage.cleanup_temporary(older_than=timedelta(hours=1)) == []
    assert sorted(storage.cleanup_temporary()) == ["s.schema/t2/_tmp_0123.part", "t/_tmp_crashed.part"]
    assert [i.path for i in storage.list_dir("t")] == ["t/00000000000000000001.parquet", "t/_metadata.json"]
    assert storage.cleanup_temporary("missing") == []


def test_listing_follows_continuation_tokens() -> None:
    with DfsTestServer(list_page_size=3) as server:
        storage = make_onelake_storage(server, ROOT)
        for n in range(10):
            storage.create(f"t/{n:020d}.parquet", b"x")
        storage.create("t/_tmp_x.part", b"x")
        assert [i.path for i in storage.list_dir("t")] == [f"t/{n:020d}.parquet" for n in range(10)] + ["t/_tmp_x.part"]
        assert storage.cleanup_temporary() == ["t/_tmp_x.part"]


def test_filesystem_create_and_properties_on_the_test_double(dfs_server: DfsTestServer) -> None:
    client = FileSystemClient(
        dfs_server.url, "made-by-sdk", credential=FakeTokenCredential(), connection_verify=dfs_server.ca_file
    )
    with client:
        assert not client.exists()
        client.create_file_system()
        assert client.exists()
        assert client.get_file_system_properties().name == "made-by-sdk"
        with pytest.raises(ResourceExistsError):
            client.create_file_system()
        client.get_directory_client("a/b").create_directory()
        client.get_file_client("a/b/f").upload_data(b"via upload_data", overwrite=True)
        assert client.get_file_client("a/b/f").download_file().readall() == b"via upload_data"
        assert [p.name for p in client.get_paths()] == ["a", "a/b", "a/b/f"]


def test_only_storage_scoped_tokens_are_requested(dfs_server: DfsTestServer) -> None:
    inner = FakeTokenCredential()
    identity = StorageIdentity(StorageScopedCredential(inner), "fake", "fake")
    storage = make_onelake_storage(dfs_server, ROOT, identity=identity)
    storage.create("t/scoped", b"x")
    assert inner.scopes_requested and set(inner.scopes_requested) == {(STORAGE_SCOPE,)}


# -- URL parsing ------------------------------------------------------------------------------------

WS_GUID = "6f1c2d3e-1111-4222-8333-944455556666"
ITEM_GUID = "a2b3c4d5-7777-4888-9999-000011112222"


@pytest.mark.parametrize(
    ("url", "account_url", "filesystem", "root", "kind"),
    [
        (
            f"https://onelake.dfs.fabric.microsoft.com/{WS_GUID}/{ITEM_GUID}/Files/LandingZone",
            "https://onelake.dfs.fabric.microsoft.com",
            WS_GUID,
            f"{ITEM_GUID}/Files/LandingZone",
            "onelake",
        ),
        (
            "https://onelake.dfs.fabric.microsoft.com/Sales%20Workspace/Sales.MountedRelationalDatabase/Files/LandingZone/",
            "https://onelake.dfs.fabric.microsoft.com",
            "Sales Workspace",
            "Sales.MountedRelationalDatabase/Files/LandingZone",
            "onelake",
        ),
        (
            "https://westus-onelake.dfs.fabric.microsoft.com/ws/item.MountedRelationalDatabase/Files/LandingZone",
            "https://westus-onelake.dfs.fabric.microsoft.com",
            "ws",
            "item.MountedRelationalDatabase/Files/LandingZone",
            "onelake",
        ),
        (
            f"abfss://{WS_GUID}@onelake.dfs.fabric.microsoft.com/{ITEM_GUID}/Files/LandingZone",
            "https://onelake.dfs.fabric.microsoft.com",
            WS_GUID,
            f"{ITEM_GUID}/Files/LandingZone",
            "onelake",
        ),
        (
            "abfss://landing@mystorage.dfs.core.windows.net/mirror/zone",
            "https://mystorage.dfs.core.windows.net",
            "landing",
            "mirror/zone",
            "adls",
        ),
        (
            "abfss://landing@mystorage.dfs.core.windows.net/",
            "https://mystorage.dfs.core.windows.net",
            "landing",
            "",
            "adls",
        ),
        (
            "https://mystorage.dfs.core.windows.net/landing/mirror/zone",
            "https://mystorage.dfs.core.windows.net",
            "landing",
            "mirror/zone",
            "adls",
        ),
        (
            "https://acct01.dfs.core.chinacloudapi.cn/fs/p",
            "https://acct01.dfs.core.chinacloudapi.cn",
            "fs",
            "p",
            "adls",
        ),
        ("http://127.0.0.1:10004/devaccount/fs/a/b", "http://127.0.0.1:10004/devaccount", "fs", "a/b", "loopback"),
        ("https://localhost:8443/acct/fs", "https://localhost:8443/acct", "fs", "", "loopback"),
    ],
)
def test_parse_location_accepts(url: str, account_url: str, filesystem: str, root: str, kind: str) -> None:
    location = parse_location(url)
    assert location == OneLakeLocation(account_url, filesystem, root, kind)  # type: ignore[arg-type]
    assert parse_location(location.url) == location  # the loggable URL parses back to the same place


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("https://onelake.blob.fabric.microsoft.com/ws/item/Files/LandingZone", r"\.dfs\."),
        ("https://mystorage.blob.core.windows.net/fs/p", r"\.dfs\."),
        ("https://onelake.dfs.fabric.microsoft.com/ws/item/Tables/x", "Files folder"),
        ("https://onelake.dfs.fabric.microsoft.com/ws", "Files folder"),
        ("http://onelake.dfs.fabric.microsoft.com/ws/item/Files", "https"),
        ("abfs://fs@mystorage.dfs.core.windows.net/p", "abfss"),
        ("abfss://mystorage.dfs.core.windows.net/p", "<filesystem>@"),
        ("https://mystorage.dfs.core.windows.net/", "filesystem"),
        ("https://example.com/fs/x", "unsupported storage host"),
        ("s3://bucket/x", "unsupported storage URL"),
        ("/var/lib/landing", "unsupported storage URL"),
        ("https://mystorage.dfs.core.windows.net/fs/../x", r"'\.\.'"),
        ("http://127.0.0.1:1/acct", "loopback URL"),
    ],
)
def test_parse_location_rejects(url: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_location(url)


def test_parse_location_never_echoes_a_sas_signature() -> None:
    with pytest.raises(ValueError, match="SAS") as info:
        parse_location("https://mystorage.dfs.core.windows.net/fs/p?sv=2024-01-01&sig=TOPSECRETSIG")
    assert "TOPSECRETSIG" not in str(info.value)


# -- credentials ------------------------------------------------------------------------------------

ENV = {"AZURE_TENANT_ID": TENANT, "AZURE_CLIENT_ID": CLIENT}


def test_credential_config_never_shows_the_secret() -> None:
    config = CredentialConfig(kind="client_secret", tenant_id=TENANT, client_id=CLIENT, client_secret=SecretStr(SECRET))
    for text in (repr(config), str(config), config.model_dump_json()):
        assert SECRET not in text
    identity = build_credential(config, environ={})
    assert isinstance(identity.credential, StorageScopedCredential)
    assert identity.description == f"client_secret (tenant {TENANT}, client id {CLIENT})"
    assert SECRET not in repr(identity) and SECRET not in identity.description


def test_client_secret_from_environment_or_file(tmp_path: Path) -> None:
    identity = build_credential(CredentialConfig(kind="client_secret"), environ={**ENV, "AZURE_CLIENT_SECRET": SECRET})
    assert isinstance(wrapped(identity), ClientSecretCredential)
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    from_file = build_credential(CredentialConfig(kind="client_secret", client_secret_file=secret_file), environ=ENV)
    assert isinstance(wrapped(from_file), ClientSecretCredential)


def test_client_secret_problems_name_the_setting_not_the_value(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="AZURE_CLIENT_SECRET"):
        build_credential(CredentialConfig(kind="client_secret"), environ=ENV)
    with pytest.raises(ValueError, match="tenant_id"):
        build_credential(CredentialConfig(kind="client_secret", client_secret=SecretStr(SECRET)), environ={})
    missing = tmp_path / "no-such-secret"
    with pytest.raises(ValueError, match="no-such-secret") as info:
        build_credential(CredentialConfig(kind="client_secret", client_secret_file=missing), environ=ENV)
    assert SECRET not in str(info.value)


def rsa_certificate_pem() -> bytes:
    """A throw-away self-signed RSA certificate plus key, as a service principal would use."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "connector-test-sp")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=1))
        .not_valid_after(now + timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM) + key_pem


def test_client_certificate(tmp_path: Path) -> None:
    pem = tmp_path / "sp.pem"
    pem.write_bytes(rsa_certificate_pem())
    identity = build_credential(CredentialConfig(kind="client_certificate", certificate_path=pem), environ=ENV)
    assert isinstance(wrapped(identity), CertificateCredential)
    assert identity.description == f"client_certificate (tenant {TENANT}, client id {CLIENT})"
    with pytest.raises(ValueError, match="does not exist"):
        build_credential(CredentialConfig(kind="client_certificate", certificate_path=tmp_path / "nope"), environ=ENV)
    with pytest.raises(ValueError, match="AZURE_CLIENT_CERTIFICATE_PATH"):
        build_credential(CredentialConfig(kind="client_certificate"), environ=ENV)


def test_workload_managed_and_default_identities(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("federated-jwt")
    workload = build_credential(
        CredentialConfig(kind="workload_identity"), environ={**ENV, "AZURE_FEDERATED_TOKEN_FILE": str(token_file)}
    )
    assert isinstance(wrapped(workload), WorkloadIdentityCredential)
    with pytest.raises(ValueError, match="AZURE_FEDERATED_TOKEN_FILE"):
        build_credential(CredentialConfig(kind="workload_identity"), environ=ENV)
    system = build_credential(CredentialConfig(kind="managed_identity"), environ={})
    assert isinstance(wrapped(system), ManagedIdentityCredential)
    assert system.description == "managed_identity"
    user = build_credential(CredentialConfig(kind="managed_identity", client_id=CLIENT), environ={})
    assert user.description == f"managed_identity (client id {CLIENT})"
    default = build_credential(CredentialConfig(), environ={})
    assert isinstance(wrapped(default), DefaultAzureCredential)
    default.close()


def test_scoped_credential_refuses_other_audiences() -> None:
    scoped = StorageScopedCredential(FakeTokenCredential(token=SECRET))
    assert scoped.get_token(STORAGE_SCOPE).token == SECRET
    with pytest.raises(ValueError, match="only issues tokens"):
        scoped.get_token("https://management.azure.com/.default")
    assert SECRET not in repr(scoped)


def test_open_onelake_builds_the_backend_from_a_parsed_url_and_credential_kind() -> None:
    storage = open_onelake(
        parse_location(f"https://onelake.dfs.fabric.microsoft.com/{WS_GUID}/{ITEM_GUID}/Files/LandingZone"),
        "managed_identity",
    )
    assert storage.url == f"https://onelake.dfs.fabric.microsoft.com/{WS_GUID}/{ITEM_GUID}/Files/LandingZone"
    assert "managed_identity" in repr(storage)
    storage.close()


@pytest.mark.parametrize("cls", [StorageError, StorageAccessDenied, StorageNotFound, StorageUnavailable])
def test_storage_errors_pickle_with_their_fields(cls: type[StorageError]) -> None:
    err = cls("message with details", path="t/f", operation="create")
    clone = pickle.loads(pickle.dumps(err))
    assert type(clone) is cls
    assert (str(clone), clone.path, clone.operation, clone.transient) == (
        "message with details",
        "t/f",
        "create",
        cls is StorageUnavailable,
    )
