"""The tasks the app and worker tests submit, and that their worker processes run (`worker.apps:app`).

Tasks that tests count or time write one line per event to a file the test
passes in (appends of one short line are atomic), so a test reads what ran,
when, and how often, from outside the worker processes.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

from kittiwake.app import App, TaskContext

app = App()

if os.environ.get("KITTIWAKE_TEST_SANDBOX_IMPORT_SECS") and multiprocessing.parent_process() is not None:
    time.sleep(float(os.environ["KITTIWAKE_TEST_SANDBOX_IMPORT_SECS"]))  # an app slow to import, in a timed task's sandbox


def note(path: str, *words: Any) -> None:
    with open(path, "a") as file:
        file.write(" ".join(str(word) for word in words) + "\n")


@app.task(queue="tests")
def add(a: int, b: int) -> int:
    return a + b


@app.task(queue="tests")
def echo(value: Any) -> Any:
    return value


@app.task(queue="tests", max_attempts=1)
def explode(message: str) -> None:
    raise ValueError(message)


@app.task(queue="tests")
def unserialisable() -> Any:
    return object()


@app.task(queue="tests")
def huge(size: int) -> str:
    return "x" * size


@app.task(queue="tests")
def record(path: str, tag: str, sleep_secs: float = 0.0) -> str:
    note(path, "start", tag, time.time())
    time.sleep(sleep_secs)
    note(path, "end", tag, time.time())
    return tag


@app.task(queue="tests#dag", lease_secs=5)
def node(path: str, tag: str) -> str:
    note(path, "start", tag, time.time())
    note(path, "end", tag, time.time())
    return tag


@app.task(queue="tests#dag", lease_secs=5, max_attempts=1)
def node_fails(path: str, tag: str) -> None:
    note(path, "start", tag, time.time())
    raise RuntimeError(f"{tag} fails")


@app.task(queue="short", lease_secs=1.0, max_attempts=5)
def slow(path: str, tag: str, sleep_secs: float) -> str:
    """Runs longer than its lease: only the heartbeat keeps it."""
    note(path, "start", tag, time.time())
    time.sleep(sleep_secs)
    note(path, "end", tag, time.time())
    return tag


@app.task(queue="short", lease_secs=1.0, max_attempts=5, delivery="at_most_once")
def slow_at_most_once(path: str, tag: str, sleep_secs: float) -> str:
    note(path, "start", tag, time.time())
    time.sleep(sleep_secs)
    note(path, "end", tag, time.time())
    return tag


@app.task(queue="short", lease_secs=1.0, max_attempts=4, retry_backoff=0.4)
def flaky(path: str, failures: int) -> int:
    """Fails its first `failures` runs, then returns how many runs it took."""
    note(path, "run", time.time())
    runs = len(Path(path).read_text().splitlines())
    if runs <= failures:
        raise ConnectionError(f"run {runs} fails")
    return runs


@app.task(queue="short", lease_secs=1.0, bind=True)
def reports_progress(task: TaskContext, path: str, hold_secs: float) -> str:
    task.progress(0.4, "resized 40 of 100")
    note(path, "reported", time.time())
    deadline = time.monotonic() + hold_secs
    while time.monotonic() < deadline and not Path(path + ".go").exists():
        time.sleep(0.02)
    return task.id


@app.task(queue="short", lease_secs=1.0, max_attempts=2, timeout=2.0, retry_backoff=0.1)
def timed(path: str) -> str:
    note(path, "ran", os.getpid(), time.time())
    return "finished"


@app.task(queue="short", lease_secs=1.0, max_attempts=2, timeout=1.0, retry_backoff=0.1)
def overruns(path: str, sleep_secs: float) -> str:
    note(path, "start", os.getpid(), time.time())
    time.sleep(sleep_secs)
    note(path, "end", os.getpid(), time.time())
    return "finished"


@app.task(queue="rated", rate_limit="50/s", ignore_result=True)
def rated(path: str) -> None:
    note(path, time.time(), os.getpid())


@app.task(queue="null", ignore_result=True)
def null(_: Any = None) -> None:
    return None


@app.periodic(every=1, queue="ticks")
def tick() -> None:
    path = os.environ.get("KITTIWAKE_TEST_TICKS")
    if path:
        from kittiwake.app import current_task

        note(path, current_task().pid, time.time(), os.getpid())


@app.task(queue="tests")
def whoami(path: str, tag: str) -> int:
    note(path, tag, os.getpid())
    return os.getpid()


@app.task(queue="tests")
async def waits(value: int) -> int:
    import asyncio

    await asyncio.sleep(0.01)
    return value * 10


@app.task(queue="short", lease_secs=1.0, bind=True, timeout=30)
def reports_progress_sandboxed(task: TaskContext, path: str, hold_secs: float) -> str:
    """The same, in the timeout sandbox: the report crosses the pipe to the worker process."""
    return reports_progress.function(task, path, hold_secs)


def note_gang(path: str) -> int:
    rank = int(os.environ["KITTIWAKE_RANK"])
    note(path, rank, os.environ["KITTIWAKE_SIZE"], os.environ["KITTIWAKE_PEERS"], os.getpid())
    return rank


@app.task(queue="gang", needs=3, gang_timeout=10, lease_secs=5)
def gang_of_three(path: str) -> int:
    return note_gang(path)


@app.task(queue="gang", needs=5, gang_timeout=1.5, lease_secs=5)
def gang_of_five(path: str) -> int:
    return note_gang(path)


@app.task(queue="local", lease_secs=5)
def where(path: str, tag: str, sleep_secs: float) -> str:
    """Notes the node it ran on and the queue it came from."""
    from kittiwake.app import current_task

    time.sleep(sleep_secs)
    node = os.environ.get("KITTIWAKE_NODE", "-")
    note(path, tag, node, current_task().queue)
    return node


def note_run(path: str, event: str, tag: str) -> None:
    """A line of the kill tests' run log (`worker/run_log.py`)."""
    note(path, event, tag, os.getpid(), time.time())


@app.task(queue="kills#dag", lease_secs=2.0, max_attempts=1000)
def dag_step(path: str, tag: str, sleep_secs: float) -> str:
    """A DAG node that takes a while, so that kills land in its runs; attempts enough for any kill schedule."""
    note_run(path, "start", tag)
    time.sleep(sleep_secs)
    note_run(path, "end", tag)
    return tag


def run_rank(path: str, tag: str, sleep_secs: float) -> str:
    """A gang rank that logs its run as ``<tag>/<gang id>/<rank>``; rank 0's return value is `tag`."""
    from kittiwake.worker.gang import gang_info

    info = gang_info()
    assert info is not None
    rank_tag = f"{tag}/{info['gang']}/{info['rank']}"
    note_run(path, "start", rank_tag)
    time.sleep(sleep_secs)
    note_run(path, "end", rank_tag)
    return tag


@app.task(queue="kills#gang", needs=3, gang_timeout=1.0, lease_secs=2.0, max_attempts=1000)
def gang_step(path: str, tag: str, sleep_secs: float) -> str:
    """A gang of three that gives up assembling after a second."""
    return run_rank(path, tag, sleep_secs)


@app.task(queue="kills#gang", needs=3, gang_timeout=10.0, lease_secs=2.0, max_attempts=1000)
def gang_step_patient(path: str, tag: str, sleep_secs: float) -> str:
    """A gang of three that waits ten seconds for its slots."""
    return run_rank(path, tag, sleep_secs)


@app.task(queue="outbox", lease_secs=2.0, max_attempts=2, retry_backoff=0.05, bind=True)
def records_then(task: TaskContext, tag: str, fail: bool) -> str:
    """Adds a record to `outbox.records` that commits only with this run's success, then fails if asked."""
    task.enqueue_on_success("outbox.records", f"{tag} attempt {task.attempt}", pid=tag)
    if fail:
        raise RuntimeError(f"{tag} fails")
    return tag


@app.task(queue="outbox", lease_secs=2.0, max_attempts=1, bind=True, timeout=30)
def records_sandboxed(task: TaskContext, tag: str) -> str:
    """The same record from the timeout sandbox: it crosses the pipe with the result."""
    task.enqueue_on_success("outbox.records", f"{tag} sandboxed", pid=tag)
    return tag


@app.task(queue="outbox", max_attempts=1, bind=True)
def records_elsewhere(task: TaskContext) -> None:
    """Asks for a record in another consistency group: refused before anything is sent."""
    task.enqueue_on_success("other#records", "x")


LOST_LEASE_SECS = 60.0  # longer than any test waits: a task back sooner was handed back, not timed out


@app.task(queue="lost", lease_secs=LOST_LEASE_SECS, max_attempts=2)
def aborts(path: str) -> None:
    """Kills its own worker process, as a crash in native code would (no core file is written)."""
    import resource

    note(path, "abort", os.getpid())
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.abort()


@app.task(queue="lost", lease_secs=LOST_LEASE_SECS, bind=True)
def attempt_of(task: TaskContext, tag: str) -> int:
    """Which attempt this run is (1: none counted before it)."""
    return task.attempt


@app.task(queue="lost", lease_secs=LOST_LEASE_SECS, max_attempts=1, timeout=30)
def aborts_in_its_sandbox() -> None:
    """A timed task runs in a sandbox process of its worker process: only the sandbox dies."""
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.abort()


@app.task(queue="lost", lease_secs=LOST_LEASE_SECS, max_attempts=3, timeout=30, delivery="at_most_once",
          retry_backoff=0.1)
def aborts_in_its_sandbox_at_most_once(path: str) -> None:
    """As `aborts_in_its_sandbox`, at most once: its sandbox dies mid-run, and it must not start again."""
    import resource

    note(path, "start", os.getpid())
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.abort()
