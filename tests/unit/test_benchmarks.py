"""The benchmark runner still runs against the current core (its figures are not checked: nothing here is timed)."""

from __future__ import annotations

import pytest

from benchmarks.bench import main


@pytest.mark.parametrize("with_schema", [False, True])
def test_bench_convert_runs_on_a_small_dump(with_schema: bool, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["convert", "--events", "2000", *(["--with-schema"] if with_schema else [])]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    figures = dict(item.split("=") for item in last.split())
    assert float(figures["events_per_second"]) > 0


def test_target_dependent_defaults() -> None:
    from benchmarks.bench import parse_args

    tables = parse_args(["tables"])
    assert (tables.tables, tables.partitions, tables.changes, tables.landing) == (1000, 2, 32, "local")
    assert (tables.trigger, tables.request_ms, tables.publish_parallelism) == ("2s", 20.0, 16)
    stream = parse_args(["stream", "--spark-master", "spark://127.0.0.1:7077"])
    assert (stream.partitions, stream.spark_master, stream.decode_on) == (8, "spark://127.0.0.1:7077", "executors")
    assert parse_args(["stream"]).spark_master == "local[*]"
    fresh = parse_args(["freshness", "--rate", "500", "--seconds", "5"])
    assert (fresh.rate, fresh.seconds, fresh.trigger, fresh.partitions) == (500, 5, "10s", 2)
    dfs = parse_args(["tables", "--tables", "10", "--landing", "dfs", "--request-ms", "5", "--trigger", "1s"])
    assert (dfs.tables, dfs.landing, dfs.request_ms, dfs.trigger) == (10, "dfs", 5.0, "1s")


@pytest.mark.parametrize(
    "argv", [["tables", "--tables", "0"], ["freshness", "--rate", "0"], ["tables", "--landing", "s3"], ["nothing"]]
)
def test_bad_arguments_are_refused(argv: list[str]) -> None:
    from benchmarks.bench import parse_args

    with pytest.raises(SystemExit):
        parse_args(argv)


def test_percentile_is_nearest_rank() -> None:
    import math

    from benchmarks.service import percentile

    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.95) == 95.0
    assert percentile(list(reversed(values)), 1.0) == 100.0
    assert percentile(values, 0.0) == 1.0
    assert percentile([7.0], 0.95) == 7.0
    assert math.isnan(percentile([], 0.5))
    with pytest.raises(ValueError, match="0..1"):
        percentile(values, 95)


def test_batch_lines_are_found_behind_any_log_prefix() -> None:
    from benchmarks.service import batch_lines

    log = (
        '2026-01-01 00:00:00,000 INFO connector.run {"event":"batch","batch_id":0,"records":5,"collect_s":1.5,'
        '"sink_s":0.25,"duration_s":1.75}\n'
        "25/01/01 WARN InternalKafkaConsumerPool: Pool exceeds its soft max size\n"
        '2026-01-01 00:00:01,000 INFO connector.run {"event":"batch","batch_id":1,"records":0}\n'
        '2026-01-01 INFO connector.run {"event":"batch", truncated\n'
    )
    batches = batch_lines(log)
    assert [b["batch_id"] for b in batches] == [0, 1]
    assert batches[0]["collect_s"] == 1.5
    assert batch_lines(log.encode()) == batches


def test_generated_events_carry_their_source_time_in_a_column() -> None:
    import orjson

    from benchmarks.bench_tables import table_topics
    from benchmarks.service import debezium_event
    from connector.config import MirrorSettings
    from connector.landing_zone import table_for_topic

    key, value = debezium_event(3, 1, "u", 1_700_000_000_123)
    payload = orjson.loads(value)
    assert orjson.loads(key) == {"id": 3}
    assert payload["op"] == "u"
    assert payload["after"]["produced_ms"] == payload["ts_ms"] == 1_700_000_000_123
    topics = table_topics("bt1", 3)
    assert topics == ["bt1.bench.t00000", "bt1.bench.t00001", "bt1.bench.t00002"]
    assert table_for_topic(topics[1], MirrorSettings()).id == "bench.t00001"


def test_cpu_of_this_process_and_its_tree_is_read_from_proc() -> None:
    import os

    from benchmarks.cpu import cpu_seconds, process_tree

    assert cpu_seconds() > 0
    assert cpu_seconds(os.getpid()) > 0
    assert cpu_seconds(2**22 + 12345) == 0.0  # no such process
    assert process_tree([os.getpid()])[0] == os.getpid()
