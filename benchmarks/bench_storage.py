"""Publish throughput: ``create`` + ``rename_new`` per file, OneLake backend vs local disk.

The OneLake figure is measured against ``DfsTestServer`` (the in-process DFS test double, over HTTPS on
loopback), so it measures the connector and SDK cost per file, not OneLake's: real OneLake adds network
latency per request (each publish is 6 requests). Each figure is printed beside a raw limit measured in
the same run, because this machine is shared and noisy:

* local: plain ``write`` + ``fsync`` of the same files, without the temp-file + link protocol;
* test server: bare ``HEAD`` requests per second through the same SDK client (the per-request floor).

Usage: ``python benchmarks/bench_storage.py [--files N] [--size-kb K]``. The last line is machine-readable.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from connector.storage.base import Storage  # noqa: E402
from connector.storage.local import LocalStorage  # noqa: E402
from tests.support.dfs_server import DfsTestServer, make_onelake_storage  # noqa: E402


def publish(storage: Storage, payloads: list[bytes], tag: str) -> float:
    """Stage and publish every payload as the publisher does; return elapsed seconds."""
    start = time.perf_counter()
    for n, data in enumerate(payloads, start=1):
        staged = f"_staging/{tag}-{n}.parquet"
        storage.create(staged, data)
        storage.rename_new(staged, f"{tag}/{n:020d}.parquet")
    return time.perf_counter() - start


def raw_local_write(folder: Path, payloads: list[bytes]) -> float:
    start = time.perf_counter()
    for n, data in enumerate(payloads):
        with open(folder / f"raw-{n}", "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=200, help="files to publish per backend (default 200)")
    parser.add_argument("--size-kb", type=int, default=256, help="size of each file in KiB (default 256)")
    args = parser.parse_args()

    payloads = [os.urandom(args.size_kb * 1024) for _ in range(args.files)]
    megabytes = args.files * args.size_kb / 1024

    with tempfile.TemporaryDirectory(prefix="bench-storage-") as tmp:
        local = LocalStorage(Path(tmp) / "landing")
        local_s = publish(local, payloads, "t")
        raw_dir = Path(tmp) / "raw"
        raw_dir.mkdir()
        raw_s = raw_local_write(raw_dir, payloads)

    with DfsTestServer() as server:
        onelake = make_onelake_storage(server, "bench.MountedRelationalDatabase/Files/LandingZone")
        onelake.create("warmup", b"x")  # TLS handshake and token outside the measurement
        onelake_s = publish(onelake, payloads, "t")
        head_count = 200
        start = time.perf_counter()
        for _ in range(head_count):
            onelake.size("warmup")
        head_s = time.perf_counter() - start
        requests = sum(server.requests.values())
        onelake.close()

    print(f"files={args.files} size_kb={args.size_kb} total_mb={megabytes:.1f}")
    print(
        f"local disk:        {megabytes / local_s:8.1f} MB/s {args.files / local_s:8.1f} files/s"
        f"   (raw write+fsync: {megabytes / raw_s:.1f} MB/s, {args.files / raw_s:.1f} files/s)"
    )
    print(
        f"OneLake (test double): {megabytes / onelake_s:8.1f} MB/s {args.files / onelake_s:8.1f} files/s"
        f"   (bare HEAD floor: {head_count / head_s:.0f} requests/s; {requests} requests served)"
    )
    print(
        f"onelake_test_server_mb_s={megabytes / onelake_s:.2f} local_mb_s={megabytes / local_s:.2f} "
        f"onelake_files_s={args.files / onelake_s:.2f} local_files_s={args.files / local_s:.2f}"
    )


if __name__ == "__main__":
    main()
