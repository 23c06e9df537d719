"""`kittiwake mapreduce`: a job from the command line, its summary and JSON, and its usage errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from kittiwake.mapreduce import gen_data, reference
from kittiwake.mapreduce.driver import input_files
from kittiwake.mapreduce.outputs import canonical_of_native
from support.broker_process import BrokerProcess
from worker.harness import WorkerProcess


def kittiwake(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kittiwake", *args], capture_output=True, text=True, timeout=120)


def test_a_job_runs_from_the_command_line(broker: BrokerProcess, tmp_path: Path) -> None:
    source = tmp_path / "in"
    gen_data.write(gen_data.plan(gen_data.TEXT, 100_000, 10_000, 5), source)
    with WorkerProcess(broker.url, tmp_path / "worker.log", "--node", "n0", app="kittiwake.mapreduce.tasks:app"):
        done = kittiwake("--url", broker.url, "mapreduce", "wordcount", str(source), str(tmp_path / "out"),
                         "--reducers", "2", "--nodes", "n0")
        as_json = kittiwake("--url", broker.url, "--json", "mapreduce", "grep", str(source), str(tmp_path / "g"),
                            "--pattern", "ab")
    assert done.returncode == 0, done.stderr
    assert "wordcount: " in done.stdout and "10 maps and 2 reduces" in done.stdout and "10 on their node" in done.stdout
    assert canonical_of_native("wordcount", tmp_path / "out") == reference.reference("wordcount", input_files(source))
    assert as_json.returncode == 0, as_json.stderr
    record = json.loads(as_json.stdout)
    assert record["app"] == "grep" and record["maps"] == 10 and record["mb_s"] > 0


def test_usage_errors_say_what_is_wrong(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    missing = kittiwake("mapreduce", "grep", str(tmp_path / "in"), str(tmp_path / "out"))
    assert missing.returncode == 2 and "grep needs --pattern" in missing.stderr
    extra = kittiwake("mapreduce", "sort", str(tmp_path / "in"), str(tmp_path / "out"), "--pattern", "x")
    assert extra.returncode == 2 and "--pattern is grep's" in extra.stderr
    unknown = kittiwake("mapreduce", "join", str(tmp_path / "in"), str(tmp_path / "out"))
    assert unknown.returncode == 2 and "join" in unknown.stderr
    empty = kittiwake("--url", "kw://127.0.0.1:1", "mapreduce", "sort", str(tmp_path / "in"), str(tmp_path / "out"))
    assert empty.returncode == 1 and "no part-* files" in empty.stderr
