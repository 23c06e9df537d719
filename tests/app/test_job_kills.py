"""DAGs while their workers, or their submitter, are SIGKILLed: what was submitted runs, in order, to the end.

Workers killed. A job of 200 tasks with fan-out and fan-in
(`dag_submitter.build_dag`) runs on two worker commands while the test
SIGKILLs, every 0.3–1 s, a worker process (its supervisor starts another), a
supervisor alone (its processes stop gracefully), or a whole command (like a
machine dying; a new command takes its place). Each task run writes its start
and end to a run log (`worker/run_log.py`). Then:

* every handle gets its result, and nothing is left in the job's queues;
* no task started before a run of each of its parents had ended;
* a task ran more than once only after its earlier run's process was killed
  or its worker lost the lease — the repeats are counted by reason and printed.

Submitter killed. A program builds a job and submits it in requests of 20
tasks (`dag_submitter`); the test SIGKILLs it at a random moment of the
submit while workers run what arrives. `submit` sends parents before their
children and each request is all or nothing, so what the broker got is the
first k requests: a closed set, every task's parents in it. The test checks
that exactly such a prefix ran, in order, and that no task is left blocked.
The results of a dead submitter wait in its reply queue (nobody will read
them: its handles died with it); the test counts them.

The suite kills 8 times and 6 submitters; ``--soak`` runs jobs of 1,000
tasks one after another, ten kills each, through 100 kills
(KITTIWAKE_DAG_KILLS sets another count). KITTIWAKE_KILL_SEED replays a
schedule (kill times and targets; the processes' interleaving varies).
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.dag_submitter import build_dag
from kittiwake.app.envelope import reply_queue_for
from support.broker_process import BrokerProcess
from worker import apps, run_log
from worker.harness import TESTS_DIR, WorkerFleet, wait_for, workers

DAG_QUEUE = apps.dag_step.queue
JOB_QUEUES = [DAG_QUEUE, f"{DAG_QUEUE}.dead", f"{DAG_QUEUE}.delayed"]
WORKER_ARGS = ("--concurrency", "2", "--queues", DAG_QUEUE, "--shutdown-secs", "5")
KILL_EVERY_SECS = (0.3, 1.0)
SUBMITTER_ROUNDS = 6
SUBMITTED_TASKS = 400
SUBMIT_CHUNK = 20
SUBMITTED_STEP_SECS = 0.002
KILL_WINDOW = (0.0, 1.3)  # when to kill a submitter, as a share of an undisturbed submit's time


def kill_seed() -> int:
    text = os.environ.get("KITTIWAKE_KILL_SEED")
    return int(text) if text else 20240612


def left_in(app, queues: list[str]) -> int:  # type: ignore[no-untyped-def]
    return sum(stats.size for stats in app.client.stats(queues))


def run_dag_under_kills(broker: BrokerProcess, app, tmp_path: Path, size: int, kills: int, seed: int) -> int:  # type: ignore[no-untyped-def]
    """One job of `size` tasks under up to `kills` kills (fewer if it finishes first); returns the kills."""
    print(f"\nDAG of {size} tasks, {kills} kills, seed={seed} (replay with KITTIWAKE_KILL_SEED={seed})")
    tmp_path.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    runs = tmp_path / "runs"
    job, nodes, edges = build_dag(app, runs, size, rng)
    started = time.monotonic()
    handles = job.submit(chunk=100)
    with WorkerFleet(broker.url, tmp_path, *WORKER_ARGS, count=2, processes=2) as fleet:
        while sum(fleet.kills.values()) < kills and not all(handle.done() for handle in handles):
            time.sleep(rng.uniform(*KILL_EVERY_SECS))
            fleet.kill(rng)
        results = handles.results(timeout=120)
        elapsed = time.monotonic() - started
        logs = fleet.logs()
        killed = set(fleet.killed_pids)
        kinds = dict(fleet.kills)
    assert results == [str(n) for n in range(size)]

    tag_of_pid = {handles[node].pid: str(index) for index, node in enumerate(nodes)}
    lost = {tag_of_pid[pid] for pid in re.findall(rf"lost the lease of {DAG_QUEUE}/(\S+):", logs) if pid in tag_of_pid}
    runs_by_tag = run_log.parse(runs)
    reasons, unexplained = run_log.repeats(runs_by_tag, killed, lost)
    violations = run_log.order_violations(runs_by_tag, edges)
    never_ended = sum(1 for tag_runs in runs_by_tag.values() for run in tag_runs if run.ended_at is None)
    print(
        f"  kills: {kinds}; {len(killed)} worker processes SIGKILLed; {elapsed:.1f} s\n"
        f"  runs={sum(len(r) for r in runs_by_tag.values())} of {size} tasks, cut short by a kill={never_ended}, "
        f"repeats by reason: {dict(reasons) or 'none'}\n"
        f"  edges={len(edges)}, child started while a repeat of its parent still ran="
        f"{run_log.overlaps(runs_by_tag, edges)}, order violations={len(violations)}"
    )
    assert run_log.completed(runs_by_tag) == {str(n) for n in range(size)}
    assert violations == [], violations[:5]
    assert unexplained == [], f"repeats with no kill and no lost lease behind them: {unexplained[:10]}"
    assert left_in(app, JOB_QUEUES) == 0
    return sum(kinds.values())


@pytest.mark.timeout(120)
def test_a_dag_runs_in_order_to_the_end_while_its_workers_are_killed(
    broker: BrokerProcess, app, tmp_path: Path
) -> None:
    run_dag_under_kills(broker, app, tmp_path, 200, 8, kill_seed())


@pytest.mark.soak
@pytest.mark.timeout(3600)
def test_big_dags_survive_a_hundred_worker_kills(broker: BrokerProcess, app, tmp_path: Path) -> None:
    """Jobs of 1,000 tasks, one after another, ten kills each, until the kills are done."""
    wanted = int(os.environ.get("KITTIWAKE_DAG_KILLS", "100"))
    killed = rounds = 0
    while killed < wanted:
        killed += run_dag_under_kills(broker, app, tmp_path / f"round{rounds}", 1000, min(10, wanted - killed),
                                      kill_seed() + rounds)
        rounds += 1
    print(f"{rounds} jobs of 1,000 tasks, {killed} kills")


class Submitter:
    """`dag_submitter` as a process; `app_id` is read from the task it enqueued first."""

    def __init__(self, url: str, tmp_path: Path, prefix: str, seed: int) -> None:
        self.order_path = tmp_path / f"order-{prefix}"
        self.runs = tmp_path / "runs"
        environment = dict(os.environ, PYTHONPATH=str(TESTS_DIR))
        command = [sys.executable, "-m", "app.dag_submitter", url, str(self.runs), str(self.order_path), prefix,
                   str(SUBMITTED_TASKS), str(SUBMIT_CHUNK), str(SUBMITTED_STEP_SECS), str(seed)]
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=str(TESTS_DIR))
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        assert line == "submitting\n", line + self.proc.stdout.read().decode()

    def finish(self) -> str:
        """What it printed after ``submitting`` (its submit time), or ``killed``."""
        assert self.proc.stdout is not None
        out = self.proc.stdout.read().decode()
        code = self.proc.wait(30)
        return "killed" if code == -9 else out.strip()

    def order(self) -> list[dict[str, str]]:
        return [json.loads(line) for line in self.order_path.read_text().splitlines()]


@pytest.mark.timeout(120)
def test_a_submitter_killed_in_the_middle_of_submit_leaves_nothing_half_linked(
    broker: BrokerProcess, app, tmp_path: Path
) -> None:
    seed = kill_seed()
    print(f"\nsubmitter kills, seed={seed} (replay with KITTIWAKE_KILL_SEED={seed})")
    rng = random.Random(seed)
    lines: list[str] = []
    partial = 0
    with workers(broker.url, tmp_path, "--concurrency", "4", "--queues", DAG_QUEUE, processes=2):
        # an undisturbed submit first: how long does one take?
        calibration = Submitter(broker.url, tmp_path, "c-", seed)
        submit_secs = float(calibration.finish().split()[1])
        lines.append(f"an undisturbed submit of {SUBMITTED_TASKS} tasks in requests of {SUBMIT_CHUNK}: "
                     f"{submit_secs * 1000:.0f} ms")
        for round_ in range(SUBMITTER_ROUNDS):
            prefix = f"r{round_}-"
            shape_seed = rng.randrange(2**32)
            submitter = Submitter(broker.url, tmp_path, prefix, shape_seed)
            time.sleep(rng.uniform(*KILL_WINDOW) * submit_secs)
            submitter.proc.kill()
            outcome = submitter.finish()
            order = submitter.order()
            # whatever arrived runs to the end: nothing is left blocked behind a parent that never came
            wait_for(lambda: left_in(app, JOB_QUEUES) == 0, timeout=60, message="the submitted tasks to finish")
            runs = run_log.parse(submitter.runs)
            ran = {tag for tag in run_log.completed(runs) if tag.startswith(prefix)}
            arrived = len(ran)
            assert arrived % SUBMIT_CHUNK == 0 or arrived == len(order), f"round {round_}: {arrived} tasks ran"
            assert ran == {entry["tag"] for entry in order[:arrived]}, f"round {round_}: not a prefix of the submit"
            _, _, edges = build_dag(app, submitter.runs, SUBMITTED_TASKS, random.Random(shape_seed), prefix)
            edges = [edge for edge in edges if edge[1] in ran]
            assert run_log.order_violations(runs, edges) == []
            assert all(parent in ran for parent, _ in edges), f"round {round_}: a child ran whose parent never came"
            partial += 0 < arrived < len(order)
            # the dead submitter's results wait in its reply queue
            ids = {entry["id"] for entry in order}
            reply_queues = [info.queue for info in app.client.list_queues(pattern=r"#_replies\.")
                            if info.queue != reply_queue_for(DAG_QUEUE, app.id)]
            waiting = sum(1 for queue in reply_queues for view in app.client.peek(queue, 1000) if view.pid in ids)
            lines.append(f"round {round_}: submitter {outcome}; {arrived} of {len(order)} tasks arrived and ran; "
                         f"{waiting} results wait in its reply queue (the rest it had collected)")
    print("\n".join("  " + line for line in lines))
    assert partial, "no kill landed inside a submit; the test proved nothing"
