"""A short run of `kittiwake bench sqs`: both systems measured, Kittiwake's rows carry the ratio.
Timings are never asserted — this is a benchmark, not a test."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("boto3")
pytest.importorskip("moto.server")

from support.bench_reports import assert_record, run_bench  # noqa: E402


@pytest.mark.timeout(120)
def test_sqs_measures_kittiwake_and_moto_server_in_one_run(tmp_path: Path) -> None:
    report = run_bench(tmp_path, "sqs", "--seconds", "0.5", "--warmup", "0.1", "--processes", "1",
                       "--threads", "2", "--only", "single")
    figures = report["sqs"]
    assert set(figures) == {"kittiwake single", "moto_server single"}
    for record in figures.values():
        assert_record(record, rate=True)
    ours = figures["kittiwake single"]
    assert ours["reference"] == {"system": "moto_server", "figure": "single"}
    assert ours["target"] == {"ratio_min": 3.0}
    assert ours["ratio"] > 0
    assert report["settings"]["threads"] == 2
