"""`convert` → `validate` → `replay`: the offline twin of the streaming job, through the CLI.

Each test runs against a local landing zone and against OneLake on the DFS test double, given to the
CLI as its https URL (``landing.url``); for the latter the CLI authenticates with azure-identity's
managed identity, served by the double (see tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from connector.commands.cli import main
from connector.commands.convert import convert
from connector.commands.parser import build_parser
from connector.config import load_settings
from connector.events import KafkaRecord
from connector.kcat import kcat_line
from connector.readback.replay import replay_landing_zone
from connector.readback.validate import validate_landing_zone
from connector.storage.local import LocalStorage
from tests.support.dfs_server import (
    OTHER_IDENTITY_VARIABLES,
    DfsTestServer,
    make_onelake_storage,
    managed_identity_environment,
)
from tests.support.kafka import run_connector
from tests.support.landing import WORKSPACE, Landing, unique_item_root
from tests.support.model import Workload, replayed_rows


def noise(prefix: str) -> list[KafkaRecord]:
    return [
        KafkaRecord(f"__debezium-heartbeat.{prefix}", 0, 0, None, b'{"ts_ms":1700000000000}'),
        KafkaRecord(
            f"{prefix}.transaction", 0, 0, b'{"id":"571"}', b'{"status":"BEGIN","id":"571","event_count":null}'
        ),
        KafkaRecord(prefix, 0, 0, None, b'{"source":{},"databaseName":"db","ddl":"ALTER TABLE x ADD c int"}'),
    ]


def write_dump(path: Path, records: list[KafkaRecord]) -> Path:
    path.write_bytes(b"".join(kcat_line(r) for r in records))
    return path


def by_partition(records: list[KafkaRecord]) -> list[KafkaRecord]:
    """A kcat dump lists each partition's records in offset order, partitions one after another."""
    return sorted(records, key=lambda r: (r.topic, r.partition))


def data_files(landing: Landing) -> dict[str, bytes]:
    """Every numbered file of the landing zone, with its content."""
    return {path: data for path, data in landing.snapshot().items() if path.rsplit("/", 1)[-1][0].isdigit()}


def test_convert_validate_replay_equals_source(
    tmp_path: Path, landing: Landing, capsys: pytest.CaptureFixture[str]
) -> None:
    workload = Workload("shop", partitions=2, seed=3)
    records = by_partition(workload.records(1500)) + noise("shop")
    dump = write_dump(tmp_path / "dump.jsonl", records)
    lz, cp = landing.url, tmp_path / "cp"
    args = ["convert", "--input", str(dump), "--landing-zone", lz, "--checkpoint", str(cp), "--batch-size", "700"]
    assert main(args) == 0
    summary = capsys.readouterr().out
    assert "skipped_heartbeat=1" in summary and "skipped_transaction=1" in summary
    assert "skipped_schema_change=1" in summary and "skipped_tombstone=" in summary
    assert main(["validate", lz]) == 0
    assert replayed_rows(replay_landing_zone(landing.storage)) == workload.expected()
    # The same input with the same checkpoint publishes nothing twice.
    files = data_files(landing)
    assert len(files) >= 4
    assert main(args) == 0
    assert data_files(landing) == files
    # Replay writes each table's state.
    assert main(["replay", lz, "--output", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "public.schema" / "customers.parquet").exists()


def test_a_checkpoint_takes_new_dumps_after_the_ones_it_converted_and_refuses_other_input(
    tmp_path: Path, landing: Landing, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, batch ids were only positions: a second dump with the same checkpoint published nothing, exit 0."""
    workload = Workload("shop", partitions=1, seed=5)
    records = by_partition(workload.records(600))
    first = write_dump(tmp_path / "0001.jsonl", records[:250])
    second = write_dump(tmp_path / "0002.jsonl", records[250:])
    lz, cp = landing.url, str(tmp_path / "cp")

    def convert_cli(*dumps: Path) -> int:
        inputs = [arg for dump in dumps for arg in ("--input", str(dump))]
        return main(["convert", *inputs, "--landing-zone", lz, "--checkpoint", cp, "--batch-size", "100"])

    assert convert_cli(first) == 0
    files = data_files(landing)
    capsys.readouterr()
    # Only the second dump: its batch 0 is not the batch 0 the checkpoint published.
    assert convert_cli(second) == 2
    err = capsys.readouterr().err
    assert f"checkpoint {cp} published batch 0 from other input (100 lines from 0001.jsonl:1 to 0001.jsonl:100)" in err
    assert "0002.jsonl:1" in err and "without --checkpoint" in err
    assert data_files(landing) == files  # nothing published
    # The converted dump again, then the new one: only the new one is published, and the mirror is whole.
    assert convert_cli(first, second) == 0
    assert f"records={len(records) - 250} " in capsys.readouterr().out
    assert replayed_rows(replay_landing_zone(landing.storage)) == workload.expected()
    # Everything again: nothing twice.
    published = data_files(landing)
    assert convert_cli(first, second) == 0
    assert data_files(landing) == published


def test_bad_input_names_position_stops_one_table_and_keeps_the_rest(
    tmp_path: Path, landing: Landing, capsys: pytest.CaptureFixture[str]
) -> None:
    workload = Workload("shop", partitions=1, seed=4)
    good = by_partition(workload.records(200))
    poison = KafkaRecord("shop.public.customers", 0, 99_999, b'{"id":1}', b'{"op":"c","after":')
    dump = tmp_path / "dump.jsonl"
    dump.write_bytes(b"".join(kcat_line(r) for r in good) + b"this is not json\n" + kcat_line(poison))
    assert main(["convert", "--input", str(dump), "--landing-zone", landing.url]) == 1
    err = capsys.readouterr().err
    assert "dump.jsonl:" in err and "not a kcat -J record" in err
    assert "table stopped: public.customers: shop.public.customers[0]@99999" in err
    assert main(["validate", landing.url]) == 0
    expected = workload.expected()
    replayed = replayed_rows(replay_landing_zone(landing.storage))
    assert replayed["sales.orders"] == expected["sales.orders"]  # the other table went on
    assert replayed["public.customers"] == expected["public.customers"]  # rows before the poison event are kept


def test_schemaless_decimal_columns_flag(tmp_path: Path, landing: Landing) -> None:
    record = KafkaRecord(
        "db.public.prices", 0, 0, b'{"id":1}', b'{"op":"c","after":{"id":1,"amount":"12.50"},"source":{}}'
    )
    dump = write_dump(tmp_path / "d.jsonl", [record])
    assert (
        main(
            [
                "convert",
                "--input",
                str(dump),
                "--landing-zone",
                landing.url,
                "--decimal-columns",
                "public.prices.amount=10,2",
            ]
        )
        == 0
    )
    table = replay_landing_zone(landing.storage)["public.prices"]
    assert str(table.schema.field("amount").type) == "decimal128(10, 2)"


# -- OneLake through a fresh process: a real azure-identity credential, then an access denied ---------------


@pytest.fixture
def onelake_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[DfsTestServer]:
    """A DFS test double of the test's own (clean counters) and this process's environment set up as an
    Azure host whose managed identity is the double's; subprocesses inherit it."""
    with DfsTestServer() as server:
        server.create_filesystem(WORKSPACE)
        for name in OTHER_IDENTITY_VARIABLES:
            monkeypatch.delenv(name, raising=False)
        for name, value in managed_identity_environment(server).items():
            monkeypatch.setenv(name, value)
        yield server


def test_a_separate_process_reaches_onelake_with_its_managed_identity(
    tmp_path: Path, onelake_env: DfsTestServer
) -> None:
    server = onelake_env
    workload = Workload("shop", partitions=1, seed=5)
    dump = write_dump(tmp_path / "dump.jsonl", by_partition(workload.records(300)))
    root = unique_item_root()
    url = server.location_url(WORKSPACE, root)
    result = run_connector("convert", "--input", str(dump), "--landing-zone", url, "--checkpoint", str(tmp_path / "cp"))
    assert result.returncode == 0, result.stderr[-3000:]
    # Every storage request carried a token that azure-identity got from the managed identity endpoint,
    # for the storage audience only.
    assert server.issued_tokens and set(server.issued_tokens.values()) == {"https://storage.azure.com"}
    assert server.authorized["managed_identity"] > 0
    assert server.authorized["other"] == server.authorized["none"] == 0
    with make_onelake_storage(server, root, filesystem=WORKSPACE) as storage:
        assert validate_landing_zone(storage) == []
        assert replayed_rows(replay_landing_zone(storage)) == workload.expected()


def test_access_denied_stops_the_cli_with_path_and_identity_and_no_secret(
    tmp_path: Path, onelake_env: DfsTestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = onelake_env
    server.set_faults(deny_all=True)
    monkeypatch.setenv("CONNECTOR_LANDING_ZONE__CREDENTIAL", "managed_identity")
    dump = write_dump(tmp_path / "dump.jsonl", by_partition(Workload("shop", partitions=1).records(50)))
    url = server.location_url(WORKSPACE, unique_item_root())
    # DEBUG: every log line the SDKs write goes to stderr too, and must not carry a secret either.
    result = run_connector("--log-level", "DEBUG", "convert", "--input", str(dump), "--landing-zone", url)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr[-3000:]
    message = errors[0]
    assert "access denied (HTTP 403 AuthorizationPermissionMismatch)" in message
    assert url in message  # the landing zone it was refused
    assert "credential managed_identity" in message  # the identity type
    assert "Traceback" not in result.stderr
    assert server.injected["403"] == 1  # failed fast: a 403 is never retried
    # The bearer token the credential got, and the identity endpoint's secret header, appear nowhere.
    output = result.stdout + result.stderr
    assert server.issued_tokens
    for secret in [*server.issued_tokens, server.identity_header]:
        assert secret not in output
    assert [p for p, is_dir in server.paths(WORKSPACE).items() if not is_dir] == []  # nothing written


@pytest.mark.parametrize(("flags", "create_marker"), [([], 4), (["--no-replay-safe-inserts"], 0)])
def test_creates_are_replay_safe_upserts_unless_opted_out(tmp_path: Path, flags: list[str], create_marker: int) -> None:
    """Debezium re-sends after a restart; a re-sent create written as 0 (no key check) would duplicate a row."""
    workload = Workload("shop", partitions=1, seed=5)
    dump = write_dump(tmp_path / "dump.jsonl", workload.records(50))
    lz = tmp_path / "lz"
    assert main(["convert", "--input", str(dump), "--landing-zone", str(lz), *flags]) == 0
    markers: set[int] = set()
    for path in sorted(lz.glob("*.schema/*/0*.parquet")):
        markers.update(pq.read_table(path).column("__rowMarker__").to_pylist())
    assert create_marker in markers
    assert ({0, 4} - {create_marker}).isdisjoint(markers)


def test_convert_through_the_columnar_lane_writes_what_the_record_path_writes(tmp_path: Path) -> None:
    """``convert`` reads dumps into Arrow and lets the lane take them, as ``run`` does; the files must be the
    record-by-record path's, byte for byte."""
    workload = Workload("shop", partitions=2, seed=11)
    dump = write_dump(tmp_path / "dump.jsonl", by_partition(workload.records(1200)))
    outputs = {}
    for columnar in (True, False):
        lz = tmp_path / f"lz-{columnar}"
        settings = load_settings(**{"landing_zone.url": str(lz), "spark.columnar_decode": columnar})
        summary = convert([str(dump)], settings, checkpoint=None, batch_size=500)
        assert summary.ok and summary.rows
        outputs[columnar] = {str(p.relative_to(lz)): p.read_bytes() for p in sorted(lz.rglob("*")) if p.is_file()}
    assert outputs[True] == outputs[False]


def test_a_line_with_a_non_string_payload_is_a_bad_line_and_the_rest_is_published(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workload = Workload("shop", partitions=1, seed=12)
    good = by_partition(workload.records(100))
    odd = b'{"topic":"shop.public.customers","partition":0,"offset":5000,"key":null,"payload":{"op":"c"}}\n'
    dump = tmp_path / "dump.jsonl"
    dump.write_bytes(b"".join(kcat_line(r) for r in good) + odd)
    assert main(["convert", "--input", str(dump), "--landing-zone", str(tmp_path / "lz")]) == 1
    err = capsys.readouterr().err
    assert f"{dump}:{len(good) + 1}: not a kcat -J record" in err and "shop.public.customers[0]@5000" in err
    assert replayed_rows(replay_landing_zone(LocalStorage(tmp_path / "lz"))) == workload.expected()


def test_help_is_plain_text() -> None:
    """--help prints the module docstring as the description: no reST double backticks, in any command's help."""
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.choices and "run" in a.choices)
    helps = [parser.format_help(), *(sub.format_help() for sub in subparsers.choices.values())]
    assert "python -m connector <command>" in helps[0]
    assert [h.splitlines()[0] for h in helps if "``" in h] == []
