"""Runs of flows with python steps on a worker loop, against a real broker: split, merge, optional
inputs, failures and retries, interleaved runs, cancelling and garbage collection."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import pytest

from flow import pipelines
from kittiwake import Client, errors
from kittiwake.client.interfaces import QueueClient
from kittiwake.flow import Dataset
from kittiwake.flow.jobs import FlowJobs
from kittiwake.flow.runs import finish_run, list_runs


def joins_waiting(client: Client, flow: Any) -> dict[str, int]:
    return {info.name: info.tokens_waiting for info in client.list_joins(f"^{flow.names.group}#")}


def queues_of(client: Client, flow: Any) -> set[str]:
    return {info.queue for info in client.list_queues(f"^{flow.names.group}#")}


def test_a_split_runs_a_job_per_item_and_the_merge_sees_them_all(client: Client, python_workers, tmp_path: Path) -> None:
    python_workers(pipelines.tiny)
    run = pipelines.tiny.run(client, {"numbers": [1, 2, 3, 4]}, data_dir=tmp_path)
    status = run.wait(timeout=30)
    assert status.state == "done", status
    assert run.outputs() == {"add.out": Dataset.inline({"sum": 30, "run": run.id, "count": 4})}
    assert {p.step: p.done for p in status.steps} == {"spread": 1, "square": 4, "add": 1}
    assert status.ended_at is not None and not status.dead


def test_two_runs_interleaved_never_mix_tokens(client: Client, python_workers, tmp_path: Path) -> None:
    python_workers(pipelines.tiny, concurrency=4)
    runs = [pipelines.tiny.run(client, {"numbers": list(range(n, n + 20))}, data_dir=tmp_path) for n in (0, 1000)]
    for run, first in zip(runs, (0, 1000)):
        assert run.wait(timeout=60).state == "done"
        assert run.outputs()["add.out"].value == {
            "sum": sum(n * n for n in range(first, first + 20)), "run": run.id, "count": 20}
    assert [status.run for status in list_runs(pipelines.tiny, client)] == [run.id for run in runs]


def test_an_optional_input_is_taken_along_when_its_token_is_there(client: Client, python_workers, tmp_path: Path) -> None:
    python_workers(pipelines.hints)
    run = pipelines.hints.run(client, {"words": ["kittiwake", "gull", "kestrel"]}, data_dir=tmp_path)
    assert run.wait(timeout=30).state == "done"
    assert run.outputs()["page.out"].value == [
        "KITTIWAKE:9 (kittiwake starts with k)", "GULL:4", "KESTREL:7 (kestrel starts with k)"]
    assert sum(joins_waiting(client, pipelines.hints).values()) == 0


def test_a_failing_step_is_retried_then_dead_lettered_and_the_run_fails_until_retried(
    client: Client, python_workers, fail_dir: Path, tmp_path: Path
) -> None:
    (fail_dir / "square").write_text("")
    loop = python_workers(pipelines.tiny)
    run = pipelines.tiny.run(client, {"numbers": [1, 2]}, data_dir=tmp_path)
    status = run.wait(timeout=30)
    assert status.state == "failed"
    assert sorted(dead.key for dead in status.dead) == [f"{run.id}/00000000", f"{run.id}/00000001"]
    assert all(dead.step == "square" and "RuntimeError: square fails on purpose" in dead.reason for dead in status.dead)
    assert loop.settler.retried >= 2  # max_attempts=2: one retry each before the dead letter
    square = next(p for p in status.steps if p.step == "square")
    assert (square.dead, square.done) == (2, 0)
    (fail_dir / "square").unlink()
    assert run.retry() == 2
    status = run.wait(timeout=30)
    assert status.state == "done"
    assert run.outputs()["add.out"].value["sum"] == 5


def test_a_finished_run_leaves_its_record_its_end_and_its_outputs(client: Client, python_workers, tmp_path: Path) -> None:
    python_workers(pipelines.hints)
    run = pipelines.hints.run(client, {"words": ["gull"]}, data_dir=tmp_path)
    assert run.wait(timeout=30).state == "done"
    group = pipelines.hints.names.group
    assert queues_of(client, pipelines.hints) == {f"{group}#runs", f"{group}#runs.ended", f"{group}#outputs.{run.id}"}
    assert sum(joins_waiting(client, pipelines.hints).values()) == 0
    # what was kept is enough to answer for the run later
    again = pipelines.hints.attach(client, run.id)
    assert again.status().state == "done" and again.outputs()["page.out"].value == ["GULL:4"]


def test_garbage_collection_removes_tokens_a_run_left_behind(client: Client, tmp_path: Path) -> None:
    # no worker: the run's first job waits; a stray token of the run waits at another step's port
    run = pipelines.tiny.run(client, {"numbers": [1]}, data_dir=tmp_path)
    other = pipelines.tiny.run(client, {"numbers": [2]}, data_dir=tmp_path)
    square = pipelines.tiny.steps["square"]
    client.enqueue(square.port_queue("n"), b"x", pid=f"{run.id}/00000007")
    assert run.status().state == "running"
    status = run.cancel("not needed")
    assert status.state == "cancelled" and status.reason == "not needed"
    assert sum(joins_waiting(client, pipelines.tiny).values()) == 0
    assert client.peek(pipelines.tiny.steps["spread"].job_queue, 10)[0].pid == other.id  # the other run is whole
    assert other.status().state == "running"
    assert run.cancel().state == "cancelled"  # idempotent
    with pytest.raises(errors.BadRequest):
        run.retry()


def test_a_job_of_a_cancelled_run_is_dropped_unrun(client: Client, python_workers, fail_dir: Path, tmp_path: Path) -> None:
    (fail_dir / "square.slow").write_text("1.5")
    python_workers(pipelines.tiny)
    run = pipelines.tiny.run(client, {"numbers": [3, 4]}, data_dir=tmp_path)
    deadline = time.monotonic() + 10
    while not any(p.running for p in run.status().steps if p.step == "square"):
        assert time.monotonic() < deadline, "square never started"
        time.sleep(0.05)
    assert run.cancel().state == "cancelled"
    time.sleep(2.0)  # the running squares end; their outputs are refused: the jobs were withdrawn
    status = run.status()
    assert status.state == "cancelled" and {p.step: p.done for p in status.steps}["square"] == 0
    assert not client.list_queues(f"^{pipelines.tiny.names.group}#(in|steps|done)\\.")


def test_starting_a_run_twice_with_its_id_starts_it_once(client: Client, python_workers, tmp_path: Path) -> None:
    first = pipelines.tiny.run(client, {"numbers": [5]}, data_dir=tmp_path, run_id="nightly-1")
    second = pipelines.tiny.run(client, {"numbers": [5]}, data_dir=tmp_path, run_id="nightly-1")
    assert second.id == first.id == "nightly-1"
    assert len(client.peek(pipelines.tiny.steps["spread"].job_queue, 10)) == 1
    python_workers(pipelines.tiny)
    assert first.wait(timeout=30).state == "done"
    assert first.outputs()["add.out"].value["count"] == 1


def test_a_run_needs_every_input_and_nothing_else(client: Client, tmp_path: Path) -> None:
    with pytest.raises(errors.BadRequest, match="missing"):
        pipelines.tiny.run(client, {}, data_dir=tmp_path)
    with pytest.raises(errors.BadRequest, match="unknown"):
        pipelines.tiny.run(client, {"numbers": [1], "words": []}, data_dir=tmp_path)
    with pytest.raises(errors.BadRequest):
        pipelines.tiny.run(client, {"numbers": [1]}, data_dir=tmp_path, run_id="a/b")


def test_wait_collects_what_a_finisher_that_died_after_the_end_left(client: Client, python_workers, tmp_path: Path) -> None:
    """A run's end is written before its garbage is collected: a finisher killed in between leaves
    tokens behind an ended run. Waiting on the run collects them."""
    python_workers(pipelines.tiny)
    run = pipelines.tiny.run(client, {"numbers": [1]}, data_dir=tmp_path)
    assert run.wait(timeout=30).state == "done"
    add = pipelines.tiny.steps["add"]
    # the token left behind; the worker's finisher may still be collecting the run's garbage (the
    # end is written first) and take it: then it is put back once the finisher is through
    deadline = time.monotonic() + 30
    while True:
        client.enqueue(add.port_queue("squares"), b"x", pid=f"{run.id}/00000007/00000000")
        waiting = sum(joins_waiting(client, pipelines.tiny).values())
        if waiting == 1 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert waiting == 1
    assert run.wait(timeout=30).state == "done"
    assert sum(joins_waiting(client, pipelines.tiny).values()) == 0


def test_a_done_run_says_which_tokens_never_met_their_partners(client: Client, python_workers, tmp_path: Path) -> None:
    python_workers(pipelines.tiny)
    run = pipelines.tiny.run(client, {"numbers": [1]}, data_dir=tmp_path)
    add = pipelines.tiny.steps["add"]
    client.enqueue(add.port_queue("squares"), b"x", pid=f"{run.id}/00000005/00000000")  # a sequence that never ends
    status = run.wait(timeout=30)
    assert status.state == "done" and status.reason == "1 token(s) never met the rest of their job's inputs (add: 1)"
    assert {p.step: p.waiting for p in status.steps}["add"] == 1
    assert sum(joins_waiting(client, pipelines.tiny).values()) == 0  # collected all the same


def finish_by_hand(client: Client, jobs: FlowJobs, task: Any, value: Any) -> None:
    """Finish a leased job of `pipelines.tiny` as its worker would: `value` is what the step returned."""
    prepared = jobs.prepare(task)
    items = [{"out": Dataset.inline(item)} for item in (value if prepared.step.split else [value])]
    client.update(dequeue=[task], enqueue=jobs.finish(prepared, items))


class FinishesBeforePeeking:
    """Reads through a Client; just before its first peek of `queue`, `action` runs: a worker
    finishing a job while a finisher is between two of its reads."""

    def __init__(self, inner: Client, queue: str, action: Callable[[], None]) -> None:
        self.inner, self.queue, self.action = inner, queue, action
        self.peeked: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def peek(self, queue: str, n: int = 10, from_pid: str | None = None) -> Any:
        if queue == self.queue and self.action is not None:
            action, self.action = self.action, None
            action()
        self.peeked.append(queue)
        return self.inner.peek(queue, n, from_pid)


def test_a_job_that_moves_on_while_the_finisher_looks_keeps_the_run_going(client: Client, tmp_path: Path) -> None:
    """The last `square` finishes (starting `add`) after the finisher looked at `add`'s queue and
    before it looks at `square`'s: the finisher must still see a job, so it looks at the steps'
    queues in the order jobs flow through them (a job only starts jobs of later steps)."""
    flow = pipelines.tiny
    jobs = FlowJobs([flow], client)
    run = flow.run(client, {"numbers": [3]}, data_dir=tmp_path)
    spread, square, add = (flow.steps[name].job_queue for name in ("spread", "square", "add"))
    finish_by_hand(client, jobs, client.lease(spread, lease_secs=60)[0], [3])
    held = client.lease(square, lease_secs=60)[0]  # the last job, running on a worker

    reads = FinishesBeforePeeking(client, square, lambda: finish_by_hand(client, jobs, held, 9))
    ended = finish_run(reads, run.record) is not None
    peeked = list(dict.fromkeys(queue for queue in reads.peeked if queue in (spread, square, add)))
    assert not ended, f"ended with a job of {add} still to run, having peeked the job queues in order {peeked}"
    assert [view.pid for view in client.peek(add, 10)] == [run.id]
    assert run.status().state == "running"

    finish_by_hand(client, jobs, client.lease(add, lease_secs=60)[0], {"sum": 9})
    status = run.status()
    assert status.state == "done", status
    assert {p.step: p.done for p in status.steps} == {"spread": 1, "square": 1, "add": 1}


def test_a_dead_job_retried_while_the_finisher_looks_keeps_the_run_going(client: Client, tmp_path: Path) -> None:
    """The last `square` is dead-lettered; a `retry` puts it back after the finisher looked at the job
    queues and before it looks at the dead-letter queues: it is in neither where the finisher looked,
    so the finisher must look at the job queues once more before it ends the run."""
    flow = pipelines.tiny
    jobs = FlowJobs([flow], client)
    run = flow.run(client, {"numbers": [3]}, data_dir=tmp_path)
    spread, square = (flow.steps[name].job_queue for name in ("spread", "square"))
    finish_by_hand(client, jobs, client.lease(spread, lease_secs=60)[0], [3])
    client.release(client.lease(square, lease_secs=60)[0], "broken", bury=True)
    assert run.status().state == "failed"

    reads = FinishesBeforePeeking(client, f"{square}.dead", lambda: run.retry())
    ended = finish_run(reads, run.record) is not None
    assert not ended, "ended with a retried job of square back in its queue"
    assert run.status().state == "running"
    assert [view.pid.partition("/")[0] for view in client.peek(square, 10)] == [run.id]


class Routed:
    """A client that is no `kittiwake.Client`: each `QueueClient` call goes to a Client and is
    counted, as a client routing each call to one of several brokers would."""

    def __init__(self, inner: Client) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()

    @property
    def worker(self) -> str | None:
        return self.inner.worker


def _forward(name: str) -> Callable[..., Any]:
    def call(self: Routed, *args: Any, **kwargs: Any) -> Any:
        self.calls[name] += 1
        return getattr(self.inner, name)(*args, **kwargs)

    call.__name__ = name
    return call


for _name in dir(QueueClient):
    if not _name.startswith("_") and _name != "worker":
        setattr(Routed, _name, _forward(_name))


def test_flows_and_workers_take_any_queue_client_or_a_url(broker, tmp_path: Path) -> None:
    from kittiwake.worker import WorkerConfig, WorkerLoop

    starter, working = Routed(Client(broker.url)), Routed(Client(broker.url))
    assert isinstance(starter, QueueClient) and not isinstance(starter, Client)
    app = pipelines.tiny.kittiwake_app()
    app.url = None
    loop = WorkerLoop(app, WorkerConfig(url=broker.url, concurrency=2, wait_secs=0.2, registry_every_secs=0.5,
                                        shutdown_secs=5), client=working)
    thread = threading.Thread(target=loop.run, name="python-steps-routed", daemon=True)
    thread.start()
    try:
        run = pipelines.tiny.run(starter, {"numbers": [1, 2]}, data_dir=tmp_path)
        assert run.client is starter and run.wait(timeout=30).state == "done"
        assert starter.calls["declare_join"] == len(pipelines.tiny.steps) and starter.calls["update"] == 1
        assert working.calls["lease"] > 0 and working.calls["update"] > 0  # jobs' outputs with their dequeues
        attached = pipelines.tiny.attach(broker.url, run.id)  # a URL: a Client of its own, closed with the handle
        assert attached.status().state == "done" and isinstance(attached.client, Client)
        attached.close()
        assert [status.run for status in pipelines.tiny.runs(broker.url)] == [run.id]
        not_a_client: Any = 42
        with pytest.raises(errors.BadRequest, match="give a kittiwake.Client or a broker URL"):
            pipelines.tiny.run(not_a_client, {"numbers": [1]}, data_dir=tmp_path)
    finally:
        loop.stop()
        thread.join(60)
        starter.inner.close()
        working.inner.close()
    assert not thread.is_alive()
