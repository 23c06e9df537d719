"""Plumbing shared by every benchmark's helper processes: a pool of them, their
main loop (on uvloop when installed), their CPU time.

A member is a (process, pipe, counter) triple: the parent sends jobs down the
pipe and `None` to stop; the counter shows live progress. `ProcessPool` holds
the members of one benchmark (load processes; workers and a submitter).
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import traceback
from typing import Any, Callable

from kittiwake.bench.wire import use_uvloop


def cpu_secs() -> float:
    """User + system CPU of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def process_cpu_secs(pid: int) -> float | None:
    """User + system CPU of process `pid` (all its threads) so far; None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def start_processes(count: int, serve: Callable[[Any, Any], None]) -> list[tuple[Any, Any, Any]]:
    """Spawn `count` members running `serve(pipe, counter)`; spawned, so they share nothing with this one."""
    context = multiprocessing.get_context("spawn")
    members = []
    for _ in range(count):
        parent_end, child_end = context.Pipe()
        counter = context.Value("q", 0, lock=False)
        process = context.Process(target=serve, args=(child_end, counter), daemon=True)
        process.start()
        child_end.close()
        members.append((process, parent_end, counter))
    return members


def stop_processes(members: list[tuple[Any, Any, Any]]) -> None:
    """Ask each member to stop, then make sure it did."""
    for _process, pipe, _counter in members:
        try:
            pipe.send(None)
        except (BrokenPipeError, OSError):
            pass
    for process, pipe, _counter in members:
        process.join(5)
        if process.is_alive():
            process.terminate()
            process.join(5)
        pipe.close()


class ProcessPool:
    """Long-lived helper processes running `serve(pipe, counter)`, spawned once per benchmark.

    Member `index` runs one job at a time: `start` sends it, `count` reads its progress
    counter, `done` says whether it answered (or died), `result` reads the answer."""

    def __init__(self, count: int, serve: Callable[[Any, Any], None]) -> None:
        self.members: list[tuple[Any, Any, Any]] = start_processes(count, serve)

    @property
    def size(self) -> int:
        return len(self.members)

    def start(self, index: int, job: Any) -> None:
        _, pipe, counter = self.members[index]
        counter.value = 0
        pipe.send(job)

    def send(self, index: int, message: Any) -> None:
        """A message for a running job (a stop signal)."""
        self.members[index][1].send(message)

    def count(self, index: int) -> int:
        return self.members[index][2].value

    def done(self, index: int, timeout: float = 0.0) -> bool:
        process, pipe, _ = self.members[index]
        return pipe.poll(timeout) or not process.is_alive()

    def result(self, index: int) -> Any:
        """The answer to the member's job; raises RuntimeError with what went wrong in it."""
        process, pipe, _ = self.members[index]
        try:
            status, payload = pipe.recv()
        except (EOFError, OSError) as exc:
            raise RuntimeError(f"benchmark process {process.pid} went away (exit code {process.exitcode}): {exc!r}")
        if status != "ok":
            raise RuntimeError(f"a benchmark process failed:\n{payload}")
        return payload

    def close(self) -> None:
        stop_processes(self.members)


def serve_jobs(pipe: Any, counter: Any, run: Callable[[Any], Any], ignore: Callable[[Any], bool] = lambda job: False) -> None:
    """A helper process's main loop: run each job the parent sends and answer
    ("ok", result) or ("error", traceback); `None` or a closed pipe ends it,
    and jobs that `ignore` accepts (late stop signals) are skipped."""
    use_uvloop()
    while True:
        try:
            job = pipe.recv()
        except EOFError:
            return
        if job is None:
            return
        if ignore(job):
            continue
        counter.value = 0
        try:
            outcome: Any = ("ok", run(job))
        except BaseException:  # reported to the parent, which raises it
            outcome = ("error", traceback.format_exc())
        pipe.send(outcome)
