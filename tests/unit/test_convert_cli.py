"""`convert` → `validate` → `replay`: the offline twin of the streaming job, through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from connector.cli import main
from connector.events import KafkaRecord
from connector.storage import LocalStorage
from connector.tools.replay import replay_landing_zone
from tests.support.debezium import kcat_line
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


def test_convert_validate_replay_equals_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    workload = Workload("shop", partitions=2, seed=3)
    records = by_partition(workload.records(1500)) + noise("shop")
    dump = write_dump(tmp_path / "dump.jsonl", records)
    lz, cp = tmp_path / "lz", tmp_path / "cp"
    args = ["convert", "--input", str(dump), "--landing-zone", str(lz), "--checkpoint", str(cp), "--batch-size", "700"]
    assert main(args) == 0
    summary = capsys.readouterr().out
    assert "skipped_heartbeat=1" in summary and "skipped_transaction=1" in summary
    assert "skipped_schema_change=1" in summary and "skipped_tombstone=" in summary
    assert main(["validate", str(lz)]) == 0
    assert replayed_rows(replay_landing_zone(LocalStorage(lz))) == workload.expected()
    # The same input with the same checkpoint publishes nothing twice.
    files = sorted(p.name for p in lz.rglob("0*.parquet"))
    assert main(args) == 0
    assert sorted(p.name for p in lz.rglob("0*.parquet")) == files
    # Replay writes each table's state.
    assert main(["replay", str(lz), "--output", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "public.schema" / "customers.parquet").exists()


def test_bad_input_names_position_stops_one_table_and_keeps_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workload = Workload("shop", partitions=1, seed=4)
    good = by_partition(workload.records(200))
    poison = KafkaRecord("shop.public.customers", 0, 99_999, b'{"id":1}', b'{"op":"c","after":')
    dump = tmp_path / "dump.jsonl"
    dump.write_bytes(b"".join(kcat_line(r) for r in good) + b"this is not json\n" + kcat_line(poison))
    lz = tmp_path / "lz"
    assert main(["convert", "--input", str(dump), "--landing-zone", str(lz)]) == 1
    err = capsys.readouterr().err
    assert "dump.jsonl:" in err and "not a kcat -J record" in err
    assert "table stopped: public.customers: shop.public.customers[0]@99999" in err
    assert main(["validate", str(lz)]) == 0
    expected = workload.expected()
    replayed = replayed_rows(replay_landing_zone(LocalStorage(lz)))
    assert replayed["sales.orders"] == expected["sales.orders"]  # the other table went on
    assert replayed["public.customers"] == expected["public.customers"]  # rows before the poison event are kept


def test_schemaless_decimal_columns_flag(tmp_path: Path) -> None:
    record = KafkaRecord(
        "db.public.prices", 0, 0, b'{"id":1}', b'{"op":"c","after":{"id":1,"amount":"12.50"},"source":{}}'
    )
    dump = write_dump(tmp_path / "d.jsonl", [record])
    lz = tmp_path / "lz"
    assert (
        main(
            [
                "convert",
                "--input",
                str(dump),
                "--landing-zone",
                str(lz),
                "--decimal-columns",
                "public.prices.amount=10,2",
            ]
        )
        == 0
    )
    table = replay_landing_zone(LocalStorage(lz))["public.prices"]
    assert str(table.schema.field("amount").type) == "decimal128(10, 2)"
