"""`kittiwake bench cluster`: a --quick run through the CLI writes every figure under its
JSON key, and the pure parts (Fabriq's hop model, the load deviation) say what the seed says.
Timings are never asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kittiwake.bench.cluster_run import cpu_ratio_ceiling, load_deviation, model_hops, paired_median_extra_ms
from kittiwake.cli.bench_command import bench

SUMMARY_KEYS = {"drain_per_s", "ratio_2_vs_1", "user_path_drain_per_s", "user_path_ratio_2_vs_1",
                "broker_cpu_us_per_task", "cpu_per_task_ratio", "hops_per_pop", "extra_requests_per_task",
                "load_deviation", "node_loads", "push_p50_ms"}


def test_fabriq_model_matches_the_seeds_figure() -> None:
    # chapter 4: one client, 64 servers, 64,000 messages: "the average cost ... is 0.984"
    assert model_hops(64, 64_000) == pytest.approx(0.984, abs=0.001)
    assert model_hops(2, 2) == pytest.approx(0.75)


def test_load_deviation_is_the_worst_node_against_the_mean() -> None:
    assert load_deviation([100, 100, 100, 100]) == 0.0
    assert load_deviation([90, 110, 100, 100]) == pytest.approx(0.1)
    assert load_deviation([0, 0]) == 0.0


def test_paired_extra_is_the_median_of_differences_in_turn() -> None:
    assert paired_median_extra_ms([1_000_000, 5_000_000, 2_000_000], [1_100_000, 5_300_000, 2_050_000]) == 0.1
    assert paired_median_extra_ms([], []) is None


def test_the_cpu_ceiling_counts_the_consumers_on_the_same_cores() -> None:
    one = {"broker_cpu_us_per_task": 60.0, "consumer_cpu_us_per_task": 10.0}
    # one broker: one core's worth; two nodes (60 us per task over both): the cores, shared with consumers
    assert cpu_ratio_ceiling(one, one, cores=2) == pytest.approx((2e6 / 70) / (1e6 / 60), abs=1e-3)
    assert cpu_ratio_ceiling(one, one, cores=8) == pytest.approx(2.0)
    assert cpu_ratio_ceiling(one, {}, cores=2) is None


@pytest.mark.timeout(180)
def test_quick_run_writes_every_figure(tmp_path: Path) -> None:
    report_path = tmp_path / "report.json"
    result = CliRunner().invoke(bench, ["cluster", "--quick", "--json", str(report_path), "--dir", str(tmp_path)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert not list(tmp_path.glob("kittiwake-bench-*")), "the throwaway directory is left behind"
    assert (tmp_path / "report.png").exists()
    report = json.loads(report_path.read_text())

    assert SUMMARY_KEYS <= set(report)
    assert {"machine", "settings", "load_average", "cluster"} <= set(report)
    for nodes in ("1", "2"):
        assert report["drain_per_s"][nodes] > 0
        assert report["user_path_drain_per_s"][nodes] > 0
        assert report["push_p50_ms"][nodes] > 0
        assert report["broker_cpu_us_per_task"][nodes] > 0
    assert report["cluster"]["push_2"]["paired_median_extra_ms"] is not None
    assert report["cluster"]["push_2"]["paired_median_extra_vs_plain_pair_ms"] is not None
    assert report["push_p50_ms"]["2_plain"] > 0 and report["cluster"]["push_2_plain"]["samples"] > 0
    for name in ("drain_1", "drain_2"):
        record = report["cluster"][name]
        assert record["status"] == "ok" and record["errors"] == 0, record
        assert record["tasks"] == report["settings"]["drain_tasks"] and record["left_in_queue"] == 0
    assert report["ratio_2_vs_1"] > 0 and report["user_path_ratio_2_vs_1"] > 0
    assert report["cpu_per_task_ratio"] > 0
    assert report["extra_requests_per_task"] is not None

    hops = report["hops_per_pop"]
    assert set(hops) == {"4"}
    assert hops["4"]["model"] == pytest.approx(model_hops(4, 100), abs=1e-4)
    assert 0 < hops["4"]["measured"] < 3  # a pop never costs more than a steal's worth of hops on average
    assert report["cluster"]["hops_4"]["pops"] == 100

    loads = report["node_loads"]
    assert len(loads) == 4 and sum(loads.values()) == 2 * 100
    assert report["load_deviation"] == pytest.approx(load_deviation(list(loads.values())), abs=1e-4)
    for record in report["cluster"].values():
        assert record["meets_target"] in (True, False, None)
        assert record["status"] == "ok", record
