"""Peak memory of one executor task: a Kafka partition slice of N Debezium events of S bytes, collected and staged.

This is what one Spark Python worker holds while it runs ``connector.spark.slices.collect_partition``: the
slice's Arrow records (as Spark hands them over), the decoded change rows and the encoded Parquet, written
to a local landing zone. Each case runs in a fresh process; the figure is its peak RSS (``ru_maxrss``) and
the part above the process after its imports (interpreter, pyarrow, the connector). Sizes an executor's
``spark.executor.memoryOverhead``: one worker per core, each running one task at a time.

    python -m benchmarks.slice_memory [--sizes 500,2000] [--records 50000,200000]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile


def _case(size: int, records: int) -> None:
    """One slice in this process; prints ``size records input_mib peak_mib above_imports_mib``."""
    import pyarrow as pa

    from connector.collect.pieces import CollectContext
    from connector.config import MirrorSettings
    from connector.spark.slices import SliceTask, collect_partition
    from connector.storage.location import StorageLocation
    from tests.support.debezium import Topic, field

    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    topic = Topic("bench.public.items", [field("id", "int64", optional=False), field("body", "string")], ["id"])
    empty = topic.record("c", None, {"id": 0, "body": ""}).value or b""
    pad = "x" * max(0, size - len(empty))
    chunks = []
    for start in range(0, records, 10_000):  # built in chunks: the input's own peak stays near its size
        values, keys = [], []
        for i in range(start, min(records, start + 10_000)):
            record = topic.record("c" if i % 3 else "u", None, {"id": i, "body": pad})
            values.append(record.value)
            keys.append(record.key)
        chunks.append(
            pa.record_batch(
                {
                    "topic": pa.array([topic.name] * len(values), pa.string()),
                    "partition": pa.array([0] * len(values), pa.int32()),
                    "offset": pa.array(range(start, start + len(values)), pa.int64()),
                    "key": pa.array(keys, pa.binary()),
                    "value": pa.array(values, pa.binary()),
                }
            )
        )
    table = pa.Table.from_batches(chunks)
    del chunks
    input_mib = table.nbytes // 2**20
    with tempfile.TemporaryDirectory() as landing:
        task = SliceTask(0, CollectContext(MirrorSettings()), StorageLocation(landing))
        out = list(collect_partition(task, iter(table.to_batches())))
    assert len(out) == 1
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(size, records, input_mib, peak // 1024, (peak - baseline) // 1024)  # noqa: T201


def main() -> None:
    """Run every size × records case in its own process and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="500,2000", help="event (Kafka value) sizes in bytes")
    parser.add_argument("--records", default="50000,200000", help="records per slice (per task)")
    args = parser.parse_args()
    print("| event size | records per task | slice as Arrow (MiB) | peak RSS (MiB) | above the imports (MiB) |")  # noqa: T201
    print("|---|---|---|---|---|")  # noqa: T201
    for size in (int(s) for s in args.sizes.split(",")):
        for records in (int(r) for r in args.records.split(",")):
            code = f"from benchmarks.slice_memory import _case; _case({size}, {records})"
            result = subprocess.run(  # noqa: S603 - this interpreter, this module
                [sys.executable, "-c", code], capture_output=True, text=True, check=True
            )
            s, n, arrow, peak, above = result.stdout.split()
            print(f"| {s} B | {int(n):,} | {arrow} | {peak} | {above} |")  # noqa: T201


if __name__ == "__main__":
    main()
