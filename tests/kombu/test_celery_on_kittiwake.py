"""An unchanged Celery app (`celery_tasks.py`) on Kittiwake and on Redis: the same calls give the same
results; and on Kittiwake a worker killed with SIGKILL mid-task loses nothing — the task runs again
once its lease runs out — and a worker whose broker was killed and restarted reconnects. Workers are
real `celery worker` processes (`-P solo`, acks_late)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import kittiwake

pytestmark = pytest.mark.timeout(120)

HERE = Path(__file__).resolve().parent
REDIS_URL = "redis://127.0.0.1:6379/0"

CLIENT_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from celery import group
    import kittiwake.kombu  # a producer registers kittiwake:// itself; the `celery` command does it for workers
    import celery_tasks as tasks

    plan = sys.argv[1]
    if plan == "calls":
        out = {
            "add": tasks.add.delay(2, 3).get(timeout=30),
            "retries": tasks.fail_then_succeed.delay(2).get(timeout=30),
            "group": group(tasks.add.s(i, i) for i in range(10))().get(timeout=30),
        }
    elif plan == "add":
        out = {"add": tasks.add.delay(2, 3).get(timeout=60)}
    elif plan == "sleep":
        out = {"sleep": tasks.noted_sleep.delay(sys.argv[2], 2.0).get(timeout=60)}
    elif plan == "ping":
        out = {"nodes": len(tasks.app.control.inspect(timeout=1).ping() or {})}
    else:
        out = {"starts": tasks.run_once_slowly.delay(sys.argv[2]).get(timeout=60)}
    print(json.dumps(out), flush=True)
    """
)


def redis_available() -> bool:
    try:
        socket.create_connection(("127.0.0.1", 6379), timeout=1).close()
        return True
    except OSError:
        return False


@pytest.fixture(autouse=True)
def celery_knows_kittiwake() -> None:
    """Workers find kittiwake:// through the `celery.commands` entry point, which only an install writes."""
    if not any(entry.name == "kittiwake" for entry in entry_points(group="celery.commands")):
        pytest.fail("the celery.commands entry point `kittiwake` is not installed: run `make setup` "
                    "(or pip install -e .) after pyproject.toml changed")


def environment(broker_url: str, queue: str) -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "CELERY_BROKER_URL": broker_url, "CELERY_TASKS_QUEUE": queue, "PYTHONPATH": path}


@contextmanager
def celery_worker(
    broker_url: str, queue: str, log: Path, pool: tuple[str, ...] = ("-P", "solo"), env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    command = [
        sys.executable, "-m", "celery", "-A", "celery_tasks", "worker", *pool, "-Q", queue,
        "-n", f"{uuid.uuid4().hex[:8]}@%h", "--without-gossip", "--without-mingle", "--without-heartbeat",
        "--loglevel=INFO",
    ]
    with log.open("ab") as sink:
        worker = subprocess.Popen(command, env={**environment(broker_url, queue), **(env or {})}, cwd=HERE,
                                  stdout=sink, stderr=sink)
    try:
        yield worker
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(timeout=15)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()


def run_client(broker_url: str, queue: str, *args: str, log: Path) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", CLIENT_SCRIPT, *args], env=environment(broker_url, queue), cwd=HERE,
        capture_output=True, text=True, timeout=90,
    )
    assert done.returncode == 0, f"{done.stderr}\n--- worker log\n{log.read_text()[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def calls_on(broker_url: str, tmp_path: Path, name: str, *plans: str) -> dict[str, object]:
    queue = f"celery_tasks_{uuid.uuid4().hex[:10]}"
    log = tmp_path / f"{name}.log"
    out: dict[str, object] = {}
    with celery_worker(broker_url, queue, log):
        for plan in plans:
            out.update(run_client(broker_url, queue, plan, log=log))
    return out


EXPECTED = {"add": 5, "retries": 2, "group": [2 * i for i in range(10)]}


def test_same_results_on_kittiwake_and_redis(broker, tmp_path: Path) -> None:
    on_kittiwake = calls_on(f"kittiwake://{broker.host}:{broker.port}", tmp_path, "kittiwake", "calls", "ping")
    # broadcast control reaches the worker (its pidbox queue, bound by the worker alone) and it answers
    assert on_kittiwake.pop("nodes") == 1
    assert on_kittiwake == EXPECTED
    if not redis_available():
        pytest.skip("Redis is not running on 127.0.0.1:6379: the Kittiwake half ran, the comparison did not")
    assert calls_on(REDIS_URL, tmp_path, "redis", "calls") == on_kittiwake


def test_killed_worker_task_runs_again_after_its_lease(broker, tmp_path: Path) -> None:
    broker_url = f"kittiwake://{broker.host}:{broker.port}?lease_secs=2"
    queue = f"celery_tasks_{uuid.uuid4().hex[:10]}"
    marker = tmp_path / "starts"
    log = tmp_path / "worker.log"
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT_SCRIPT, "once", str(marker)], env=environment(broker_url, queue), cwd=HERE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        with celery_worker(broker_url, queue, log) as first:
            deadline = time.monotonic() + 60
            while not (marker.exists() and marker.read_text().strip()):
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                assert first.poll() is None, log.read_text()[-3000:]
                time.sleep(0.05)
            first.kill()  # SIGKILL mid-task: no ack, no release, its lease just stops being renewed
            first.wait()
        with celery_worker(broker_url, queue, log):
            out, err = client.communicate(timeout=90)
        assert client.returncode == 0, f"{err}\n--- worker log\n{log.read_text()[-3000:]}"
        assert json.loads(out.strip().splitlines()[-1]) == {"starts": 2}
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    with kittiwake.Client(broker.url) as kw:
        assert kw.peek(queue) == [] and kw.peek(f"{queue}.dead") == []


def test_worker_reconnects_after_the_broker_is_killed(broker, tmp_path: Path) -> None:
    broker_url = f"kittiwake://{broker.host}:{broker.port}"
    queue = f"celery_tasks_{uuid.uuid4().hex[:10]}"
    log = tmp_path / "worker.log"
    port = broker.port
    with celery_worker(broker_url, queue, log) as worker:
        assert run_client(broker_url, queue, "add", log=log) == {"add": 5}
        broker.restart()  # SIGKILL, then the same data directory
        if broker.port != port:
            pytest.skip(f"port {port} was taken while the broker was down; the worker cannot follow it")
        assert run_client(broker_url, queue, "add", log=log) == {"add": 5}
        assert worker.poll() is None
    assert "Connection to broker lost" in log.read_text()


STOP_WITHIN_SECS = 5.0  # a behaviour bound: on a Redis that has gone away the same worker exits within 3 s


def wait_for_log(log: Path, text: str, worker: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        assert worker.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"no {text!r} in the worker's log within {timeout} s\n{log.read_text()[-3000:]}"
        time.sleep(0.05)


def stop_within(worker: subprocess.Popen[bytes], secs: float, log: Path) -> None:
    """SIGTERM (Celery's warm shutdown) and poll for the exit."""
    worker.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + secs
    while worker.poll() is None:
        assert time.monotonic() < deadline, f"still running {secs} s after SIGTERM\n{log.read_text()[-3000:]}"
        time.sleep(0.05)


def test_prefork_worker_stops_on_sigterm_when_its_broker_is_gone(broker, tmp_path: Path) -> None:
    queue = f"celery_tasks_{uuid.uuid4().hex[:10]}"
    log = tmp_path / "worker.log"
    # connection attempts as long as the Kittiwake client's own default: a wait that shutdown must cut short
    with celery_worker(f"kittiwake://{broker.host}:{broker.port}", queue, log, ("-c", "2"),
                       env={"CELERY_TASKS_CONNECT_TIMEOUT": "10"}) as worker:
        wait_for_log(log, "ready.", worker)
        broker.kill()
        wait_for_log(log, "Connection to broker lost", worker)
        time.sleep(1.0)  # the consumer is reconnecting now
        stop_within(worker, STOP_WITHIN_SECS, log)
    assert "Warm shutdown" in log.read_text()


def test_prefork_worker_finishes_its_running_task_on_sigterm(broker, tmp_path: Path) -> None:
    """Warm shutdown with the broker there, as before: the running task ends, its result arrives."""
    broker_url = f"kittiwake://{broker.host}:{broker.port}"
    queue = f"celery_tasks_{uuid.uuid4().hex[:10]}"
    marker = tmp_path / "started"
    log = tmp_path / "worker.log"
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT_SCRIPT, "sleep", str(marker)], env=environment(broker_url, queue), cwd=HERE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        with celery_worker(broker_url, queue, log, ("-c", "2")) as worker:
            deadline = time.monotonic() + 60
            while not (marker.exists() and marker.read_text().strip()):
                assert time.monotonic() < deadline and worker.poll() is None, log.read_text()[-3000:]
                time.sleep(0.05)
            stop_within(worker, 30.0, log)
            assert worker.returncode == 0, log.read_text()[-3000:]
        out, err = client.communicate(timeout=60)
        assert client.returncode == 0, f"{err}\n--- worker log\n{log.read_text()[-3000:]}"
        assert json.loads(out.strip().splitlines()[-1]) == {"sleep": "slept"}
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    with kittiwake.Client(broker.url) as kw:
        assert kw.peek(queue) == [] and kw.peek(f"{queue}.dead") == []
