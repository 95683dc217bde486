"""``StorageLocation``: one value for where a folder is and as whom it is opened, checked when built."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from pydantic import SecretStr

from connector.config import load_settings
from connector.errors import ConfigError
from connector.storage.credentials import build_credential
from connector.storage.identity import CredentialConfig
from connector.storage.local import LocalStorage
from connector.storage.location import StorageLocation

ONELAKE = "https://onelake.dfs.fabric.microsoft.com/ws/item.MountedRelationalDatabase/Files/LandingZone"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", r"^landing_zone.url is empty; give a local folder or a OneLake URL \(--landing-zone\)$"),
        (f"{ONELAKE}?sv=2024&sig=SECRET", r"^landing_zone.url https://onelake\S+/LandingZone carries a query string"),
        ("https://example.com", r"^landing_zone.url https://example.com is not a landing-zone URL"),
    ],
)
def test_a_location_is_checked_when_built(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as refused:
        StorageLocation(url)
    assert "SECRET" not in str(refused.value)


def test_a_refusal_names_the_setting_the_location_came_from() -> None:
    with pytest.raises(ConfigError, match=r"^dead_letter.url https://example.com is not a OneLake / ADLS Gen2 folder"):
        StorageLocation("https://example.com", setting="dead_letter.url")
    with pytest.raises(ConfigError, match=r"^checkpoint is empty; give a local folder or a OneLake URL$"):
        StorageLocation(" ", setting="checkpoint")


def test_a_location_pickles_with_its_identity_and_opens_where_it_points(tmp_path: Path) -> None:
    identity = CredentialConfig(kind="client_secret", tenant_id="t", client_id="c", client_secret=SecretStr("${env:X}"))
    location = StorageLocation(ONELAKE, identity)
    travelled = pickle.loads(pickle.dumps(location))
    assert travelled == location and hash(travelled) == hash(location)
    assert travelled.identity.client_secret is not None
    assert travelled.identity.client_secret.get_secret_value() == "${env:X}"  # resolved only where it is used
    assert "${env:X}" not in repr(travelled)

    local = StorageLocation("lz").absolute()
    assert Path(local.url).is_absolute() and local.url.endswith("/lz")
    assert StorageLocation(ONELAKE).absolute().url == ONELAKE
    folder = StorageLocation(str(tmp_path)).open()
    assert isinstance(folder, LocalStorage)
    folder.create("a.txt", b"x")
    assert (tmp_path / "a.txt").read_bytes() == b"x"


def test_the_landing_zone_identity_comes_from_the_config_in_either_form(monkeypatch: pytest.MonkeyPatch) -> None:
    short = load_settings(**{"landing_zone.url": ONELAKE, "landing_zone.credential": "managed_identity"})
    assert short.landing_zone.location == StorageLocation(ONELAKE, CredentialConfig(kind="managed_identity"))
    full = load_settings(
        **{
            "landing_zone.url": ONELAKE,
            "landing_zone.credential": {
                "kind": "client_secret",
                "tenant_id": "tenant-1",
                "client_id": "client-1",
                "client_secret": "${env:LANDING_SECRET}",
            },
        }
    )
    identity = full.landing_zone.location.identity
    assert (identity.kind, identity.tenant_id, identity.client_id) == ("client_secret", "tenant-1", "client-1")
    # The same secret rule as every other secret setting: a reference, resolved when the credential is built.
    monkeypatch.setenv("LANDING_SECRET", "s3cret")
    built = build_credential(identity, environ={})
    assert built.description == "client_secret (tenant tenant-1, client id client-1)"
    monkeypatch.delenv("LANDING_SECRET")
    with pytest.raises(ValueError, match="LANDING_SECRET, which is not set"):
        build_credential(identity, environ={})


@pytest.mark.parametrize(
    ("url", "tables"),
    [
        (ONELAKE, "https://onelake.dfs.fabric.microsoft.com/ws/item.MountedRelationalDatabase/Tables"),
        (f"{ONELAKE}/", "https://onelake.dfs.fabric.microsoft.com/ws/item.MountedRelationalDatabase/Tables"),
        (  # a regional host is OneLake too
            "abfss://ws@westeurope-onelake.dfs.fabric.microsoft.com/db/Files/LandingZone",
            "abfss://ws@westeurope-onelake.dfs.fabric.microsoft.com/db/Tables",
        ),
        (
            "abfss://ws@onelake.dfs.fabric.microsoft.com/db/Files/LandingZone",
            "abfss://ws@onelake.dfs.fabric.microsoft.com/db/Tables",
        ),
        ("https://onelake.dfs.fabric.microsoft.com/ws/db/Files/Other", None),
        ("https://acct.dfs.core.windows.net/c/Files/LandingZone", None),
        ("/data/item/Files/LandingZone", None),
    ],
)
def test_the_tables_folder_is_the_items_beside_its_landing_zone(url: str, tables: str | None) -> None:
    assert StorageLocation(url).tables_folder() == tables


@pytest.mark.parametrize(
    ("url", "name", "beside"),
    [
        (f"{ONELAKE}/", "LandingZone", ONELAKE.removesuffix("LandingZone") + "Monitoring"),
        (
            "abfss://ws@onelake.dfs.fabric.microsoft.com/db/Files/LandingZone",
            "LandingZone",
            "abfss://ws@onelake.dfs.fabric.microsoft.com/db/Files/Monitoring",
        ),
        ("/data/LandingZone", "LandingZone", "/data/Monitoring"),
        ("LandingZone", "LandingZone", None),  # no parent named
        ("abfss://lz@acct.dfs.core.windows.net", "lz@acct.dfs.core.windows.net", None),  # a whole container
    ],
)
def test_a_folder_beside_keeps_the_locations_form(url: str, name: str, beside: str | None) -> None:
    location = StorageLocation(url)
    assert location.name == name
    assert location.sibling("Monitoring") == beside


@pytest.mark.parametrize(
    ("inner", "inside"),
    [
        (ONELAKE, True),
        (f"{ONELAKE}/_deadletter", True),
        (
            "https://westeurope-onelake.dfs.fabric.microsoft.com/WS/item.MountedRelationalDatabase/Files/landingzone/x",
            True,
        ),
        ("abfss://ws@onelake.dfs.fabric.microsoft.com/item.MountedRelationalDatabase/Files/LandingZone/x", True),
        ("https://onelake.dfs.fabric.microsoft.com/ws/item.MountedRelationalDatabase/Files/DeadLetters", False),
        ("https://onelake.dfs.fabric.microsoft.com/other/item.MountedRelationalDatabase/Files/LandingZone", False),
        ("/data/lz", False),
    ],
)
def test_containment_compares_what_the_url_addresses(inner: str, inside: bool) -> None:
    assert StorageLocation(ONELAKE).contains(StorageLocation(inner, setting="dead_letter.url")) is inside


def test_local_containment_compares_resolved_folders(tmp_path: Path) -> None:
    landing = StorageLocation(str(tmp_path / "lz"))
    assert landing.contains(StorageLocation(str(tmp_path / "lz" / ".." / "lz" / "dead")))
    assert not landing.contains(StorageLocation(str(tmp_path / "lz-dead")))
    assert not landing.contains(StorageLocation(ONELAKE))


def test_only_a_remote_location_opens_its_onelake_backend(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^checkpoint \S+ is a local folder, not a OneLake / ADLS Gen2 URL$"):
        StorageLocation(str(tmp_path), setting="checkpoint").open_remote()
    assert StorageLocation(str(tmp_path)).address is None
