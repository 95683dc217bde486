"""The stream's rate with the continuous audit off and on, in the same run (issue 43).

One ``deploy/local/stack.sh`` (Postgres → Debezium → Kafka) holds ``public.soak_items`` (``--rows`` rows, the
audited table, ``benchmarks.audit_soak``'s). The service (``python -m connector run``, one checkpoint throughout)
first mirrors it into the Fabric replicator DOUBLE (``tests.support.fabric_replicator_double``) until an audit of it
is clean; the double then stops (Fabric runs on other machines: its work is no part of the connector's). Then each
phase (``--phases``, ``off,on,off,on`` by default: alternated, as the shared machine drifts) puts ``--events``
change events of a small table (``bench.stream``, ``--partitions`` partitions; ``benchmarks.bench_tables``' events:
the same ``--events`` / 2 keys each phase, each changed twice) in Kafka while the service is stopped, and starts the
service with ``mirror.audit`` off, or on (every ``--interval-s`` over ``soak_items``, ``max_rows_per_s`` its default
unless ``--max-rows-per-s``), until it has published them. A phase's figures come from its service log, over the
batches after its first (the service's start and the first batch's JIT): events/s from the first batch's end to the
last's, the mean batch duration, and the rows the audit's clean judgements logged in that window checked. At the end
the stream's table is replayed from the landing zone (``connector.readback.replay``) and compared with what was
produced, and every audit judgement must have been clean: a wrong run prints ``MIRROR NOT EXACT`` and no figures
(exit 1).

Heavy (about 4 minutes; the replay holds every phase's files: 2.6 GB at its peak for the default 16M events): run it
under the end-to-end lock, on a machine as quiet as can be (the last line is the one recorded)::

    flock /tmp/e2e.lock .venv/bin/python -m benchmarks.bench_audit_stream [--events 4000000] [--rows 200000] \\
        [--phases off,on,off,on] [--interval-s 5] [--state-dir DIR] [--work DIR]
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks.audit_soak import TABLE, audit_stack, start_service, table_topic, wait_for_clean_audit, write_config
from benchmarks.bench_tables import produce_changes
from benchmarks.cpu import cpu_model, load_average
from benchmarks.service import batch_lines, create_topics
from connector.config.audit import AuditSettings
from tests.support.fabric_replicator_double import FabricReplicatorDouble

STREAM_TABLE = "bench.stream"
"""The stream's table; its topic has the stack's topic prefix (one landing zone mirrors one source)."""
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
_CLEAN = re.compile(rf"audit public\.{TABLE}: clean \((\d+) rows checked\)")
_NOT_CLEAN = re.compile(rf"audit public\.{TABLE}: (\d+ differences.*|the mirror did not catch up.*)")


def timed_lines(log_text: str) -> list[tuple[float, str]]:
    """The service log's lines that carry ``logging``'s time stamp, as (seconds since the epoch, line)."""
    out = []
    for line in log_text.splitlines():
        match = _STAMP.match(line)
        if match:
            out.append((datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f").timestamp(), line))  # noqa: DTZ007
    return out


@dataclass(frozen=True)
class PhaseFigures:
    """One phase's figures, from its service log (the batches after its first)."""

    audit: bool
    events: int
    """Records of the measured batches."""
    seconds: float
    """From the end of the phase's first batch to the end of its last."""
    batches: int
    mean_batch_s: float
    audit_rows: int
    """Rows checked by the audit's clean judgements logged within the window (source and mirror together)."""
    audits_clean: int
    not_clean: tuple[str, ...]
    """Judgements anywhere in the phase that were not clean (a difference, or the mirror lagging)."""

    @property
    def name(self) -> str:
        return "on" if self.audit else "off"

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        audit = (
            f"; audit: {self.audit_rows:,} rows checked ({self.audit_rows / self.seconds:,.0f}/s), "
            f"{self.audits_clean} clean judgements"
            if self.audit and self.seconds > 0
            else ""
        )
        return (
            f"audit {self.name}: {self.events:,} events in {self.seconds:.1f} s = {self.events_per_s:,.0f} events/s "
            f"over {self.batches} batches after the first, mean batch {self.mean_batch_s:.2f} s{audit}"
        )


def phase_figures(log_text: str, *, audit: bool) -> PhaseFigures:
    """The phase's figures from its service log; no measured batch (one batch or none): zero events."""
    lines = timed_lines(log_text)
    batches = [(t, found[0]) for t, line in lines if (found := batch_lines(line)) and found[0].get("records")]
    not_clean = tuple(m[1] for _, line in lines if (m := _NOT_CLEAN.search(line)))
    if len(batches) < 2:  # noqa: PLR2004 - the first batch and at least one after it
        return PhaseFigures(audit, 0, 0.0, 0, 0.0, 0, 0, not_clean)
    start, end = batches[0][0], batches[-1][0]
    measured = [b for _, b in batches[1:]]
    clean = [int(m[1]) for t, line in lines if start < t <= end and (m := _CLEAN.search(line))]
    return PhaseFigures(
        audit=audit,
        events=sum(int(b["records"]) for b in measured),
        seconds=end - start,
        batches=len(measured),
        mean_batch_s=sum(float(b["duration_s"]) for b in measured) / len(measured),
        audit_rows=sum(clean),
        audits_clean=len(clean),
        not_clean=not_clean,
    )


def rate_of(phases: Iterable[PhaseFigures]) -> float:
    """Events/s of the phases together (their events over their seconds)."""
    chosen = list(phases)
    seconds = sum(p.seconds for p in chosen)
    return sum(p.events for p in chosen) / seconds if seconds > 0 else 0.0


def summary_line(phases: Sequence[PhaseFigures], max_rows_per_s: float) -> str:
    """The line recorded in docs/performance.md: the rate off and on, their ratio, the audit's rows/s."""
    off = rate_of(p for p in phases if not p.audit)
    on = rate_of(p for p in phases if p.audit)
    audited = [p for p in phases if p.audit]
    audit_rows_s = sum(p.audit_rows for p in audited) / max(sum(p.seconds for p in audited), 1e-9)
    mean = {
        kind: sum(p.mean_batch_s * p.batches for p in phases if p.audit == kind)
        / max(1, sum(p.batches for p in phases if p.audit == kind))
        for kind in (False, True)
    }
    ratio = on / off if off > 0 else 0.0
    return (
        f"stream with the audit off: {off:,.0f} events/s (mean batch {mean[False]:.2f} s); "
        f"on: {on:,.0f} events/s (mean batch {mean[True]:.2f} s; audit {audit_rows_s:,.0f} rows/s checked, "
        f"max_rows_per_s {max_rows_per_s:,.0f}); ratio on/off {ratio:.2f}"
    )


def version_mismatch(ids: Sequence[Any], versions: Sequence[Any], expected: dict[int, int]) -> str | None:
    """``None`` when the replayed (id, version) rows are exactly the produced keys at their last versions."""
    got = dict(zip(ids, versions, strict=True))
    if len(ids) != len(got):
        return f"{len(ids) - len(got)} keys held more than once"
    if got != expected:
        wrong = [k for k in expected if got.get(k) != expected[k]][:5]
        extra = [k for k in got if k not in expected][:5]
        return f"{len(got)} rows replayed, {len(expected)} produced; differing keys {wrong}, extra keys {extra}"
    return None


def stream_mismatch(landing: Path, expected: dict[int, int]) -> str | None:
    """Replay the stream's table from the landing zone and compare it with what was produced."""
    from connector.landing_zone.layout import TableRef
    from connector.readback.replay import replay_table
    from connector.storage import LocalStorage

    schema, table = STREAM_TABLE.split(".")
    state = replay_table(LocalStorage(landing), TableRef(schema, table))
    return version_mismatch(state.column("id").to_pylist(), state.column("version").to_pylist(), expected)


@dataclass
class Run:
    """What the phases share: the stack's values, the double (stopped), the configs and the topics."""

    args: argparse.Namespace
    values: dict[str, str]
    fabric: FabricReplicatorDouble
    configs: dict[bool, Path]
    topics: str

    @property
    def stream_topic(self) -> str:
        return f"{self.values['topic_prefix']}.{STREAM_TABLE}"

    def service(self, config: Path, log: Path) -> Any:
        return start_service(
            self.values, self.fabric, config, self.args.work / "cp", self.args.trigger, log, topics=self.topics
        )


def set_up(args: argparse.Namespace, values: dict[str, str]) -> Run | None:
    """The stream's topic; the audited table mirrored in the double's Delta table and audited clean once."""
    fabric = FabricReplicatorDouble(args.work / "item", retention_s=60, interval_s=1).start()
    configs = {
        on: write_config(
            args.work, fabric.tables, args, enabled=on, name=f"audit-{'on' if on else 'off'}.yaml",
            max_rows_per_s=args.max_rows_per_s,
        )
        for on in (False, True)
    }  # fmt: skip
    stream_topic = re.escape(f"{values['topic_prefix']}.{STREAM_TABLE}")
    run = Run(args, values, fabric, configs, f"(?:{table_topic(values)}|{stream_topic})")
    create_topics(values["bootstrap.servers"], [run.stream_topic], args.partitions)
    started = time.monotonic()
    connector = run.service(configs[True], args.work / "setup.log")
    try:
        clean = wait_for_clean_audit(connector, args.timeout)
    finally:
        connector.stop()
        fabric.stop()
    if not clean or fabric.errors or fabric.stopped:
        print(f"set-up failed: the double's errors {fabric.errors[:3]}, stopped tables {fabric.stopped}")
        return None
    took = time.monotonic() - started
    print(f"set-up: {args.rows:,} rows of public.{TABLE} mirrored and audited clean in {took:.0f} s", flush=True)
    return run


def run_phase(run: Run, index: int, audit: bool, expected: dict[str, dict[int, int]]) -> PhaseFigures:
    """Put ``--events`` events in Kafka, then run the service (audit on or off) until it has published them."""
    args = run.args
    started = time.monotonic()
    produce_changes(run.values["bootstrap.servers"], [run.stream_topic], args.partitions, args.events, expected)
    name = "on" if audit else "off"
    print(f"phase {index + 1} (audit {name}): {args.events:,} events in Kafka in {time.monotonic() - started:.0f} s; "
          f"load average {load_average()}", flush=True)  # fmt: skip
    connector = run.service(run.configs[audit], args.work / f"phase{index + 1}-audit-{name}.log")
    try:
        connector.wait_for(
            lambda batches: sum(b["records"] for b in batches) >= args.events, args.timeout, f"phase {index + 1}"
        )
    finally:
        code = connector.stop()
    if code != 0:
        msg = f"phase {index + 1}: the service exited {code}:\n{connector.tail()}"
        raise RuntimeError(msg)
    return phase_figures(connector.log_path.read_text(errors="replace"), audit=audit)


def measure(args: argparse.Namespace, values: dict[str, str]) -> int:
    """Set up, run the phases, check the mirror, and print the figures (none when the mirror is not exact)."""
    run = set_up(args, values)
    if run is None:
        return 2
    expected: dict[str, dict[int, int]] = {}
    phases = [run_phase(run, index, kind == "on", expected) for index, kind in enumerate(args.phases)]
    load_after = load_average()
    problems = [f"phase {i + 1}: audit judged {p.not_clean[0]}" for i, p in enumerate(phases) if p.not_clean]
    problems += [f"phase {i + 1}: no batch after the first" for i, p in enumerate(phases) if not p.batches]
    problems += [
        f"phase {i + 1}: the audit logged no clean judgement in the window (not busy)"
        for i, p in enumerate(phases)
        if p.audit and not p.audits_clean
    ]
    mismatch = stream_mismatch(run.fabric.landing_zone, expected.get(STREAM_TABLE, {}))
    if mismatch is not None:
        problems.append(f"{STREAM_TABLE}: {mismatch}")
    if problems:
        print("MIRROR NOT EXACT (or the audit not measured): " + "; ".join(problems))
        return 1
    for index, phase in enumerate(phases):
        print(f"phase {index + 1}: {phase.line()}")
    total = sum(args.events for _ in phases)
    print(f"mirror exact: {STREAM_TABLE} replayed from the landing zone holds the {total:,} events' last versions; "
          f"every audit of public.{TABLE} clean")  # fmt: skip
    print(f"cpu: {cpu_model()}; load average before {args.load_before}, after {load_after}")
    max_rows = args.max_rows_per_s or AuditSettings().max_rows_per_s
    print(summary_line(phases, max_rows))
    return 0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--events", type=int, default=4_000_000, help="change events per phase")
    parser.add_argument("--rows", type=int, default=200_000, help="rows of the audited table")
    parser.add_argument(
        "--phases", default="off,on,off,on", help="the phases in order, each off or on (alternated: the machine drifts)"
    )
    parser.add_argument("--interval-s", type=float, default=5.0, help="mirror.audit.interval_s")
    parser.add_argument("--max-rows-per-s", type=float, help="mirror.audit.max_rows_per_s (default: its default)")
    parser.add_argument("--settle-s", type=float, default=120.0, help="mirror.audit.settle_s")
    parser.add_argument(
        "--trigger", default="100ms", help="the service's trigger (short: batches run back to back, never waiting)"
    )
    parser.add_argument("--partitions", type=int, default=2, help="partitions of the stream's topic")
    parser.add_argument("--timeout", type=float, default=900, help="give up on the set-up or a phase after this")
    parser.add_argument("--state-dir", type=Path, default=Path("/tmp/bench-audit-stream/state"))  # noqa: S108
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-audit-stream/work"))  # noqa: S108
    args = parser.parse_args(argv)
    args.phases = [p.strip() for p in args.phases.split(",")]
    if any(p not in ("off", "on") for p in args.phases) or not {"off", "on"} <= set(args.phases):
        parser.error("--phases takes off and on, each at least once (e.g. off,on)")
    if args.events < 1 or args.rows < 1 or args.partitions < 1:
        parser.error("--events, --rows and --partitions must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    args.load_before = load_average()
    print(f"cpu: {cpu_model()}; load average before: {args.load_before} (on a busy machine the figures mean little)")
    with audit_stack(args.state_dir, args.work, args.rows, down=("down", "--kill")) as values:
        return measure(args, values)


if __name__ == "__main__":
    raise SystemExit(main())
