"""A landing zone belongs to one Debezium source: recorded once, other prefixes and folder collisions refused."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import orjson
import pytest

from connector.config import MirrorSettings, TableSettings
from connector.publish.ledger import BatchLedger
from connector.publish.ledger_format import state_from_json
from connector.publish.ledger_state import LedgerState, TableState
from connector.publish.source_identity import (
    SOURCE_FILE,
    SourceClaim,
    SourceConflict,
    SourceIdentity,
    check_topic_prefix,
    check_topics,
    topic_prefix,
)
from connector.storage import LocalStorage
from connector.stream.shutdown import GracefulStop

MIRROR = MirrorSettings()


def test_prefix_of_table_topics_only() -> None:
    assert topic_prefix("chaos.public.customers") == "chaos"
    assert topic_prefix("my.server.public.customers") == "my.server"
    assert topic_prefix("__debezium-heartbeat.chaos") is None
    assert topic_prefix("chaos.transaction") is None
    assert topic_prefix("chaos") is None


def test_one_prefix_passes_two_prefixes_or_one_folder_for_two_topics_are_refused() -> None:
    topics = ["__debezium-heartbeat.chaos", "chaos.public.customers", "chaos.sales.orders"]
    assert check_topics(topics, MIRROR, "lz") == "chaos"
    assert check_topics(["__debezium-heartbeat.chaos"], MIRROR, "lz") is None
    with pytest.raises(SourceConflict) as collision:
        check_topics(["chaos.public.customers", "other.public.customers"], MIRROR, "lz")
    message = str(collision.value)
    assert "chaos.public.customers and other.public.customers" in message and "public.schema/customers" in message
    assert "its own landing zone (--landing-zone)" in message
    with pytest.raises(SourceConflict, match=r"2 Debezium sources \(topic prefixes 'chaos' .*'other'"):
        check_topics(["chaos.public.customers", "other.sales.orders"], MIRROR, "lz")
    # Any collision, also one prefix with a table override naming another topic's table.
    renamed = MirrorSettings(tables={"chaos.public.clients": TableSettings(table="customers")})
    with pytest.raises(SourceConflict, match="chaos.public.clients and chaos.public.customers"):
        check_topics(["chaos.public.customers", "chaos.public.clients"], renamed, "lz")


def commit_claim(claim: SourceClaim, topics: list[str], databases: tuple[str, ...] = ()) -> None:
    """What the sink does: admit a batch's topics, then record the source with the batch's commit."""
    claim.admit(topics, databases=databases)
    claim.ledger.commit_state(claim.recorded_in(claim.ledger.state))


def test_the_first_claim_records_the_source_and_another_prefix_is_refused(tmp_path: Path) -> None:
    landing = LocalStorage(str(tmp_path / "lz"))
    ledger = BatchLedger(LocalStorage(str(tmp_path / "cp")))
    claim = SourceClaim(landing, ledger, MIRROR)
    commit_claim(claim, ["chaos.public.customers"], databases=("inventory",))
    recorded = orjson.loads((tmp_path / "lz" / SOURCE_FILE).read_bytes())
    assert recorded == {"topicPrefix": "chaos", "databases": ["inventory"]}
    assert SourceIdentity.from_json(BatchLedger(ledger.storage).state.source_identity or "") == SourceIdentity(
        "chaos", ("inventory",)
    )
    landing.create("public.schema/customers/00000000000000000001.parquet", b"x")
    # A second source with its own checkpoint, the same landing zone: refused, naming both prefixes.
    fresh = BatchLedger(LocalStorage(str(tmp_path / "cp2")))
    with pytest.raises(SourceConflict) as refused:
        check_topic_prefix("other", landing, fresh.state, where_ledger="cp2", topics=r"other\..*")
    message = str(refused.value)
    assert "topic prefix 'chaos'" in message and "topic prefix 'other'" in message and "nothing changed" in message
    # A new topic of the batch path that lands in a known table's folder.
    with pytest.raises(SourceConflict, match="chaos.public.customers and other.public.customers"):
        claim.admit(["other.public.customers"])
    with pytest.raises(SourceConflict, match="topic prefix 'chaos'.*topic prefix 'other'"):
        SourceClaim(landing, fresh, MIRROR).admit(["other.sales.orders"])
    assert orjson.loads((tmp_path / "lz" / SOURCE_FILE).read_bytes())["topicPrefix"] == "chaos"


def test_a_claim_on_an_empty_landing_zone_can_be_made_again(tmp_path: Path) -> None:
    """A wrong pattern on a new landing zone, corrected before anything was published, is not held against it."""
    landing = LocalStorage(str(tmp_path / "lz"))
    commit_claim(SourceClaim(landing, BatchLedger(LocalStorage(str(tmp_path / "cp1"))), MIRROR), ["wrong.public.t"])
    commit_claim(SourceClaim(landing, BatchLedger(LocalStorage(str(tmp_path / "cp2"))), MIRROR), ["right.public.t"])
    assert orjson.loads((tmp_path / "lz" / SOURCE_FILE).read_bytes())["topicPrefix"] == "right"


def test_a_ledger_from_before_sources_were_recorded_shows_its_source_by_its_tables_topics(tmp_path: Path) -> None:
    state = state_from_json(
        {
            "version": 1,
            "last_committed_batch": 3,
            "tables": {"public.customers": {"folder": "public.schema/customers", "topic": "chaos.public.customers"}},
        }
    )
    assert state.source_identity is None  # state.json without the field still loads
    landing = LocalStorage(str(tmp_path / "lz"))
    with pytest.raises(SourceConflict, match="topic prefix 'chaos'"):
        check_topic_prefix("other", landing, state, where_ledger="cp")
    assert check_topic_prefix("chaos", landing, state, where_ledger="cp") == SourceIdentity("chaos")
    merged = LedgerState(
        3,
        {
            "a": TableState("public.schema/a", topic="chaos.public.a"),
            "b": TableState("public.schema/b", topic="other.public.b"),
        },
    )
    with pytest.raises(SourceConflict, match="already holds tables of 2 Debezium sources"):
        check_topic_prefix("chaos", landing, merged, where_ledger="cp")


def test_the_landing_zone_and_a_checkpoint_of_two_sources_are_refused(tmp_path: Path) -> None:
    landing = LocalStorage(str(tmp_path / "lz"))
    landing.create(SOURCE_FILE, SourceIdentity("chaos").to_json())
    state = LedgerState(source_identity=SourceIdentity("other").to_json().decode())
    with pytest.raises(SourceConflict, match="two different mirrors"):
        check_topic_prefix("other", landing, state, where_ledger="cp")


def test_graceful_stop_installed_twice_restores_the_first_handlers() -> None:
    before = signal.getsignal(signal.SIGTERM)
    # Not always default_int_handler: a process started in the background by a shell without job control
    # inherits SIGINT ignored (as CI may start pytest), and restoring means giving back what was found.
    before_int = signal.getsignal(signal.SIGINT)
    graceful = GracefulStop()
    graceful.install()
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as PySpark's SparkContext replaces SIGINT's
    graceful.install()
    os.kill(os.getpid(), signal.SIGINT)
    assert graceful.requested.wait(5) and graceful.signal_name == "SIGINT"
    graceful.restore()
    assert signal.getsignal(signal.SIGTERM) == before
    assert signal.getsignal(signal.SIGINT) == before_int  # the first handler found, not PySpark's replacement


def test_a_batch_whose_topic_belongs_to_another_source_fails_before_it_publishes(tmp_path: Path) -> None:
    """Mid-run (a topic that appears after the start): the sink refuses it and publishes nothing of the batch."""
    from connector.sink import MirrorSink
    from tests.support.debezium import Topic, field

    columns = [field("id", "int32", optional=False), field("name", "string")]
    sink = MirrorSink(LocalStorage(tmp_path / "lz"), LocalStorage(tmp_path / "cp"), MirrorSettings())
    ours = Topic("chaos.public.customers", columns, ["id"])
    sink.process_batch(0, [ours.record("c", None, {"id": 1, "name": "a"})])
    theirs = Topic("other.public.customers", columns, ["id"])
    with pytest.raises(SourceConflict, match="other.public.customers"):
        sink.process_batch(1, [theirs.record("c", None, {"id": 2, "name": "b"})])
    folder = tmp_path / "lz" / "public.schema" / "customers"
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith("_")) == ["00000000000000000001.parquet"]
    assert sink.state.last_committed_batch == 0
