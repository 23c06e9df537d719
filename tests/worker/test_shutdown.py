"""Stopping and recycling worker processes without losing or repeating a task."""

from __future__ import annotations

import time
from pathlib import Path

from kittiwake import Client
from support.broker_process import BrokerProcess
from worker import apps
from worker.harness import read_lines, wait_for, workers


def started(path: Path) -> list[str]:
    return [line.split()[1] for line in read_lines(path) if line.startswith("start ")]


def test_sigterm_finishes_the_running_task_and_hands_back_the_rest(broker: BrokerProcess, app, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    handles = [apps.slow.submit(str(runs), f"least{n}", 1.0) for n in range(3)]
    handles += [apps.slow_at_most_once.submit(str(runs), f"most{n}", 1.0) for n in range(3)]
    worker = workers(broker.url, tmp_path, "--concurrency", "1", "--prefetch", "5", "--queues", "short")
    wait_for(lambda: started(runs), message="a task to start")
    time.sleep(0.2)
    stopped_at = time.monotonic()
    assert worker.terminate(timeout=30) == 0
    assert time.monotonic() - stopped_at < 5
    assert len(started(runs)) == 1
    first = started(runs)[0]
    assert [line.split()[:2] for line in read_lines(runs)] == [["start", first], ["end", first]]
    with Client(broker.url) as client:  # handed back unstarted: no attempt used
        assert [view.attempts for view in client.peek("short", n=10)] == [0] * 5
    with workers(broker.url, tmp_path, "--concurrency", "6"):
        results = app.results(handles, timeout=30)  # at-most-once tasks handed back unstarted still run
    assert sorted(results) == sorted(f"least{n}" for n in range(3)) + sorted(f"most{n}" for n in range(3))
    assert sorted(started(runs)) == sorted(results)  # nothing ran twice


def test_max_tasks_per_child_recycles_without_losing_a_task(broker: BrokerProcess, app, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    handles = [apps.whoami.submit(str(runs), str(n)) for n in range(20)]
    with workers(broker.url, tmp_path, "--max-tasks-per-child", "5", "--prefetch", "3", "--queues", "tests") as worker:
        pids = app.results(handles, timeout=60)
        assert len(set(pids)) >= 4
        assert worker.log().count("recycles: ran 5 tasks") >= 3
    assert sorted(line.split()[0] for line in read_lines(runs)) == sorted(str(n) for n in range(20))


def test_max_memory_recycles_after_the_task(broker: BrokerProcess, app, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    handles = [apps.whoami.submit(str(runs), str(n)) for n in range(4)]
    with workers(broker.url, tmp_path, "--max-memory", "1", "--prefetch", "0", "--queues", "tests") as worker:
        pids = app.results(handles, timeout=60)
        assert len(set(pids)) == 4  # every process is over 1 MB after its first task
        assert "over --max-memory 1 MB" in worker.log()
    assert len(read_lines(runs)) == 4


def test_worker_processes_stop_when_their_supervisor_is_killed(broker: BrokerProcess, app, tmp_path: Path) -> None:
    import os
    import signal

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"

    with workers(broker.url, tmp_path, "--processes", "2", processes=2) as worker:
        children = worker.worker_pids()
        os.kill(worker.proc.pid, signal.SIGKILL)  # the supervisor only
        wait_for(lambda: not any(alive(pid) for pid in children), timeout=15, message="orphans to stop")


def test_a_worker_process_whose_supervisor_died_while_it_started_does_not_run_on(
    broker: BrokerProcess, app, tmp_path: Path
) -> None:
    """The kernel signals a parent's death only to children that asked before it died: a worker
    process still starting when its supervisor is killed must notice by itself and exit."""
    import os
    import subprocess
    import sys

    from kittiwake.worker.config import WorkerConfig
    from kittiwake.worker.supervisor import SUPERVISOR_PID_VARIABLE
    from worker.harness import TESTS_DIR, process_alive

    config = WorkerConfig(app="worker.apps:app", url=broker.url, queues=["tests"], sys_path=[str(TESTS_DIR)])
    # a stand-in supervisor: starts one worker process the way `Supervisor` does, and dies at once
    launcher = (
        "import os, subprocess, sys\n"
        f"env = dict(os.environ, {SUPERVISOR_PID_VARIABLE}=str(os.getpid()))\n"
        "child = subprocess.Popen([sys.executable, '-m', 'kittiwake.worker', sys.argv[1]], env=env,"
        " stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "print(child.pid, flush=True)\n"
        "os._exit(0)\n"
    )
    out = subprocess.run([sys.executable, "-c", launcher, config.to_json()], capture_output=True, check=True,
                         cwd=str(TESTS_DIR), env=dict(os.environ, PYTHONPATH=str(TESTS_DIR)))
    pid = int(out.stdout)
    try:
        wait_for(lambda: not process_alive(pid), timeout=15, message="the orphaned worker process to exit")
    finally:
        if process_alive(pid):
            os.kill(pid, 9)
