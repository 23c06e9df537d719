"""`kittiwake bench celery`: a short run through the CLI — the same Celery app on Kittiwake and, when
Redis is up on 127.0.0.1:6379, on Redis — and the shape of its report. Timings are never asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kittiwake.cli.bench_command import bench

REDIS_URL = "redis://127.0.0.1:6379/13"  # not the default database, so a run by hand is left alone
TASKS = 30
SKIP_WORDS = ("not installed", "unreachable", "in use by another run", "refused")


@pytest.mark.timeout(120)
def test_celery_bench_drains_the_same_app_on_kittiwake_and_redis(tmp_path: Path) -> None:
    report_path = tmp_path / "celery.json"
    result = CliRunner().invoke(bench, [
        "celery", "--tasks", str(TASKS), "--pools", "solo", "--redis-url", REDIS_URL,
        "--dir", str(tmp_path), "--json", str(report_path),
    ])
    assert result.exit_code == 0, result.output
    report = json.loads(report_path.read_text())
    assert report["settings"]["acks_late"] is True
    figures = report["celery"]
    assert set(figures) == {f"{system} solo {phase}" for system in ("kittiwake", "redis")
                            for phase in ("drain", "submit")}
    ours = figures["kittiwake solo drain"]
    assert ours["samples"] == TASKS and ours["tasks_per_s"] > 0 and ours["target"] == {"ratio_min": 3.0}
    theirs = figures["redis solo drain"]
    if theirs["tasks_per_s"] is None:  # Redis missing or busy: the row must say why
        assert any(word in theirs["first_error"] for word in SKIP_WORDS), theirs
    else:
        assert ours["ratio"] == round(ours["tasks_per_s"] / theirs["tasks_per_s"], 2)
        assert isinstance(ours["meets_target"], bool)
    assert "kittiwake bench celery" in result.output
