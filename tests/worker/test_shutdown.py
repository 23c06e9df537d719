"""Stopping and recycling worker processes without losing or repeating a task."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from kittiwake import Client
from support.broker_process import BrokerProcess
from worker import apps
from worker.harness import process_alive, read_lines, wait_for, workers


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

    def state(pid: int) -> str | None:
        """The process's state letter (None: gone); the name in /proc/PID/stat may hold spaces."""
        try:
            with open(f"/proc/{pid}/stat") as stat:
                return stat.read().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, IndexError):
            return None

    def alive(pid: int) -> bool:
        return state(pid) not in (None, "Z", "X")

    def where(pid: int) -> str:
        try:
            with open(f"/proc/{pid}/wchan") as wchan:
                return f"pid {pid}: state {state(pid)}, waiting in {wchan.read() or '-'}"
        except OSError as exc:
            return f"pid {pid}: {exc}"

    with workers(broker.url, tmp_path, "--processes", "2", processes=2) as worker:
        children = worker.worker_pids()
        os.kill(worker.proc.pid, signal.SIGKILL)  # the supervisor only
        try:
            wait_for(lambda: not any(alive(pid) for pid in children), timeout=15, message="orphans to stop")
        except AssertionError as exc:  # say what the survivors were doing, from their log lines and the kernel
            survivors = "; ".join(where(pid) for pid in children if alive(pid))
            log_tail = "\n".join(worker.log().splitlines()[-40:])
            raise AssertionError(f"{exc}: {survivors}\nthe workers' log, last lines:\n{log_tail}") from None


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


# ------------------------------------------------------------------ a broker that has gone away

STOP_WITHIN_SECS = 5.0  # a behaviour bound: shutdown does not wait out the client's 10 s reconnect rounds


def exit_within(worker, secs: float) -> float:  # type: ignore[no-untyped-def]
    """SIGTERM the worker and poll for its exit; returns how long it took (fails past `secs`)."""
    stopped_at = time.monotonic()
    worker.proc.send_signal(signal.SIGTERM)
    deadline = stopped_at + secs
    while worker.proc.poll() is None:
        assert time.monotonic() < deadline, f"still running {secs} s after SIGTERM\n{worker.log()[-3000:]}"
        time.sleep(0.05)
    assert worker.proc.returncode == 0, worker.log()[-3000:]
    return time.monotonic() - stopped_at


def test_sigterm_stops_a_worker_whose_broker_is_gone_at_once(broker: BrokerProcess, app, tmp_path: Path) -> None:
    worker = workers(broker.url, tmp_path, "--queues", "tests", "--registry-secs", "0.2")
    with worker:
        children = worker.worker_pids()
        wait_for(lambda: " serving tests" in worker.log(), message="the worker to serve")
        broker.kill()
        wait_for(lambda: "leasing: CONNECTION_LOST" in worker.log() or "leasing: BROKER_UNREACHABLE" in worker.log(),
                 timeout=10, message="the worker to notice the broker is gone")
        time.sleep(1.0)  # the leaser retries 0.5 s after its warning: it is now in a 10 s reconnect round
        exit_within(worker, STOP_WITHIN_SECS)
        assert not any(process_alive(pid) for pid in children)
        assert "unreachable while stopping" in worker.log()


def test_sigterm_does_not_wait_for_a_running_task_whose_broker_is_gone(
    broker: BrokerProcess, app, tmp_path: Path
) -> None:
    """Its outcome could not be posted: the task comes back when its lease runs out, as after a crash."""
    runs = tmp_path / "runs"
    apps.record.submit(str(runs), "long", 60.0)
    worker = workers(broker.url, tmp_path, "--queues", "tests")
    with worker:
        wait_for(lambda: started(runs), message="the task to start")
        broker.kill()
        exit_within(worker, STOP_WITHIN_SECS)
        assert "not waiting for 1 running task" in worker.log()


def test_sigterm_stops_the_supervisor_whose_broker_is_gone_at_once(
    broker: BrokerProcess, app, tmp_path: Path
) -> None:
    """The supervisor's own calls (the periodic scheduler's, autoscaling's) yield to the signal too."""
    worker = workers(broker.url, tmp_path, "--queues", "ticks", "--beat", "--autoscale", "1:2")
    with worker:
        wait_for(lambda: " serving ticks" in worker.log(), message="the worker to serve")
        broker.kill()
        wait_for(lambda: "BROKER_UNREACHABLE" in worker.log() or "CONNECTION_LOST" in worker.log(), timeout=15,
                 message="the supervisor to notice the broker is gone")
        time.sleep(1.0)  # an autoscaling step (every 0.5 s) is now waiting to reconnect in the supervisor
        exit_within(worker, STOP_WITHIN_SECS)
