"""`kittiwake demo` runs the main job end to end at a tiny size: a broker, a spark-worker and a python
worker, the flow's every step, and the report checked in plain Python against every shard; then
`--rerun`: one shard changes and only its chain and the report run again, the rest reused."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.timeout(420)
def test_demo_runs_the_flow_and_checks_its_report() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "kittiwake", "demo", "--size", "600kB", "--shards", "3", "--check-shards", "10", "--rerun",
         "--json"],
        capture_output=True, text=True, timeout=400,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    assert result["ok"] is True and result["state"] == "done"
    assert result["check"]["ok"] is True, result["check"]["differences"]
    shards = result["dataset"]["shards"]
    assert result["check"]["shards_checked"] == list(range(shards))  # every shard recomputed
    assert result["report"]["totals"]["events"] == result["dataset"]["clean_rows"]
    assert {step["step"]: (step["done"], step["dead"]) for step in result["steps"]} == {
        "shards": (1, 0), "clean": (shards, 0), "users": (shards, 0), "enrich": (shards, 0), "report": (1, 0)}
    for join in result["joins"]:  # every token met its partners, every job finished
        assert (join["tokens_waiting"], join["size"], join["dead"]) == (0, 0, 0), join
    assert {join["step"]: join["ports"] for join in result["joins"]}["enrich"] == "events (required), users (required)"
    assert len(result["report"]["top_users"]) == 10
    rerun = result["rerun"]
    assert rerun["ok"] is True and rerun["state"] == "done", rerun
    assert {step["step"]: (step["done"], step["reused"]) for step in rerun["steps"]} == {
        "shards": (1, 0), "clean": (3, 2), "users": (3, 2), "enrich": (3, 2), "report": (1, 0)}
    assert rerun["changed_shard"] in rerun["shards_checked"]
