"""Without the ``verify`` extra, ``verify`` and ``replay --format delta`` stop with one ``error:`` line.

The extra's packages are made unimportable the way a missing install is: ``sys.modules[name] = None``
makes ``import name`` raise ``ImportError``. The source URLs point at a closed port, so a command that
went on to connect would fail with another error (or a traceback) instead.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from connector.commands.cli import main

INSTALL = 'pip install "debezium-fabric-mirror[verify]"'


@pytest.fixture
def zone(tmp_path: Path) -> Path:
    table = tmp_path / "zone" / "public.schema" / "t"
    table.mkdir(parents=True)
    (table / "_metadata.json").write_text(json.dumps({"keyColumns": ["id"]}))
    return tmp_path / "zone"


@pytest.mark.parametrize(
    ("source", "missing"),
    [
        ("postgresql://u:s3cret@127.0.0.1:1/db", "psycopg"),
        ("postgresql://u:s3cret@127.0.0.1:1/db", "deltalake"),
        ("mysql://u:s3cret@127.0.0.1:1/db", "pymysql"),
        ("mariadb://u:s3cret@127.0.0.1:1/db", "deltalake"),
    ],
)
def test_verify_without_the_extra_says_what_to_install(
    zone: Path, source: str, missing: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, missing, None)
    code = main(["verify", "--source", source, "--landing-zone", str(zone)])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err.splitlines() == [f"error: verify needs {missing}, which is not installed: {INSTALL}"]


def test_verify_names_every_missing_package(
    zone: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    monkeypatch.setitem(sys.modules, "deltalake", None)
    assert main(["verify", "--source", "postgresql://u@127.0.0.1:1/db", "--landing-zone", str(zone)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: verify needs deltalake, psycopg, which are not installed: {INSTALL}"
    ]


def test_replay_to_delta_without_the_extra_says_what_to_install(
    zone: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "deltalake", None)
    code = main(["replay", str(zone), "--output", str(tmp_path / "out"), "--format", "delta"])
    assert code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: replay --format delta needs deltalake, which is not installed: {INSTALL}"
    ]
    assert not (tmp_path / "out").exists()


def test_replay_to_parquet_needs_no_extra(
    zone: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "deltalake", None)
    assert main(["replay", str(zone), "--output", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().err == ""
