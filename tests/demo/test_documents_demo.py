"""The classic demo runs end to end: every document goes through all three stages exactly once."""

from __future__ import annotations

import json
import subprocess
import sys


def test_demo_pipeline_indexes_every_document() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "kittiwake", "demo", "--classic", "--documents", "300", "--workers", "1", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert report["documents"] == 300
    queues = {row["queue"]: row for row in report["queues"]}
    for name in ("demo#fetch", "demo#extract", "demo#index", "demo#indexed"):
        assert queues[name]["size"] == 0
        assert queues[name]["dead"] == 0
    assert report["index_terms"] > 0
