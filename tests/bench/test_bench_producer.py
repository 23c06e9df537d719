"""A short run of `kittiwake bench producer` through the CLI: the report has its documented shape,
and an extra section's rows join it. Timings are never asserted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from kittiwake.bench.producer import SectionContext, run_producer, show
from kittiwake.bench.settings import QUICK_PRODUCER, ProducerBenchSettings
from support.bench_reports import RECORD_KEYS, run_bench


@pytest.mark.timeout(180)
def test_producer_reports_the_producer_its_references_and_the_added_latency(tmp_path: Path) -> None:
    report = run_bench(tmp_path, "producer", "--quick", "--tasks", "3000", "--samples", "30", "--udp-seconds", "0.2")
    figures = report["producer"]
    assert {"producer_enqueue", "client_enqueue", "huey_enqueue", "producer_sent_latency",
            "client_enqueue_latency"} <= set(figures)
    producer = figures["producer_enqueue"]
    assert RECORD_KEYS <= set(producer)
    assert producer["samples"] == 3000 and producer["tasks_per_s"] > 0 and producer["ratio"] > 0
    assert producer["producer_stats"]["tasks_sent"] >= 3000
    assert producer["target"]["tasks_per_s_min"] == 50_000 and isinstance(producer["meets_target"], bool)
    huey = figures["huey_enqueue"]
    assert huey.get("tasks_per_s") or huey.get("skipped")  # Redis may be down: the row says why
    latency = figures["producer_sent_latency"]
    assert latency["samples"] == 30 and latency["latency_ms"]["p50"] > 0
    assert isinstance(latency["added_p50_ms"], float) and isinstance(latency["meets_target"], bool)
    udp = {(row["transport"], row["loss"]): row for row in report["udp"]}  # the UDP rows of the same run
    assert {("udp", 0.0), ("udp", 0.014), ("udp", 0.05), ("tcp", None)} <= set(udp)
    assert all(row["lost"] == 0 and row["duplicated"] == 0 for row in udp.values())


@pytest.mark.timeout(180)
def test_an_extra_section_is_measured_in_the_same_run_against_the_same_references(tmp_path: Path) -> None:
    seen: list[SectionContext] = []

    def section(context: SectionContext) -> dict[str, dict[str, Any]]:
        seen.append(context)
        return {"other_transport": {"tasks_per_s": 2.0 * (context.client_tasks_per_s or 1.0), "latency_ms": None,
                                    "target": {"tasks_per_s_min": 1.0}}}

    settings = ProducerBenchSettings(**{**QUICK_PRODUCER, "tasks": 500, "samples": 10}, huey=False)
    console = Console(file=open(tmp_path / "out.txt", "w"), width=200)
    report = run_producer(settings, console, parent_dir=str(tmp_path), extra_sections=[section])
    assert seen and seen[0].url.startswith("kw://") and seen[0].huey_tasks_per_s is None
    row = report["producer"]["other_transport"]
    assert row["ratio"] == pytest.approx(2.0, rel=0.01) and row["meets_target"] is True
    assert report["producer"]["huey_enqueue"]["skipped"] == "--no-huey"
    show(console, report, extra_rows={"measured_elsewhere": {"tasks_per_s": 5.0, "latency_ms": None}})
    console.file.close()
    text = (tmp_path / "out.txt").read_text()
    assert "other_transport" in text and "measured_elsewhere" in text
