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
    assert (tables.tables, tables.partitions, tables.changes, tables.landing) == (1000, 2, 30, "local")
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
    from connector.landing_zone.layout import table_for_topic

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


def test_trickle_defaults_and_flags() -> None:
    from benchmarks.bench import parse_args

    trickle = parse_args(["tables", "--trickle"])
    assert (trickle.trickle, trickle.trigger, trickle.trickle_seconds, trickle.tables) == (True, "5s", 40.0, 1000)
    assert parse_args(["tables", "--trickle", "--trigger", "1s"]).trigger == "1s"
    assert parse_args(["tables"]).trickle is False
    with pytest.raises(SystemExit):
        parse_args(["tables", "--trickle", "--trickle-seconds", "0"])


def test_trickle_bursts_update_every_table_once_in_bursts_of_100_to_300() -> None:
    from benchmarks.bench_tables import trickle_bursts

    assert trickle_bursts(1000) == [100, 300, 150, 250, 200]
    for tables in (1, 7, 10, 999, 2001):
        bursts = trickle_bursts(tables)
        assert sum(bursts) == tables
        assert all(b >= 0 for b in bursts)
    assert trickle_bursts(10, (1, 1)) == [5, 5]


def test_fit_line_recovers_fixed_and_marginal_cost() -> None:
    from benchmarks.bench_tables import fit_line

    exact = [(float(x), 0.5 + 0.0174 * x) for x in (100, 150, 200, 250, 300)]
    fixed, marginal = fit_line(exact)
    assert fixed == pytest.approx(0.5)
    assert marginal == pytest.approx(0.0174)
    # Symmetric noise around the line leaves it where it is.
    noisy = [(100.0, 2.0 + 0.1), (100.0, 2.0 - 0.1), (300.0, 4.0 + 0.2), (300.0, 4.0 - 0.2)]
    assert fit_line(noisy) == pytest.approx((1.0, 0.01))
    with pytest.raises(ValueError, match="two different x"):
        fit_line([(100.0, 1.0), (100.0, 2.0)])
    with pytest.raises(ValueError, match="two different x"):
        fit_line([])


def test_trickle_summary_prints_each_batch_and_fits_them() -> None:
    from benchmarks.bench_tables import trickle_summary

    batches = [
        {"batch_id": 3, "tables": 100, "duration_s": 1.1, "collect_s": 0.9},
        {"batch_id": 4, "tables": 300, "duration_s": 2.3, "collect_s": 2.0},
    ]
    lines, (fixed, marginal) = trickle_summary(batches)
    assert lines == [
        "batch 3: 100 changed tables in 1.10 s (11.0 ms per table; collect 0.90 s)",
        "batch 4: 300 changed tables in 2.30 s (7.7 ms per table; collect 2.00 s)",
    ]
    assert (fixed, marginal) == pytest.approx((0.5, 0.006))


def test_load_average_and_cpu_model_are_read_from_proc() -> None:
    from benchmarks.cpu import cpu_model, load_average

    figures = load_average().split(",")
    assert len(figures) == 3
    assert all(float(f) >= 0 for f in figures)
    assert cpu_model() != ""


def test_stream_batch_times_set_the_first_batch_apart(capsys: pytest.CaptureFixture[str]) -> None:
    import math

    from benchmarks.bench_stream import _print_batch_times

    # Query started at 10.0; 3 batches of 100 events end at 14.0, 15.0 and 16.0 (the query at 16.0).
    first, later = _print_batch_times(10.0, [14.0, 15.0, 16.0], 16.0, 100, 300)
    assert (first, later) == (4.0, 100.0)
    out = capsys.readouterr().out
    assert "4.00 1.00 1.00" in out
    assert "first batch 4.00 s; later batches 100 events/s" in out
    assert all(math.isnan(v) for v in _print_batch_times(10.0, [14.0], 14.0, 100, 100))


def test_thread_groups_drop_the_thread_number() -> None:
    from benchmarks.cpu import thread_group

    assert thread_group("GC Thread#3\n") == "GC Thread"
    assert thread_group("G1 Conc#0") == "G1 Conc"
    assert thread_group("C2 CompilerThre") == "C2 CompilerThre"
    assert thread_group("Executor task l") == "Executor task l"
    assert thread_group("Thread-12") == "Thread"
    assert thread_group("42") == "42"  # nothing left without the number: the name stays


def test_thread_cpu_of_this_process_is_grouped_by_name() -> None:
    import os
    import time

    from benchmarks.cpu import ThreadCpu, cpu_seconds

    threads = ThreadCpu(os.getpid())
    threads.sample()
    # Work until this process has used a few clock ticks more (bounded: the assertion below says what failed).
    before = cpu_seconds()
    stop_at = time.monotonic() + 30
    while cpu_seconds() - before < 0.1 and time.monotonic() < stop_at:
        sum(range(100_000))
    threads.sample()
    groups = threads.by_group()
    assert sum(groups.values()) >= 0.05  # the main thread's work shows up under its thread name
    assert list(groups.values()) == sorted(groups.values(), reverse=True)
    assert ThreadCpu(2**22 + 12345).by_group() == {}  # no such process: nothing, no error


def test_spark_conf_and_kafka_options_are_key_value_pairs() -> None:
    from benchmarks.bench import parse_args
    from benchmarks.bench_tables import connector_environment
    from benchmarks.cpu import settings_varied

    args = parse_args(
        [
            "stream",
            "--spark-conf",
            "spark.driver.extraJavaOptions=-XX:+UseParallelGC",
            "--kafka-option",
            "check.crcs=false",
        ]
    )
    assert args.spark_conf == {"spark.driver.extraJavaOptions": "-XX:+UseParallelGC"}
    assert args.kafka_option == {"check.crcs": "false"}
    assert settings_varied(args) == (
        'spark_conf={"spark.driver.extraJavaOptions":"-XX:+UseParallelGC"} kafka_options={"check.crcs":"false"} '
        "planner=python"
    )
    tables = parse_args(["tables", "--trickle", "--spark-conf", "a=b=c", "--publish-parallelism", "4"])
    assert connector_environment(tables) == {
        "CONNECTOR_MIRROR__PUBLISH_PARALLELISM": "4",
        "CONNECTOR_SOURCE__PLANNER": "python",
        "CONNECTOR_SPARK__CONF": '{"a":"b=c"}',
    }
    spark_planned = parse_args(["tables", "--planner", "spark"])
    assert connector_environment(spark_planned)["CONNECTOR_SOURCE__PLANNER"] == "spark"
    assert "CONNECTOR_SPARK__CONF" not in connector_environment(parse_args(["tables"]))
    with pytest.raises(SystemExit):
        parse_args(["stream", "--spark-conf", "no-value"])


def test_later_batches_cpu_leaves_the_first_batch_out(capsys: pytest.CaptureFixture[str]) -> None:
    import math

    from benchmarks.bench_stream import BatchSample, _print_later_cpu

    # 3 batches of 100,000 events; the executors used 5 CPU-s by the first batch's end, 9 by the query's end.
    batches = [
        BatchSample(1.0, 0, 0, executor_cpu_s=5.0, jvm_threads={"C2 CompilerThre": 3.0, "Executor task l": 1.0}),
        BatchSample(2.0, 0, 0, executor_cpu_s=7.0),
        BatchSample(3.0, 0, 0, executor_cpu_s=9.0),
    ]
    groups = {"C2 CompilerThre": 3.5, "Executor task l": 2.0}
    assert _print_later_cpu(batches, 9.0, groups, 300_000, 100_000) == pytest.approx(20.0)
    assert "by JVM thread: Executor task l 5.00, C2 CompilerThre 2.50" in capsys.readouterr().out
    assert math.isnan(_print_later_cpu(batches[:1], 5.0, groups, 100_000, 100_000))


def test_executor_cpu_counts_a_process_born_after_the_start_from_zero() -> None:
    """A Python worker forked during the first batch is first seen after it: its CPU until then still counts."""
    import os
    import subprocess
    import sys

    from benchmarks.cpu import ExecutorCpu

    cpu = ExecutorCpu(os.getpid(), "no-app")
    cpu.sample()
    burn = "import sys, time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\nprint(flush=True)\n"
    child = subprocess.Popen([sys.executable, "-c", burn + "time.sleep(60)"], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        child.stdout.readline()  # it has used its 0.3 CPU-s, before the next reading sees it at all
        cpu.sample()
    finally:
        child.kill()
        child.wait()
    assert cpu.total() >= 0.25, (cpu.first, cpu.last)
