"""Throughput figures printed beside the raw limits measured in the same run.

Run from the repository root (benchmarks are not part of the installed package)::

    python -m benchmarks.bench convert [--events N] [--with-schema]
    python -m benchmarks.bench stream [--events N] [--partitions P] [--decode-on driver|executors] ...
    python -m benchmarks.bench tables [--tables N] [--partitions P] [--changes C] [--landing local|dfs] ...
    python -m benchmarks.bench tables --trickle [--tables N] [--trickle-seconds 40] [--trigger 5s]
    python -m benchmarks.bench freshness [--rate R] [--seconds S] [--trigger 10s]

This machine is shared and noisy: ratios are stable, absolute times are not, so nothing here is a test.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import orjson

from benchmarks.events import generated_events
from connector.config import load_settings
from connector.kcat import kcat_line

_BATCH = 100_000


def bench_convert(events: int, with_schema: bool) -> tuple[float, float]:
    """Events per second of ``convert`` on a kcat dump, and peak RSS in MB.

    Measured: reading the dump, the lane (or the record path), Parquet and publishing. Writing the dump is not.
    """
    from connector.commands.convert import convert

    with tempfile.TemporaryDirectory(prefix="bench-convert-") as scratch:
        dump = Path(scratch) / "dump.jsonl"
        with dump.open("wb") as out:
            for record in generated_events(events, with_schema):
                out.write(kcat_line(record))
        started = time.perf_counter()
        settings = load_settings(**{"landing_zone.url": f"{scratch}/lz"})
        summary = convert([str(dump)], settings, checkpoint=f"{scratch}/cp", batch_size=_BATCH)
        elapsed = time.perf_counter() - started
        if not summary.ok or summary.records != events:
            msg = f"bench convert did not convert every event: {summary}"
            raise RuntimeError(msg)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return events / elapsed, peak_mb


def json_parse_limit(events: int, with_schema: bool) -> float:
    """Values/s of parsing the same values with orjson and nothing else (the floor of any JSON decoder)."""
    values = [r.value for r in generated_events(events, with_schema)]
    started = time.perf_counter()
    for value in values:
        orjson.loads(value or b"null")
    return events / (time.perf_counter() - started)


def build_parser() -> argparse.ArgumentParser:
    """The benchmarks' flags; each names the targets it applies to."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench",
        description="benchmarks: convert (no JVM), stream (Spark + Kafka), tables (many topics), freshness",
    )
    parser.add_argument("target", choices=["convert", "stream", "tables", "freshness"])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--with-schema", action="store_true", help="JsonConverter schemas.enable=true events")
    parser.add_argument("--bootstrap-servers", help="stream/tables/freshness: use this broker instead of starting one")
    parser.add_argument(
        "--partitions", type=int, help="Kafka partitions per topic (stream: 8, tables: 2, freshness: 2)"
    )
    parser.add_argument("--max-offsets-per-trigger", type=int, default=200_000)
    parser.add_argument(
        "--decode-on", choices=["driver", "executors"], default="executors", help="stream: spark.decode_on to measure"
    )
    parser.add_argument(
        "--row-path",
        action="store_true",
        help="stream: spark.columnar_decode=false (every record through the record-by-record path)",
    )
    parser.add_argument(
        "--spark-master", default="local[*]", help="stream: Spark master URL (local[*], spark://host:port)"
    )
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="stream/tables: a Spark setting to measure (spark.conf), repeatable",
    )
    parser.add_argument(
        "--kafka-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="stream/tables: a Kafka read option to measure (source.kafka_options), repeatable",
    )
    parser.add_argument(
        "--planner",
        choices=["python", "spark"],
        default="python",
        help="stream/tables: source.planner, what plans the batches (the connector's own source, or Spark's Java one)",
    )
    parser.add_argument(
        "--class-archive",
        default="cache",
        help="stream: the driver's class archive (spark.class_archive), as the image has one: 'cache' (default; "
        ".cache/spark-cds/, written first when missing, outside the measured run), 'none', or a path",
    )
    parser.add_argument("--tables", type=int, default=1000, help="tables: topics, one table each")
    parser.add_argument("--changes", type=int, default=30, help="tables: events per table before the catch-up")
    parser.add_argument("--landing", choices=["local", "dfs"], default="local", help="tables: landing zone kind")
    parser.add_argument(
        "--request-ms", type=float, default=20.0, help="tables: latency the DFS double adds to every request"
    )
    parser.add_argument("--publish-parallelism", type=int, default=16, help="tables: mirror.publish_parallelism")
    parser.add_argument(
        "--trigger", help="tables: the running service's trigger (2s; 5s with --trickle); freshness: (10s)"
    )
    parser.add_argument(
        "--trickle",
        action="store_true",
        help="tables: one service catches up, then one update per table arrives in bursts of 100-300 tables "
        "spread over --trickle-seconds; prints each batch and the fit batch time = fixed + marginal x tables",
    )
    parser.add_argument("--trickle-seconds", type=float, default=40, help="tables --trickle: how long the updates take")
    parser.add_argument("--timeout", type=float, default=900, help="tables/freshness: give up on a run after this")
    parser.add_argument("--rate", type=float, default=2000, help="freshness: events per second produced")
    parser.add_argument("--seconds", type=float, default=60, help="freshness: how long the steady stream runs")
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse and fill the target-dependent defaults (``--partitions``, ``--trigger``)."""
    args = build_parser().parse_args(argv)
    if args.partitions is None:
        args.partitions = 8 if args.target == "stream" else 2
    if args.trigger is None:
        args.trigger = ("5s" if args.trickle else "2s") if args.target == "tables" else "10s"
    for name in ("tables", "changes", "partitions", "publish_parallelism"):
        if getattr(args, name) < 1:
            build_parser().error(f"--{name.replace('_', '-')} must be at least 1")
    for name in ("spark_conf", "kafka_option"):
        pairs = [item.split("=", 1) for item in getattr(args, name)]
        if any(len(pair) != 2 or not pair[0] for pair in pairs):
            build_parser().error(f"--{name.replace('_', '-')} takes KEY=VALUE")
        setattr(args, name, dict(pairs))
    if args.rate <= 0 or args.seconds <= 0 or args.trickle_seconds <= 0 or args.request_ms < 0:
        build_parser().error("--rate, --seconds and --trickle-seconds must be positive, --request-ms not negative")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark named by the first argument; the last line printed is the one the README records."""
    args = parse_args(argv)
    if args.target == "convert":
        rate, peak = bench_convert(args.events, args.with_schema)
        parse = json_parse_limit(min(args.events, 200_000), args.with_schema)
        print(f"events={args.events} with_schema={args.with_schema}")
        print(f"raw limit: orjson.loads of the same values alone = {parse:.0f} values/s (ratio {rate / parse:.2f})")
        print(f"events_per_second={rate:.0f} peak_rss_mb={peak:.0f}")
        return 0
    if args.target == "tables":
        from benchmarks.bench_tables import bench_tables, bench_trickle

        return bench_trickle(args) if args.trickle else bench_tables(args)
    if args.target == "freshness":
        from benchmarks.bench_freshness import bench_freshness

        return bench_freshness(args)
    from benchmarks.bench_stream import bench_stream

    return bench_stream(args)


if __name__ == "__main__":
    raise SystemExit(main())
