"""Poison records through the sink, fuzz-style: truncated, corrupted and wrong-schema payloads, JSON and Avro.

Whatever the damage, the sink either publishes the record (it still decodes), or accounts for it: in
the dead-letter output under ``dead-letter``, or as the reason its table stopped under ``stop``. The
landing zone stays valid (nothing half-written), and the other tables keep flowing. The Avro writer
schemas come from ``RegistryDouble``, a **test double** of the Confluent schema registry API.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from connector.config import MirrorSettings, SchemaChangeSettings, SchemaRegistrySettings, SourceSettings
from connector.deadletter.folder import FolderDeadLetterWriter
from connector.debezium import schema_registry
from connector.events import KafkaRecord
from connector.publish.batch_result import BatchResult
from connector.readback.replay import replay_landing_zone
from connector.readback.validate import validate_landing_zone
from connector.sink import MirrorSink
from connector.storage.local import LocalStorage
from tests.support.model import Workload, replayed_rows
from tests.support.registry_double import RegistryDouble
from tests.unit.debezium.test_avro import AvroConverter
from tests.unit.debezium.test_decoder_fuzz import mutate

SEED = 424242
BATCHES = 6
DAMAGED_SHARE = 0.06


@pytest.fixture(scope="module")
def registry() -> Iterator[RegistryDouble]:
    for cache in (schema_registry._WRITER_SCHEMAS, schema_registry._UNREADABLE, schema_registry._MISSING):
        cache.clear()
    with RegistryDouble() as double:
        yield double


#: A fuzzed type or key change stops its table here, so what the other tables publish can be compared (by
#: default such a change rebuilds the table, which needs Debezium's signal channel).
STOP_ON_SCHEMA_CHANGE = SchemaChangeSettings(type_changed="stop", key_changed="stop")


def batches_of(records: list[KafkaRecord]) -> list[list[KafkaRecord]]:
    size = len(records) // BATCHES + 1
    return [records[i : i + size] for i in range(0, len(records), size)]


def workload_records(
    fmt: str, registry: RegistryDouble, seed: int
) -> tuple[dict[str, list[dict[str, Any]]], list[KafkaRecord]]:
    """Records of two tables and their expected source state.

    The workload's orders topic is schemaless JSON, which has no Avro form: the Avro run uses the customers
    topic twice, as ``public.customers`` and ``public.clients``.
    """
    workload = Workload(f"poison{fmt}", partitions=3, seed=seed)
    records = workload.records(900)
    expected = workload.expected()
    if fmt == "json":
        return expected, records
    converter = AvroConverter(registry)
    customers = [r for r in records if r.topic.endswith(".public.customers")]
    clients = [r._replace(topic=r.topic.replace(".customers", ".clients")) for r in customers]
    converted = [converter.convert(r) if r.value is not None else r for r in customers + clients]
    rows = expected["public.customers"]
    return {"public.customers": rows, "public.clients": rows}, converted


def damage(records: list[KafkaRecord], seed: int) -> tuple[list[KafkaRecord], set[tuple[str, int, int]]]:
    """Replace a share of the change records by damaged copies; returns the records and the damaged positions."""
    rng = random.Random(seed)
    corpus = [r for r in records if r.value]
    schema_ids = [1, 2, 3, 4]
    out, damaged = [], set()
    for record in records:
        if record.value and rng.random() < DAMAGED_SHARE:
            record = mutate(rng, record, corpus, schema_ids)
            damaged.add((record.topic, record.partition, record.offset))
        out.append(record)
    return out, damaged


def source_for(fmt: str, registry: RegistryDouble) -> SourceSettings:
    if fmt == "avro":
        return SourceSettings(
            value_format="avro", schema_registry=SchemaRegistrySettings(url=registry.url, max_unavailable_s=5)
        )
    return SourceSettings()


def dead_letter_positions(folder: Path) -> dict[tuple[str, int, int], dict[str, Any]]:
    out = {}
    for path in sorted(folder.rglob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            entry = orjson.loads(line)
            out[(entry["topic"], entry["partition"], entry["offset"])] = entry
    return out


def leftovers(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.name.startswith(("_tmp_", "_staged_"))]


def run_dead_letter(
    root: Path, records: list[KafkaRecord], source: SourceSettings
) -> tuple[list[BatchResult], dict[tuple[str, int, int], dict[str, Any]]]:
    sink = MirrorSink(
        LocalStorage(root / "lz"),
        LocalStorage(root / "cp"),
        MirrorSettings(poison_policy="dead-letter", max_rows_per_file=120, schema_changes=STOP_ON_SCHEMA_CHANGE),
        source=source,
        dead_letters=FolderDeadLetterWriter(LocalStorage(root / "deadletter")),
    )
    results = [sink.process_batch(i, batch) for i, batch in enumerate(batches_of(records))]
    lz = LocalStorage(root / "lz")
    assert [str(p) for p in validate_landing_zone(lz)] == []  # nothing half-written
    assert leftovers(root / "lz") == []
    return results, dead_letter_positions(root / "deadletter")


def reference_mirror(root: Path, records: list[KafkaRecord], source: SourceSettings) -> dict[str, Any]:
    """What the same records publish without the ones taken out."""
    mirror = MirrorSettings(schema_changes=STOP_ON_SCHEMA_CHANGE)
    sink = MirrorSink(LocalStorage(root / "lz"), LocalStorage(root / "cp"), mirror, source=source)
    for i, batch in enumerate(batches_of(records)):
        sink.process_batch(i, batch)
    return replay_landing_zone(LocalStorage(root / "lz"))


@pytest.mark.parametrize("fmt", ["json", "avro"])
def test_fuzzed_records_are_all_accounted_for(tmp_path: Path, registry: RegistryDouble, fmt: str) -> None:
    """Truncated, bit-flipped, spliced, garbage and wrong-schema values and keys: each one is published (it
    still decodes), dead-lettered, or the named reason its table stopped (a decodable type or key change is
    a schema change, which stops a table under any policy); no exception escapes."""
    _, clean = workload_records(fmt, registry, seed=3)
    records, damaged = damage(clean, SEED)
    source = source_for(fmt, registry)
    results, letters = run_dead_letter(tmp_path / "fuzz", records, source)
    assert letters, "the fuzz produced no poison record"
    assert set(letters) <= damaged  # only damaged records are rejected
    assert sum(sum(r.dead_letters.values()) for r in results) == len(letters)
    for (topic, partition, offset), entry in letters.items():
        assert f"{topic}[{partition}]@{offset}" in entry["error"]
        assert entry["value"] is not None or entry["key"] is not None  # the raw record is kept
    stopped = dict(itertools.chain.from_iterable(r.stopped.items() for r in results))
    damaged_positions = {f"{t}[{p}]@{o}" for t, p, o in damaged}
    for reason in stopped.values():
        assert any(position in reason for position in damaged_positions), reason
    # Tables that went on hold exactly what the records minus the dead letters publish.
    survivors = [r for r in records if (r.topic, r.partition, r.offset) not in letters]
    expected = reference_mirror(tmp_path / "ref", survivors, source)
    published = replay_landing_zone(LocalStorage(tmp_path / "fuzz" / "lz"))
    going_on = [table for table in expected if table not in stopped]
    assert going_on or len(stopped) == len(expected)
    for table in going_on:
        assert published[table] == expected[table], table


@pytest.mark.parametrize("fmt", ["json", "avro"])
def test_dead_letter_lets_every_table_go_on(tmp_path: Path, registry: RegistryDouble, fmt: str) -> None:
    expected, clean = workload_records(fmt, registry, seed=5)
    rng = random.Random(SEED)
    records, cut = [], set()
    for record in clean:
        if record.value and rng.random() < DAMAGED_SHARE:
            kind = rng.choice(["truncate", "garbage"])
            value = record.value[: rng.randrange(1, 6)] if kind == "truncate" else b"\x00\xff" + rng.randbytes(9)
            record = record._replace(value=value)
            cut.add((record.topic, record.partition, record.offset))
        records.append(record)
    source = source_for(fmt, registry)
    results, letters = run_dead_letter(tmp_path / "cut", records, source)
    assert not any(r.stopped for r in results)
    assert set(letters) == cut  # every poison record, and only those
    survivors = [r for r in records if (r.topic, r.partition, r.offset) not in cut]
    published = replay_landing_zone(LocalStorage(tmp_path / "cut" / "lz"))
    assert published == reference_mirror(tmp_path / "ref", survivors, source)
    # With nothing damaged the same pipeline mirrors the source exactly.
    results, letters = run_dead_letter(tmp_path / "clean", clean, source)
    assert letters == {}
    assert replayed_rows(replay_landing_zone(LocalStorage(tmp_path / "clean" / "lz"))) == expected


@pytest.mark.parametrize("fmt", ["json", "avro"])
def test_stop_policy_names_the_record_stops_only_its_table_and_leaves_no_half_written_file(
    tmp_path: Path, registry: RegistryDouble, fmt: str
) -> None:
    expected, clean = workload_records(fmt, registry, seed=4)
    candidates = [i for i, r in enumerate(clean) if r.value and r.topic.endswith(".public.customers")]
    victim = candidates[len(candidates) // 2]
    bad = clean[victim]._replace(value=(clean[victim].value or b"")[:7])  # truncated: never decodes
    records = [*clean[:victim], bad, *clean[victim + 1 :]]
    sink = MirrorSink(
        LocalStorage(tmp_path / "lz"), LocalStorage(tmp_path / "cp"), MirrorSettings(), source=source_for(fmt, registry)
    )
    results = [sink.process_batch(i, batch) for i, batch in enumerate(batches_of(records))]
    stopped = dict(itertools.chain.from_iterable(r.stopped.items() for r in results))
    assert list(stopped) == ["public.customers"]
    assert bad.position in stopped["public.customers"]
    assert sum(r.skipped.by_kind.get("malformed", 0) for r in results) == 1
    lz = LocalStorage(tmp_path / "lz")
    assert [str(p) for p in validate_landing_zone(lz)] == []
    assert leftovers(tmp_path / "lz") == []
    # The other table is complete; the stopped one kept its rows from before the poison record.
    replayed = replayed_rows(replay_landing_zone(lz))
    other = next(table for table in expected if table != "public.customers")
    assert replayed[other] == expected[other]
    assert sink.stopped_tables == {"public.customers": stopped["public.customers"]}
