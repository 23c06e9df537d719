"""`kittiwake bench flows`: a --quick run through the CLI writes the documented JSON shape, the join
delivers each job exactly once, and both pipelines agree. Timings are never asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kittiwake_benchmarks.flows import histogram
from kittiwake_benchmarks.join_load import JOIN_PORTS, tokens
from kittiwake.cli.bench_command import bench

LATENCY_KEYS = {"p50", "p90", "p99", "p999", "max"}


@pytest.mark.timeout(300)
def test_quick_run_measures_joins_step_start_and_overhead(tmp_path: Path, spark_session: object) -> None:
    report_path = tmp_path / "report.json"
    result = CliRunner().invoke(bench, ["flows", "--quick", "--json", str(report_path), "--dir", str(tmp_path)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert not list(tmp_path.glob("kittiwake-bench-*")), "the broker's throwaway directory is left behind"
    assert report_path.with_suffix(".png").stat().st_size > 0  # the latency CDF, next to the JSON
    flows = json.loads(report_path.read_text())["flows"]

    join = flows["join_tokens"]
    assert join["keys"] == 2000 and join["tokens"] == 6000
    assert join["errors"] == 0, join.get("first_error")
    assert join["jobs"] == join["distinct_keys"] == 2000
    assert (join["duplicates"], join["missing"], join["malformed"], join["tokens_left_waiting"]) == (0, 0, 0, 0)
    assert join["exactly_once"] is True
    assert isinstance(join["tasks_per_s"], float) and isinstance(join["ratio"], float)
    assert flows["plain_enqueue"]["stored"] == 6000

    start = flows["step_start"]
    assert start["samples"] == 10 and set(start["latency_ms"]) == LATENCY_KEYS
    assert set(start["reference"]) == {"spark_noop_job_ms", "lease_round_trip_ms"}
    assert start["meets_target"] in (True, False)
    assert sum(bucket["count"] for bucket in flows["step_start_histogram"]) == 10
    assert flows["spark"]["reused_session"] is True  # the test run's one session, not a second JVM

    overhead = flows["overhead"]
    assert overhead["same_figures"] is True
    assert overhead["flow_s"] > 0 and overhead["plain_s"] > 0
    for kind in ("flow", "plain"):  # where the JVM's time went: its JIT compilers and collectors
        assert overhead["cpu_secs"][kind]["jit"] >= 0 and overhead["cpu_secs"][kind]["gc"] >= 0
    assert {step["step"]: step["jobs"] for step in overhead["flow_times"]["steps"]} == {
        "shards": 1, "clean": 2, "users": 2, "enrich": 2, "report": 1}
    # the incremental re-runs: nothing changed reuses every job; one shard changed runs its chain and the report
    assert isinstance(overhead["rerun_unchanged_ratio"], float) and isinstance(overhead["rerun_one_changed_ratio"], float)
    reruns = overhead["reruns"]
    assert {step: jobs["ran"] for step, jobs in reruns["unchanged"]["jobs"].items()} == {
        "shards": 0, "clean": 0, "users": 0, "enrich": 0, "report": 0}
    assert {step: (jobs["ran"], jobs["reused"]) for step, jobs in reruns["one_changed"]["jobs"].items()} == {
        "shards": (1, 0), "clean": (1, 1), "users": (1, 1), "enrich": (1, 1), "report": (1, 0)}


def test_producers_share_every_token_once_in_a_shuffled_order() -> None:
    shares = [tokens(50, JOIN_PORTS, seed=3, index=index, producers=4) for index in range(4)]
    every = [token for share in shares for token in share]
    assert len(every) == len(set(every)) == 150
    assert shares[0] == tokens(50, JOIN_PORTS, seed=3, index=0, producers=4)  # seeded
    assert shares[0] != sorted(shares[0])


def test_histogram_counts_every_sample_in_its_bucket() -> None:
    buckets = histogram([int(ms * 1e6) for ms in (0.5, 1.5, 1.9, 30, 2000)])
    counts = {(bucket["from_ms"], bucket["to_ms"]): bucket["count"] for bucket in buckets}
    assert counts[(0.0, 1)] == 1 and counts[(1.0, 2)] == 2 and counts[(20.0, 50)] == 1 and counts[(1000.0, None)] == 1
    assert sum(counts.values()) == 5
