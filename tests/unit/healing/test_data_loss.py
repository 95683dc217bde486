"""Which offsets the mirror still needs Kafka no longer holds: the rules, on plain broker data.

The broker side (``read_brokers``) is exercised on a real broker in
``tests/integration/test_data_loss_detection.py``; here every rule of ``find_lost`` and the offsets parsers.
"""

from __future__ import annotations

import pytest

from connector.healing.data_loss import (
    LostRange,
    Partition,
    TopicState,
    expected_from_json,
    expected_from_map,
    find_lost,
    read_offsets_log,
    with_new_partitions,
)

ORDERS = "db.public.orders"
ITEMS = "db.public.items"


def topic(partitions: dict[int, tuple[int, int]], policy: str | None = "delete", topic_id: str = "id-1") -> TopicState:
    return TopicState(topic_id=topic_id, cleanup_policy=policy, partitions=partitions)


def test_nothing_is_lost_while_the_log_still_starts_at_or_before_the_expected_offset() -> None:
    expected = {Partition(ORDERS, 0): 100, Partition(ORDERS, 1): 0, Partition(ITEMS, 0): 7}
    topics = {ORDERS: topic({0: (100, 250), 1: (0, 0)}), ITEMS: topic({0: (3, 7)})}
    assert find_lost(expected, topics) == []


def test_records_aged_out_past_the_expected_offset_are_one_retention_range() -> None:
    expected = {Partition(ORDERS, 0): 100, Partition(ORDERS, 1): 40}
    topics = {ORDERS: topic({0: (100, 250), 1: (990, 1000)})}
    assert find_lost(expected, topics) == [LostRange(ORDERS, 1, 40, 989, "retention", 990)]
    assert find_lost(expected, topics)[0].describe() == f"{ORDERS}[1]@40..989 (retention)"


def test_a_log_emptied_by_retention_loses_up_to_its_end() -> None:
    """Every record aged out: log start equals the end offset; the next record gets that offset."""
    assert find_lost({Partition(ORDERS, 0): 5}, {ORDERS: topic({0: (80, 80)})}) == [
        LostRange(ORDERS, 0, 5, 79, "retention", 80)
    ]


@pytest.mark.parametrize("policy", ["compact", " compact ", "compact,compact"])
def test_a_compacted_topic_has_no_retention_loss(policy: str) -> None:
    """Compaction leaves gaps by design; its records never age out, so a later log start is no loss."""
    assert find_lost({Partition(ORDERS, 0): 5}, {ORDERS: topic({0: (80, 200)}, policy)}) == []


@pytest.mark.parametrize("policy", ["delete", "compact,delete", "delete,compact", None])
def test_a_topic_whose_records_age_out_reports_the_gap(policy: str | None) -> None:
    """``compact,delete`` ages records out too; an unreadable policy is treated as ``delete`` (never hidden)."""
    assert find_lost({Partition(ORDERS, 0): 5}, {ORDERS: topic({0: (80, 200)}, policy)}) == [
        LostRange(ORDERS, 0, 5, 79, "retention", 80)
    ]


def test_an_end_offset_below_the_expected_one_is_a_recreated_topic() -> None:
    """Deleted and created again: offsets start over, what the old log held after 500 is unknown."""
    topics = {ORDERS: topic({0: (0, 12)}, topic_id="new")}
    assert find_lost({Partition(ORDERS, 0): 500}, topics) == [LostRange(ORDERS, 0, 500, None, "recreated", 0)]


def test_a_different_topic_id_is_a_recreated_topic_even_when_the_new_log_is_longer() -> None:
    topics = {ORDERS: topic({0: (0, 9000)}, topic_id="new")}
    expected = {Partition(ORDERS, 0): 500}
    assert find_lost(expected, topics, {ORDERS: "old"}) == [LostRange(ORDERS, 0, 500, None, "recreated", 0)]
    assert find_lost(expected, topics, {ORDERS: "new"}) == []
    assert find_lost(expected, topics, {ITEMS: "other"}) == []  # no id recorded for this topic: offsets decide


def test_a_recreated_compacted_topic_is_still_a_new_log() -> None:
    """Compaction explains gaps, not a log that starts over."""
    topics = {ORDERS: topic({0: (0, 3)}, "compact", topic_id="new")}
    assert find_lost({Partition(ORDERS, 0): 50}, topics) == [LostRange(ORDERS, 0, 50, None, "recreated", 0)]


def test_a_vanished_topic_or_partition_is_partition_gone() -> None:
    expected = {Partition(ORDERS, 0): 10, Partition(ORDERS, 3): 4, Partition(ITEMS, 0): 0}
    topics = {ORDERS: topic({0: (0, 10)})}
    assert find_lost(expected, topics) == [
        LostRange(ITEMS, 0, 0, None, "partition-gone", None),
        LostRange(ORDERS, 3, 4, None, "partition-gone", None),
    ]


def test_spark_placeholders_for_latest_and_earliest_name_no_position() -> None:
    topics = {ORDERS: topic({0: (50, 60), 1: (50, 60)})}
    assert find_lost({Partition(ORDERS, 0): -1, Partition(ORDERS, 1): -2}, topics) == []


def test_partitions_the_checkpoint_does_not_know_are_expected_from_offset_zero() -> None:
    """Spark reads a partition it discovers from 0 and fails when retention already took its first records."""
    topics = {ORDERS: topic({0: (0, 10), 1: (30, 40)}), ITEMS: topic({0: (5, 9)}, "compact")}
    expected = with_new_partitions({Partition(ORDERS, 0): 10}, topics, [ORDERS, ITEMS, "not.there"])
    assert expected == {Partition(ORDERS, 0): 10, Partition(ORDERS, 1): 0, Partition(ITEMS, 0): 0}
    assert find_lost(expected, topics) == [LostRange(ORDERS, 1, 0, 29, "retention", 30)]


def test_offsets_json_lines_of_spark_and_of_the_ledger() -> None:
    lines = ['{"db.public.orders":{"1":40,"0":100}}', "", '{"db.public.items":{"0":7}}']
    assert expected_from_json(lines) == {
        Partition(ORDERS, 0): 100,
        Partition(ORDERS, 1): 40,
        Partition(ITEMS, 0): 7,
    }
    assert expected_from_json(['{"logOffset":3}']) is None  # the file source: nothing to check
    assert expected_from_json(["not json"]) is None
    assert expected_from_json(['{"t":{"x":1}}']) is None
    assert expected_from_map({"t": {"0": 5}}) == {Partition("t", 0): 5}
    assert expected_from_map({"t": {"0": True}}) is None


def test_a_spark_offsets_log_file() -> None:
    text = (
        "v1\n"
        '{"batchWatermarkMs":0,"batchTimestampMs":1764139747000,"conf":{"spark.sql.shuffle.partitions":"4"}}\n'
        '{"db.public.orders":{"0":192}}'
    )
    assert read_offsets_log(text) == {Partition(ORDERS, 0): 192}
    assert read_offsets_log('{"db.public.orders":{"0":192}}') is None
    assert read_offsets_log('v1\n{}\n{"logOffset":0}') is None
