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
