"""Where a micro-batch ends: Spark's Kafka source's rules (starting offsets, rate limit, minimum wait)."""

from __future__ import annotations

import pytest

from connector.errors import ConfigError
from connector.kafka.admission import (
    TriggerDelay,
    duration_ms,
    new_records,
    rate_limit,
    sorted_offsets,
    starting_offsets,
)

EARLIEST = {"a": {"0": 5, "1": 0}, "b": {"0": 0}}
LATEST = {"a": {"0": 50, "1": 20}, "b": {"0": 7}}


def test_earliest_and_latest_are_the_logs_offsets() -> None:
    assert starting_offsets("earliest", EARLIEST, LATEST) == EARLIEST
    assert starting_offsets("latest", EARLIEST, LATEST) == LATEST


def test_json_offsets_take_spark_s_minus_two_and_minus_one_and_default_to_earliest() -> None:
    start = starting_offsets('{"a": {"0": 9, "1": -1}, "b": {"0": -2}}', EARLIEST, LATEST)
    assert start == {"a": {"0": 9, "1": 20}, "b": {"0": 0}}
    # A partition the JSON leaves out starts at its log's start, as a partition created later does.
    assert starting_offsets('{"a": {"1": 3}}', EARLIEST, LATEST) == {"a": {"0": 5, "1": 3}, "b": {"0": 0}}


def test_json_naming_a_partition_the_pattern_does_not_take_is_refused() -> None:
    with pytest.raises(ConfigError, match="c-0"):
        starting_offsets('{"c": {"0": 1}}', EARLIEST, LATEST)
    with pytest.raises(ConfigError, match="source.starting_offsets"):
        starting_offsets("newest", EARLIEST, LATEST)


def test_rate_limit_splits_the_limit_by_what_each_partition_has_waiting() -> None:
    start = {"a": {"0": 0, "1": 0}}
    latest = {"a": {"0": 300, "1": 100}}
    assert rate_limit(100, start, latest) == {"a": {"0": 75, "1": 25}}


def test_rate_limit_never_starves_a_small_partition_nor_passes_the_log_s_end() -> None:
    start = {"a": {"0": 0, "1": 10}, "b": {"0": 4}}
    latest = {"a": {"0": 10_000, "1": 11}, "b": {"0": 4}}
    # a-1's share is 0.01 of a record: it still gets one; b-0 has nothing waiting and stays.
    assert rate_limit(100, start, latest) == {"a": {"0": 99, "1": 11}, "b": {"0": 4}}
    assert rate_limit(1_000_000, start, latest) == latest


def test_rate_limit_starts_a_new_partition_at_offset_zero() -> None:
    start = {"a": {"0": 100}}
    latest = {"a": {"0": 200, "1": 100}, "new": {"0": 200}}
    assert rate_limit(40, start, latest) == {"a": {"0": 110, "1": 10}, "new": {"0": 20}}
    assert new_records(start, latest) == 400


def test_rate_limit_with_nothing_waiting_ends_where_the_logs_end() -> None:
    # A log that now ends before the start (a topic created again) is the data-loss check's to report.
    assert rate_limit(10, {"a": {"0": 50}}, {"a": {"0": 3}}) == {"a": {"0": 3}}


def test_offsets_serialise_in_one_order() -> None:
    offsets = {"b": {"10": 1, "2": 2}, "a": {"0": 3}, "empty": {}}
    assert list(sorted_offsets(offsets)) == ["a", "b"]
    assert list(sorted_offsets(offsets)["b"]) == ["2", "10"]


def test_min_offsets_hold_a_batch_until_enough_records_or_the_delay_passed() -> None:
    now = [0.0]
    delay = TriggerDelay(min_records=100, max_delay_ms=60_000, clock_ms=lambda: now[0])
    few = ({"a": {"0": 0}}, {"a": {"0": 10}})
    assert not delay.hold(*few)  # a query's first batch never waits
    now[0] = 1_000
    assert delay.hold(*few)
    assert not delay.hold({"a": {"0": 0}}, {"a": {"0": 100}})
    now[0] = 30_000
    assert delay.hold(*few)
    now[0] = 61_000
    assert not delay.hold(*few)  # waited max_trigger_delay since the last batch ran


@pytest.mark.parametrize(
    ("text", "ms"), [("15m", 900_000), ("30s", 30_000), ("500ms", 500), ("250", 250), ("2h", 7_200_000)]
)
def test_durations_are_spark_s(text: str, ms: float) -> None:
    assert duration_ms(text, "source.max_trigger_delay") == ms


def test_a_duration_spark_would_not_take_names_the_setting() -> None:
    with pytest.raises(ConfigError, match="source.max_trigger_delay"):
        duration_ms("soon", "source.max_trigger_delay")
