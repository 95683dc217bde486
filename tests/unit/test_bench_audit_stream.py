"""The pure helpers of ``benchmarks.bench_audit_stream`` (the benchmark itself needs the stack: not a test)."""

from __future__ import annotations

import orjson
import pytest

from benchmarks.bench_audit_stream import (
    PhaseFigures,
    parse_args,
    phase_figures,
    summary_line,
    timed_lines,
    version_mismatch,
)


def _batch(stamp: str, records: int, duration_s: float) -> str:
    line = orjson.dumps({"event": "batch", "batch_id": 0, "records": records, "duration_s": duration_s}).decode()
    return f"2026-11-27 10:00:{stamp} INFO connector.stream.batch_writer {line}"


LOG = "\n".join(
    [
        "2026-11-27 10:00:00,000 INFO connector.audit.loop audit: every 5 s against /x, at most 50000 rows/s",
        "a line of the JVM's, without a time stamp",
        _batch("04,000", 200_000, 4.0),
        "2026-11-27 10:00:05,000 INFO connector.audit.compare audit public.soak_items: clean (400000 rows checked)",
        _batch("06,000", 200_000, 2.0),
        "2026-11-27 10:00:07,500 INFO connector.audit.compare audit public.soak_items: clean (400000 rows checked)",
        _batch("08,000", 100_000, 1.0),
        "2026-11-27 10:00:09,000 INFO connector.audit.compare audit public.soak_items: clean (400000 rows checked)",
    ]
)


def test_timed_lines_keep_only_stamped_lines_in_order() -> None:
    lines = timed_lines(LOG)
    assert len(lines) == 7
    assert lines[1][0] - lines[0][0] == pytest.approx(4.0)
    assert all("JVM" not in line for _, line in lines)


def test_phase_figures_measure_the_batches_after_the_first() -> None:
    figures = phase_figures(LOG, audit=True)
    assert figures.events == 300_000
    assert figures.seconds == pytest.approx(4.0)
    assert figures.batches == 2
    assert figures.mean_batch_s == pytest.approx(1.5)
    # only the judgements logged between the first batch's end and the last's count
    assert (figures.audit_rows, figures.audits_clean, figures.not_clean) == (800_000, 2, ())
    assert figures.events_per_s == pytest.approx(75_000)
    assert "75,000 events/s" in figures.line() and "800,000 rows checked" in figures.line()


def test_a_judgement_that_is_not_clean_is_kept_and_one_batch_measures_nothing() -> None:
    text = "\n".join(
        [
            _batch("04,000", 10, 1.0),
            "2026-11-27 10:00:05,000 WARNING x audit public.soak_items: 3 differences (3 keys to re-read) -> rows",
        ]
    )
    figures = phase_figures(text, audit=True)
    assert figures.batches == 0 and figures.events == 0
    assert figures.not_clean == ("3 differences (3 keys to re-read) -> rows",)


def test_summary_gives_each_kind_its_rate_and_the_ratio() -> None:
    off = PhaseFigures(False, 1_000_000, 10.0, 5, 2.0, 0, 0, ())
    on = PhaseFigures(True, 800_000, 10.0, 4, 2.5, 400_000, 2, ())
    line = summary_line([off, on], 50_000)
    assert "off: 100,000 events/s (mean batch 2.00 s)" in line
    assert "on: 80,000 events/s (mean batch 2.50 s; audit 40,000 rows/s checked, max_rows_per_s 50,000)" in line
    assert line.endswith("ratio on/off 0.80")


def test_version_mismatch_names_what_differs() -> None:
    assert version_mismatch([1, 2], [3, 4], {1: 3, 2: 4}) is None
    assert "held more than once" in (version_mismatch([1, 1], [3, 3], {1: 3}) or "")
    found = version_mismatch([1, 3], [2, 0], {1: 3, 2: 4}) or ""
    assert "differing keys [1, 2]" in found and "extra keys [3]" in found


def test_phases_need_both_kinds() -> None:
    assert parse_args(["--phases", "off,on,off"]).phases == ["off", "on", "off"]
    for bad in ("on", "off,maybe"):
        with pytest.raises(SystemExit):
            parse_args(["--phases", bad])
