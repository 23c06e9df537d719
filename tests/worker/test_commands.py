"""`kittiwake submit -- CMD` (shell commands as tasks) run by `kittiwake worker` without an app."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from support.broker_process import BrokerProcess
from worker.harness import wait_for, workers


def kittiwake(url: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kittiwake", "--url", url, *args],
                          capture_output=True, text=True, timeout=timeout)


def test_submit_wait_prints_the_output_and_exits_with_the_commands_code(broker: BrokerProcess, tmp_path: Path) -> None:
    with workers(broker.url, tmp_path, app=None):
        done = kittiwake(broker.url, "submit", "--wait", "--", sys.executable, "-c",
                         "import sys; print('hello from a task'); sys.exit(3)")
    assert done.returncode == 3, done.stderr
    assert done.stdout == "hello from a task\n"


def test_submit_without_wait_returns_the_task_id_at_once(broker: BrokerProcess, tmp_path: Path) -> None:
    marker = tmp_path / "touched"
    done = kittiwake(broker.url, "--json", "submit", "--queue", "shell", "--",
                     sys.executable, "-c", f"open({str(marker)!r}, 'w').write('x')")
    assert done.returncode == 0, done.stderr
    submitted = json.loads(done.stdout)
    assert submitted["queue"] == "shell" and submitted["pid"] == submitted["id"]
    with workers(broker.url, tmp_path, "--queues", "shell", app=None):
        wait_for(marker.exists, message="the command to run")


def test_submit_of_a_command_that_cannot_start_reports_the_failure(broker: BrokerProcess, tmp_path: Path) -> None:
    with workers(broker.url, tmp_path, app=None):
        done = kittiwake(broker.url, "submit", "--wait", "--", "no-such-command-here")
    assert done.returncode == 1
    assert done.stderr.startswith("error TASK_FAILED:"), done.stderr
    assert "FileNotFoundError" in done.stderr
