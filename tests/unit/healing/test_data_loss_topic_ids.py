"""Topic identity as part of the position, and gaps a running batch finds healed in-process (issue 42).

The ledger records each topic's Kafka id (KIP-516) with a batch's offsets; a changed id is a ``recreated`` gap
whatever the offsets say, at start-up and in every batch. A gap found while the query runs is recorded and its
table's rebuild begun in one commit, through the same code as the start-up's healing. The brokers' answers are
plain data here; tests/integration/test_kafka_read.py reads past real gaps, tests/e2e/test_rebuild_e2e.py runs it all.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from connector.collect.kafka_read import ReadGap
from connector.config import MirrorSettings
from connector.healing.data_loss import LostRange, Partition, recreated_by_id
from connector.healing.data_loss_healing import heal_data_loss, heal_in_batch, lost_in_batch
from connector.healing.query_failure import SourceDataLost
from connector.publish.ledger import BatchLedger
from connector.publish.ledger_format import state_from_json, state_to_json
from connector.publish.ledger_state import BatchSource, DataGap, LedgerState
from connector.publish.lifecycle import Phase
from connector.storage.local import LocalStorage
from tests.unit.healing.test_data_loss_healing import (
    CUSTOMERS_TOPIC,
    HEARTBEAT,
    ITEMS_TOPIC,
    NOW,
    ORDERS_TOPIC,
    Brokers,
    ledger_state,
    write_spark_checkpoint,
)

IDS = {CUSTOMERS_TOPIC: "id-customers", ORDERS_TOPIC: "id-orders", ITEMS_TOPIC: "id-items"}


def with_ids(state: LedgerState, ids: dict[str, str] | None = None) -> LedgerState:
    return replace(state, topic_ids=dict(IDS if ids is None else ids))


# -- the ledger's record ---------------------------------------------------------------------------------------------


def test_a_batch_records_its_topics_ids_with_its_offsets_and_they_survive_the_json_form() -> None:
    state = ledger_state().with_source(BatchSource(5, ('{"a": {"0": 3}}',), tuple(sorted(IDS.items()))))
    assert state.topic_ids == IDS
    again = state_from_json(orjson.loads(orjson.dumps(state_to_json(state))))
    assert again.topic_ids == IDS and again.sources == state.sources


def test_a_ledger_written_without_ids_is_continued_and_records_them_from_its_next_batch() -> None:
    old = state_to_json(ledger_state())
    assert "topic_ids" not in old  # what the previous release wrote, and what this one writes without ids
    state = state_from_json(old)
    assert state.topic_ids == {}
    assert lost_in_batch(state, IDS, ()) == []  # nothing recorded, nothing judged
    assert state.with_source(BatchSource(5, ("{}",), (("t", "x"),))).topic_ids == {"t": "x"}


def test_a_topic_not_described_now_keeps_its_recorded_id() -> None:
    state = with_ids(ledger_state())
    after = state.with_source(BatchSource(5, ("{}",), ((ITEMS_TOPIC, "id-items"),)))
    assert after.topic_ids == IDS
    assert state.with_topic_ids({ITEMS_TOPIC: "id-items"}) is state


# -- a changed id is a recreated gap -------------------------------------------------------------------------------


def test_a_changed_id_is_a_recreated_gap_at_every_partition_it_carried_from_the_published_offsets() -> None:
    published = {Partition(ORDERS_TOPIC, 0): 50, Partition(ORDERS_TOPIC, 1): 60, Partition(ITEMS_TOPIC, 0): 70}
    now = {**IDS, ORDERS_TOPIC: "new"}
    assert recreated_by_id(IDS, now, published) == [
        LostRange(ORDERS_TOPIC, 0, 50, None, "recreated", None),
        LostRange(ORDERS_TOPIC, 1, 60, None, "recreated", None),
    ]
    # A topic absent now (deleted, not created again yet) is not read, and not judged until it is back.
    assert recreated_by_id(IDS, {ITEMS_TOPIC: "id-items"}, published) == []


def test_a_running_batch_rebuilds_exactly_the_table_of_a_topic_created_again(tmp_path: Path) -> None:
    ledger = BatchLedger(LocalStorage(tmp_path / "cp"))
    state = with_ids(ledger_state())
    ledger.commit_state(state)
    now_ids = {**IDS, ORDERS_TOPIC: "new-orders"}
    lost = lost_in_batch(state, now_ids, ())
    new = heal_in_batch(state, lost, MirrorSettings(), ledger.commit_state, now_ids, now=NOW)
    assert [(g.table, g.topic, g.partition, g.first, g.kind) for g in new] == [
        ("sales.orders", ORDERS_TOPIC, 0, 50, "recreated"),
        ("sales.orders", ORDERS_TOPIC, 1, 60, "recreated"),
    ]
    on_disk = BatchLedger(ledger.storage).state
    assert on_disk.tables["sales.orders"].lifecycle.phase is Phase.DELETING
    assert "data lost at shop.sales.orders[0]@50.." in (on_disk.tables["sales.orders"].lifecycle.reason or "")
    assert on_disk.topic_ids == now_ids  # recorded with the gaps: judged once
    for other in ("public.customers", "public.items"):
        assert on_disk.tables[other] == state.tables[other]
    # The same batch collected again (or retried) finds the same gaps: recorded already, nothing committed.
    assert (
        heal_in_batch(on_disk, lost_in_batch(on_disk, now_ids, ()), MirrorSettings(), _refuse, now_ids, now=NOW) == []
    )


def _refuse(state: LedgerState) -> None:
    pytest.fail(f"nothing to commit, but committed {state}")


# -- gaps the tasks read past ------------------------------------------------------------------------------------------


def test_records_deleted_under_a_running_batch_rebuild_their_table_and_a_heartbeat_gap_only_is_recorded(
    tmp_path: Path,
) -> None:
    ledger = BatchLedger(LocalStorage(tmp_path / "cp"))
    ledger.commit_state(ledger_state())
    read = (ReadGap(ITEMS_TOPIC, 0, 70, 89, "retention"), ReadGap(HEARTBEAT, 0, 4, None, "recreated"))
    new = heal_in_batch(
        ledger.state, lost_in_batch(ledger.state, {}, read), MirrorSettings(), ledger.commit_state, {}, now=NOW
    )
    assert new == [
        DataGap("public.items", ITEMS_TOPIC, 0, 70, 89, "retention", NOW),
        DataGap(None, HEARTBEAT, 0, 4, None, "recreated", NOW),
    ]
    state = BatchLedger(ledger.storage).state
    assert state.tables["public.items"].lifecycle.phase is Phase.DELETING
    assert state.tables["public.customers"].lifecycle.phase is Phase.RUNNING
    assert state.data_gaps == tuple(new)


def test_a_gap_of_a_table_whose_rebuild_has_not_asked_its_snapshot_yet_begins_no_second_rebuild(
    tmp_path: Path,
) -> None:
    ledger = BatchLedger(LocalStorage(tmp_path / "cp"))
    ledger.commit_state(ledger_state())
    first = lost_in_batch(ledger.state, {}, (ReadGap(ITEMS_TOPIC, 0, 70, 89, "retention"),))
    heal_in_batch(ledger.state, first, MirrorSettings(), ledger.commit_state, {}, now=NOW)
    begun = ledger.state.tables["public.items"].lifecycle
    later = lost_in_batch(ledger.state, {}, (ReadGap(ITEMS_TOPIC, 0, 95, 120, "retention"),))
    heal_in_batch(ledger.state, later, MirrorSettings(), ledger.commit_state, {}, now=NOW + 5)
    assert ledger.state.tables["public.items"].lifecycle == begun  # its snapshot comes after both gaps
    assert [g.first for g in ledger.state.data_gaps] == [70, 95]


def test_on_data_lost_stop_ends_the_batch_with_one_line_and_changes_nothing(tmp_path: Path) -> None:
    state = with_ids(ledger_state())
    lost = lost_in_batch(state, {**IDS, CUSTOMERS_TOPIC: "new"}, ())
    with pytest.raises(SourceDataLost, match=r"shop\.public\.customers\[0\]@100\.\. \(recreated, table public\."):
        heal_in_batch(state, lost, MirrorSettings(on_data_lost="stop"), _refuse, IDS, now=NOW)


# -- the start-up check compares the recorded ids ------------------------------------------------------------------


def test_the_start_up_check_is_given_the_recorded_ids_and_records_the_new_ones_with_the_gap(tmp_path: Path) -> None:
    ledger = BatchLedger(LocalStorage(tmp_path / "cp"))
    state = with_ids(ledger_state())
    ledger.commit_state(state)
    spark = write_spark_checkpoint(tmp_path / "cp" / "spark", 4, orjson.loads(state.sources[-1].offsets[0]))
    # The new log reaches past offset 100 already: only the id tells (data_loss.find_lost).
    brokers = Brokers(LostRange(CUSTOMERS_TOPIC, 0, 100, None, "recreated", 0), ids={**IDS, CUSTOMERS_TOPIC: "new"})
    gaps = heal_data_loss(
        ledger, spark, LocalStorage(tmp_path / "lz"), MirrorSettings(), brokers, subscribed=(), now=NOW
    )
    assert brokers.recorded_ids == [IDS]
    assert [(g.table, g.kind) for g in gaps] == [("public.customers", "recreated")]
    on_disk = BatchLedger(ledger.storage).state
    assert on_disk.topic_ids[CUSTOMERS_TOPIC] == "new"
    assert on_disk.tables["public.customers"].lifecycle.phase is Phase.DELETING
    assert orjson.loads(on_disk.resume_offsets or "")[CUSTOMERS_TOPIC] == {"0": 0}
