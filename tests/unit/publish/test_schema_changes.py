"""Schema changes seen in a table's events, per change kind and per encoding, and what the sink does about them.

Each case publishes a table, changes its source schema the way Debezium shows the DDL in the next event (JSON with
schemas, the same Connect data written as Avro through a registry double, and schemaless JSON), and checks the
table's lifecycle, the batch's recorded change, and the files: a refresh publishes and asks Debezium for a
snapshot without deleting anything; a rebuild publishes nothing of the batch and deletes the folder next.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq
import pytest

from connector.commands.tables import table_lines
from connector.config import (
    MirrorSettings,
    RebuildSettings,
    SchemaChangeSettings,
    SchemaRegistrySettings,
    SourceSettings,
)
from connector.debezium import schema_registry
from connector.debezium.ddl_events import altered_tables
from connector.events import KafkaRecord
from connector.operate import metrics
from connector.publish.batch_result import BatchResult
from connector.publish.lifecycle import Phase
from connector.sink import MirrorSink
from connector.storage.local import LocalStorage
from tests.support.debezium import Topic, field
from tests.support.registry_double import RegistryDouble
from tests.unit.debezium.test_avro import AvroConverter
from tests.unit.publish.test_rebuild import Signals

TABLE = "public.items"
TOPIC = "dbserver1.public.items"
FOLDER = "public.schema/items"
BASE = [field("id", "int32", optional=False), field("label", "string"), field("qty", "int32")]
ENCODINGS = ["json", "avro", "schemaless"]


@pytest.fixture
def registry() -> Iterator[RegistryDouble]:
    for cache in (schema_registry._WRITER_SCHEMAS, schema_registry._UNREADABLE, schema_registry._MISSING):
        cache.clear()
    with RegistryDouble() as double:
        yield double


class Source:
    """One table's topic in one encoding, and a sink mirroring it into a local landing zone."""

    def __init__(self, tmp_path: Path, encoding: str, registry: RegistryDouble, **mirror: Any) -> None:
        self.encoding = encoding
        self.topic = Topic(TOPIC, list(BASE), ["id"], with_schema=encoding != "schemaless")
        self.avro = AvroConverter(registry) if encoding == "avro" else None
        self.signals = Signals()
        self.landing = LocalStorage(tmp_path / "lz")
        self.checkpoint = LocalStorage(tmp_path / "cp")
        mirror.setdefault("rebuild", RebuildSettings(wait_s=0))
        self.mirror = MirrorSettings(**mirror)
        registry_settings = SchemaRegistrySettings(url=registry.url)
        self.source = SourceSettings(value_format="avro", schema_registry=registry_settings) if self.avro else None
        self.sink = self.new_sink()
        self.batch = 0

    def new_sink(self) -> MirrorSink:
        """A sink on the same landing zone and ledger, as after a restart (kill -9)."""
        return MirrorSink(self.landing, self.checkpoint, self.mirror, source=self.source, snapshot_signal=self.signals)

    def record(self, op: str, row: dict[str, Any], snapshot: str | None = None) -> KafkaRecord:
        record = self.topic.record(op, None, row, snapshot=snapshot)
        return self.avro.convert(record) if self.avro is not None else record

    def publish(self, *rows: dict[str, Any], op: str = "u", snapshot: str | None = None) -> BatchResult:
        result = self.sink.process_batch(self.batch, [self.record(op, row, snapshot) for row in rows])
        self.batch += 1
        return result

    @property
    def phase(self) -> Phase:
        return self.sink.state.tables[TABLE].lifecycle.phase

    def files(self) -> list[str]:
        return sorted(i.path.rsplit("/", 1)[-1] for i in self.landing.list_dir(FOLDER) if not i.is_dir)

    def markers(self, name: str) -> list[int]:
        return pq.read_table(self.landing.root / FOLDER / name).column("__rowMarker__").to_pylist()


def started(tmp_path: Path, encoding: str, registry: RegistryDouble, **mirror: Any) -> Source:
    """The table published once: two rows, its columns recorded."""
    source = Source(tmp_path, encoding, registry, **mirror)
    source.publish({"id": 1, "label": "a", "qty": 1}, {"id": 2, "label": "b", "qty": 2}, op="c")
    assert source.sink.state.tables[TABLE].source_columns == ("id", "label", "qty")
    return source


# -- column added ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_column_added_with_a_default_refreshes_the_table_in_place(
    tmp_path: Path, registry: RegistryDouble, encoding: str
) -> None:
    # Inserts as 0, so the snapshot's reads show the upserts (4) the refresh needs.
    source = started(tmp_path, encoding, registry, replay_safe_inserts=False)
    assert source.markers("00000000000000000001.parquet") == [0, 0]
    source.topic.columns = [*BASE, {"field": "region", "type": "string", "optional": False, "default": "EU"}]
    result = source.publish({"id": 1, "label": "a", "qty": 5, "region": "EU"})
    assert result.schema_changes == {TABLE: ("column_added", "refresh")} and result.stopped == {}
    assert source.phase is Phase.REFRESH_PENDING
    assert source.files() == ["00000000000000000001.parquet", "00000000000000000002.parquet", "_metadata.json"]
    # Before the next batch the rebuilder asks Debezium to re-read the table; nothing is deleted.
    source.sink.advance_rebuilds()
    assert source.signals.sent == [(TABLE, TOPIC)] and source.phase is Phase.SNAPSHOT_REQUESTED
    (line,) = table_lines(source.sink.state)
    assert line.state == "running" and (line.reason or "").startswith("refreshed ")
    source.publish({"id": 2, "label": "b", "qty": 2, "region": "EU"}, op="r", snapshot="incremental")  # its read
    assert source.markers("00000000000000000003.parquet") == [4]  # an upsert: row 2 is replaced, not doubled
    assert source.sink.state.tables[TABLE].source_columns == ("id", "label", "qty", "region")


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_nullable_column_without_a_default_is_unioned_where_the_encoding_says_so(
    tmp_path: Path, registry: RegistryDouble, encoding: str
) -> None:
    source = started(tmp_path, encoding, registry)
    source.topic.columns = [*BASE, field("note", "string")]
    result = source.publish({"id": 1, "label": "a", "qty": 5, "note": "x"})
    if encoding == "schemaless":
        # Only the field names are visible: the old rows may hold a default, so the table is refreshed.
        assert result.schema_changes == {TABLE: ("column_added", "refresh")}
        assert source.phase is Phase.REFRESH_PENDING
    else:
        # Existing rows are NULL in the source too: Fabric's union is already exact, no table read is spent.
        assert result.schema_changes == {TABLE: ("column_added", "union")}
        assert source.phase is Phase.RUNNING
    assert len(source.files()) == 3


def test_column_added_union_keeps_the_table_running(tmp_path: Path, registry: RegistryDouble) -> None:
    source = started(tmp_path, "json", registry, schema_changes=SchemaChangeSettings(column_added="union"))
    source.topic.columns = [*BASE, {"field": "region", "type": "string", "optional": False, "default": "EU"}]
    assert source.publish({"id": 1, "label": "a", "qty": 5, "region": "EU"}).schema_changes == {
        TABLE: ("column_added", "union")
    }
    assert source.phase is Phase.RUNNING and source.signals.sent == []


# -- column removed or renamed -------------------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_column_removed_rebuilds_the_table(tmp_path: Path, registry: RegistryDouble, encoding: str) -> None:
    source = started(tmp_path, encoding, registry)
    source.topic.columns = [BASE[0], BASE[1]]  # DROP COLUMN qty
    result = source.publish({"id": 1, "label": "z"})
    assert result.schema_changes == {TABLE: ("column_removed", "rebuild")}
    assert source.phase is Phase.DELETING and "-qty" in (source.sink.state.tables[TABLE].lifecycle.reason or "")
    assert source.files() == ["00000000000000000001.parquet", "_metadata.json"]  # nothing of the batch published
    source.sink.advance_rebuilds()  # folder deleted; wait_s 0: Debezium asked for a snapshot at once
    assert source.files() == [] and source.signals.sent == [(TABLE, TOPIC)]
    assert source.phase is Phase.SNAPSHOT_REQUESTED


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_column_renamed_is_a_removal_and_an_addition_and_rebuilds(
    tmp_path: Path, registry: RegistryDouble, encoding: str
) -> None:
    source = started(tmp_path, encoding, registry)
    source.topic.columns = [BASE[0], field("title", "string"), BASE[2]]  # RENAME COLUMN label TO title
    result = source.publish({"id": 1, "title": "a", "qty": 1})
    assert result.schema_changes == {TABLE: ("column_removed", "rebuild")}
    assert "-label +title" in (source.sink.state.tables[TABLE].lifecycle.reason or "")
    assert source.phase is Phase.DELETING


def test_column_removed_keep_leaves_the_column_in_the_mirror(tmp_path: Path, registry: RegistryDouble) -> None:
    source = started(tmp_path, "json", registry, schema_changes=SchemaChangeSettings(column_removed="keep"))
    source.topic.columns = [BASE[0], BASE[1]]
    assert source.publish({"id": 1, "label": "z"}).schema_changes == {TABLE: ("column_removed", "keep")}
    assert source.phase is Phase.RUNNING and len(source.files()) == 3
    # Recorded: the next event of the same shape is no change.
    assert source.publish({"id": 2, "label": "y"}).schema_changes == {}


def test_a_schemaless_delete_with_only_its_key_is_no_removal(tmp_path: Path, registry: RegistryDouble) -> None:
    source = started(tmp_path, "schemaless", registry)
    record = source.topic.record("d", {"id": 2}, None)
    result = source.sink.process_batch(source.batch, [record])
    assert result.schema_changes == {} and source.phase is Phase.RUNNING


# -- type, key and nullability ------------------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["json", "avro"])
def test_a_type_change_rebuilds_by_default_and_stops_when_told(
    tmp_path: Path, registry: RegistryDouble, encoding: str
) -> None:
    source = started(tmp_path / "rebuild", encoding, registry)
    source.topic.columns = [BASE[0], BASE[1], field("qty", "int64")]
    result = source.publish({"id": 1, "label": "a", "qty": 2**40})
    assert result.schema_changes == {TABLE: ("type_changed", "rebuild")} and source.phase is Phase.DELETING

    told = started(tmp_path / "stop", encoding, registry, schema_changes=SchemaChangeSettings(type_changed="stop"))
    told.topic.columns = [BASE[0], BASE[1], field("qty", "int64")]
    assert told.publish({"id": 1, "label": "a", "qty": 2**40}).schema_changes == {TABLE: ("type_changed", "stop")}
    assert told.phase is Phase.STOPPED and "changed type" in (told.sink.stopped_tables[TABLE])


def test_a_schemaless_value_of_another_type_stops_the_table_as_poison(tmp_path: Path, registry: RegistryDouble) -> None:
    """Schemaless JSON carries no types: a column's new type shows only as a value that does not convert."""
    source = started(tmp_path, "schemaless", registry)
    result = source.publish({"id": 1, "label": "a", "qty": "many"})
    assert TABLE in result.stopped and result.schema_changes == {}


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_key_change_rebuilds_the_table(tmp_path: Path, registry: RegistryDouble, encoding: str) -> None:
    source = started(tmp_path, encoding, registry)
    source.topic.key_columns = ["id", "label"]  # ALTER TABLE … ADD PRIMARY KEY (id, label)
    result = source.publish({"id": 1, "label": "a", "qty": 3})
    assert result.schema_changes == {TABLE: ("key_changed", "rebuild")} and source.phase is Phase.DELETING


@pytest.mark.parametrize("encoding", ["json", "avro"])
def test_a_nullability_change_alone_changes_nothing(tmp_path: Path, registry: RegistryDouble, encoding: str) -> None:
    source = started(tmp_path, encoding, registry)
    source.topic.columns = [BASE[0], BASE[1], field("qty", "int32", optional=False)]  # SET NOT NULL
    result = source.publish({"id": 1, "label": "a", "qty": 3})
    assert result.schema_changes == {} and source.phase is Phase.RUNNING and len(source.files()) == 3


def test_a_per_table_override_wins(tmp_path: Path, registry: RegistryDouble) -> None:
    keep = {"schema_changes": SchemaChangeSettings(column_removed="keep")}
    source = started(tmp_path, "json", registry, tables={TOPIC: keep})
    source.topic.columns = [BASE[0], BASE[1]]
    assert source.publish({"id": 1, "label": "z"}).schema_changes == {TABLE: ("column_removed", "keep")}


# -- crash safety ------------------------------------------------------------------------------------------------


def test_a_refresh_decided_before_a_crash_is_carried_out_after_it(tmp_path: Path, registry: RegistryDouble) -> None:
    source = started(tmp_path, "json", registry)
    source.topic.columns = [*BASE, {"field": "region", "type": "string", "optional": True, "default": "EU"}]
    source.signals.fail = True  # the signal cannot go out before the process dies
    source.publish({"id": 1, "label": "a", "qty": 5, "region": "EU"})
    source.sink.advance_rebuilds()
    assert source.phase is Phase.REFRESH_PENDING and source.signals.sent == []
    # kill -9, then a new process on the same checkpoint: the refresh is in the ledger and goes on.
    source.signals.fail = False
    source.sink = source.new_sink()
    source.publish({"id": 2, "label": "b", "qty": 2, "region": "EU"})
    assert source.signals.sent == [(TABLE, TOPIC)] and source.phase is Phase.SNAPSHOT_REQUESTED


def test_each_decision_is_counted_by_table_kind_and_action(tmp_path: Path, registry: RegistryDouble) -> None:
    source = started(tmp_path, "json", registry)
    source.topic.columns = [BASE[0], BASE[1]]
    result = source.publish({"id": 1, "label": "z"})
    labels = {"table": TABLE, "kind": "column_removed", "action": "rebuild"}
    before = metrics.REGISTRY.get_sample_value("cdc_mirror_schema_changes_total", labels) or 0.0
    metrics.record_batch(result)
    assert metrics.REGISTRY.get_sample_value("cdc_mirror_schema_changes_total", labels) == before + 1


# -- MySQL/MariaDB: the DDL itself, from the schema change topic ---------------------------------------------------


def ddl_record(source: Source, ddl: str, columns: list[dict[str, Any]], *, table: str = "items") -> KafkaRecord:
    """A schema change event as Debezium's MariaDB connector writes it to the topic named by its topic.prefix."""
    payload = {
        "source": {"connector": "mariadb", "db": "public", "table": table},
        "databaseName": "public",
        "ddl": ddl,
        "tableChanges": [
            {
                "type": "ALTER",
                "id": f'"public"."{table}"',
                "table": {
                    "primaryKeyColumnNames": ["id"],
                    "columns": [{"position": i + 1, **column} for i, column in enumerate(columns)],
                },
            }
        ],
    }
    return source.topic.raw(orjson.dumps({"schema": {"type": "struct"}, "payload": payload}))._replace(
        topic="dbserver1"
    )


BASE_DDL = [
    {"name": "id", "optional": False, "hasDefaultValue": False},
    {"name": "label", "optional": True, "hasDefaultValue": False},
    {"name": "qty", "optional": True, "hasDefaultValue": False},
]


def test_a_ddl_adding_a_defaulted_column_refreshes_a_table_no_row_changes(
    tmp_path: Path, registry: RegistryDouble
) -> None:
    source = started(tmp_path, "json", registry)
    region = {"name": "region", "optional": False, "hasDefaultValue": True, "defaultValueExpression": "EU"}
    ddl = ddl_record(source, "ALTER TABLE items ADD region varchar(8) NOT NULL DEFAULT 'EU'", [*BASE_DDL, region])
    result = source.sink.process_batch(1, [ddl])
    assert result.schema_changes == {TABLE: ("column_added", "refresh")} and source.phase is Phase.REFRESH_PENDING
    assert result.skipped.by_kind == {"schema_change": 1}
    table = source.sink.state.tables[TABLE]
    assert table.source_columns == ("id", "label", "qty") and table.ddl_refreshed == ("region",)
    # The same DDL read again (a restart before the next commit of its offsets) begins nothing more.
    assert source.sink.process_batch(2, [ddl]).schema_changes == {}


def test_a_ddl_removal_or_nullable_addition_waits_for_the_tables_own_events(
    tmp_path: Path, registry: RegistryDouble
) -> None:
    """The schema change topic is not ordered with the table's topic: only a refresh is safe at any time."""
    source = started(tmp_path / "add", "json", registry)
    note = {"name": "note", "optional": True, "hasDefaultValue": False}
    result = source.sink.process_batch(1, [ddl_record(source, "ALTER TABLE items ADD note text", [*BASE_DDL, note])])
    assert result.schema_changes == {} and source.phase is Phase.RUNNING
    source.topic.columns = [*BASE, field("note", "string")]
    source.batch = 2
    assert source.publish({"id": 1, "label": "a", "qty": 1, "note": "n"}).schema_changes == {
        TABLE: ("column_added", "union")
    }

    dropped = started(tmp_path / "drop", "json", registry)
    result = dropped.sink.process_batch(1, [ddl_record(dropped, "ALTER TABLE items DROP qty", BASE_DDL[:2])])
    assert result.schema_changes == {} and dropped.phase is Phase.RUNNING
    dropped.topic.columns = [BASE[0], BASE[1]]
    dropped.batch = 2
    assert dropped.publish({"id": 1, "label": "z"}).schema_changes == {TABLE: ("column_removed", "rebuild")}


def test_a_ddl_read_before_older_events_refreshes_once_and_rebuilds_nothing(
    tmp_path: Path, registry: RegistryDouble
) -> None:
    """A connector catching up reads the DDL (one small topic) before the table's events that preceded it."""
    source = started(tmp_path, "json", registry)
    region = {"name": "region", "optional": False, "hasDefaultValue": True}
    ddl = ddl_record(source, "ALTER TABLE items ADD region …", [*BASE_DDL, region])
    assert source.sink.process_batch(1, [ddl]).schema_changes == {TABLE: ("column_added", "refresh")}
    source.batch = 2
    # Events from before the DDL, in the old shape: no removal, nothing rebuilt.
    assert source.publish({"id": 2, "label": "old", "qty": 2}).schema_changes == {}
    # The first events after it show the column: already refreshed, so no second read of the table.
    source.topic.columns = [*BASE, {"field": "region", "type": "string", "optional": False, "default": "EU"}]
    assert source.publish({"id": 1, "label": "a", "qty": 1, "region": "EU"}).schema_changes == {}
    table = source.sink.state.tables[TABLE]
    assert table.source_columns == ("id", "label", "qty", "region") and table.ddl_refreshed == ()
    assert source.phase is Phase.SNAPSHOT_REQUESTED and source.signals.sent == [(TABLE, TOPIC)]  # one read


def test_a_ddl_and_the_rows_after_it_in_one_batch_are_one_change(tmp_path: Path, registry: RegistryDouble) -> None:
    source = started(tmp_path, "json", registry)
    region = {"name": "region", "optional": False, "hasDefaultValue": True}
    ddl = ddl_record(source, "ALTER TABLE items ADD region …", [*BASE_DDL, region])
    source.topic.columns = [*BASE, {"field": "region", "type": "string", "optional": False, "default": "EU"}]
    row = source.record("u", {"id": 1, "label": "a", "qty": 1, "region": "EU"})
    result = source.sink.process_batch(1, [ddl, row])
    assert result.schema_changes == {TABLE: ("column_added", "refresh")} and source.phase is Phase.REFRESH_PENDING


def test_a_ddl_of_a_table_not_mirrored_yet_changes_nothing(tmp_path: Path, registry: RegistryDouble) -> None:
    source = started(tmp_path, "json", registry)
    result = source.sink.process_batch(1, [ddl_record(source, "CREATE TABLE other …", BASE_DDL, table="other")])
    assert result.schema_changes == {} and set(source.sink.state.tables) == {TABLE}


def test_the_documented_schema_change_event_names_the_altered_table_and_its_columns() -> None:
    """Debezium's documented MySQL schema change value: ``ALTER TABLE customers ADD middle_name varchar(255)``."""
    sample = Path(__file__).parents[2] / "data" / "debezium-samples" / "14_mysql_schema_change_topic_value.doc.json"
    payload = orjson.loads(sample.read_bytes())["payload"]
    record = KafkaRecord("dbserver1", 0, 7, None, None)
    (table,) = altered_tables(record, payload)
    assert table.topic == "dbserver1.inventory.customers"
    assert table.columns == ("id", "first_name", "middle_name", "last_name", "email")
    assert table.unfilled == {"middle_name"}  # nullable, no default; the others are NOT NULL
    assert table.position == ("dbserver1", 0, 7)
