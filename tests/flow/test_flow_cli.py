"""`kittiwake flow run | status | list | cancel | retry` as subprocesses against a real broker, the
flow's python steps served by `kittiwake worker flow.pipelines:tiny` or by a worker loop in the
test's process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from flow import pipelines
from flow.spark_process import TESTS_DIR
from support.broker_process import BrokerProcess
from worker.harness import WorkerProcess


def kittiwake(url: str, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {name: value for name, value in os.environ.items() if name != "KITTIWAKE_URL"}
    environment["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), environment.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    environment["COLUMNS"] = "200"  # tables fold long cells on a narrow terminal
    environment.update(env or {})
    return subprocess.run([sys.executable, "-m", "kittiwake", "--url", url, *args], capture_output=True, text=True,
                          timeout=120, env=environment, cwd=cwd)


def ok_json(url: str, *args: str, **options: Any) -> Any:
    done = kittiwake(url, "--json", *args, **options)
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return json.loads(done.stdout)


def test_run_wait_status_and_list_with_a_worker_command(broker: BrokerProcess, tmp_path: Path) -> None:
    with WorkerProcess(broker.url, tmp_path / "worker.log", "--concurrency", "2", app="flow.pipelines:tiny"):
        status = ok_json(broker.url, "flow", "run", "flow.pipelines:tiny", "--input", "numbers=inline:[1, 2, 3]",
                         "--data-dir", str(tmp_path), "--wait", "--timeout", "60")
    assert status["state"] == "done" and status["flow"] == "tiny"
    assert status["outputs"]["add.out"][0][1]["value"]["sum"] == 14
    assert {step["step"]: step["done"] for step in status["steps"]} == {"spread": 1, "square": 3, "add": 1}
    assert ok_json(broker.url, "flow", "status", status["run"]) == status
    assert [run["run"] for run in ok_json(broker.url, "flow", "list")] == [status["run"]]
    table = kittiwake(broker.url, "flow", "status", status["run"])
    assert table.returncode == 0 and "done" in table.stdout and "square" in table.stdout
    listing = kittiwake(broker.url, "flow", "list", "--flow", "tiny")
    assert listing.returncode == 0 and status["run"] in listing.stdout


def test_a_failed_run_is_retried_and_a_waiting_one_cancelled(
    broker: BrokerProcess, python_workers, fail_dir: Path, tmp_path: Path
) -> None:
    (fail_dir / "square").write_text("")
    python_workers(pipelines.tiny)
    failed = kittiwake(broker.url, "--json", "flow", "run", "flow.pipelines:tiny", "--input", "numbers=inline:[7]",
                       "--data-dir", str(tmp_path), "--wait", "--timeout", "60")
    assert failed.returncode == 1, failed.stderr
    status = json.loads(failed.stdout)
    assert status["state"] == "failed" and status["dead"][0]["step"] == "square"
    table = kittiwake(broker.url, "flow", "status", status["run"])
    assert "dead jobs" in table.stdout and "square fails on purpose" in table.stdout
    (fail_dir / "square").unlink()
    assert ok_json(broker.url, "flow", "retry", status["run"]) == {"run": status["run"], "requeued": 1}
    handle = pipelines.tiny.attach(broker.url, status["run"])
    assert handle.wait(timeout=30).state == "done"
    handle.close()

    (fail_dir / "square.slow").write_text("3")
    started = ok_json(broker.url, "flow", "run", "flow.pipelines:tiny", "--input", "numbers=inline:[1]",
                      "--data-dir", str(tmp_path), "--run-id", "to-cancel")
    assert started == {"run": "to-cancel", "flow": "tiny"}
    cancelled = ok_json(broker.url, "flow", "cancel", "to-cancel", "--reason", "changed my mind")
    assert (cancelled["state"], cancelled["reason"]) == ("cancelled", "changed my mind")
    retry = kittiwake(broker.url, "flow", "retry", "to-cancel")
    assert retry.returncode == 1 and retry.stderr.startswith("error BAD_REQUEST")
    (fail_dir / "square.slow").unlink()


def test_unknown_runs_and_bad_inputs_say_so(broker: BrokerProcess) -> None:
    missing = kittiwake(broker.url, "flow", "status", "no-such-run")
    assert missing.returncode == 1 and missing.stderr.startswith("error TASK_NOT_FOUND")
    bad = kittiwake(broker.url, "flow", "run", "flow.pipelines:tiny", "--input", "numbers")
    assert bad.returncode == 2 and "NAME=URI" in bad.stderr
    unloadable = kittiwake(broker.url, "flow", "run", "flow.no_such_module:tiny")
    assert unloadable.returncode == 2 and "cannot load" in unloadable.stderr
