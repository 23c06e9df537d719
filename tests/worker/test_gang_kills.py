"""Gang tasks while workers are SIGKILLed: the gang runs whole once per successful attempt, its result arrives.

Each rank of a gang task logs its run as ``<tag>/<gang id>/<rank>`` in a run
log (`worker/run_log.py`; the gang id is new at every assembly). For each
task the tests find the assembly that succeeded and check that every rank of
it ran exactly once, start to end; other assemblies must be explained by a
kill. After the kills the same workers still run ordinary gangs: no slot is
left stuck.

* A gang that cannot assemble yet (too few slots) keeps the tasks that wait
  on it waiting: trying again later must not count as finishing it.
* A member killed after it joined, while the leader still assembles: the
  gang must not run without it (its rank would never run).
* The leader killed while assembling: the task comes back when its lease
  runs out and assembles anew.
* A member or the leader killed while the gang runs: the attempt fails as a
  lost worker and the whole gang runs again.
* More gang tasks than slots: they all get through, no kill needed.
* Random kills (a worker process, a supervisor, a whole command) while
  gangs assemble and run; ``--soak`` runs rounds of twelve gangs, ten kills
  each, through 100 kills (KITTIWAKE_GANG_KILLS sets another count).
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from support.broker_process import BrokerProcess
from worker import apps, run_log
from worker.harness import WorkerFleet, WorkerProcess, process_alive, wait_for, workers

GANG_QUEUE = apps.gang_step.queue
JOIN_QUEUE = f"{GANG_QUEUE}.gang"
SERVE_GANGS = ("--queues", f"{GANG_QUEUE},{JOIN_QUEUE}", "--prefetch", "0")
SERVE_LEADERS = ("--queues", GANG_QUEUE, "--prefetch", "0")
SERVE_MEMBERS = ("--queues", JOIN_QUEUE, "--prefetch", "0")
SIZE = 3
KILL_PAUSE_SECS = (0.3, 1.0)  # between kills: the six kills of the suite still land before the six gangs are done


def kill_seed() -> int:
    text = os.environ.get("KITTIWAKE_KILL_SEED")
    return int(text) if text else 20240613


@dataclass
class Assembly:
    """The ranks of one gang id: rank -> runs (a rank runs at most once per assembly)."""

    gang_id: str
    ranks: dict[int, list[run_log.Run]] = field(default_factory=dict)

    @property
    def whole(self) -> bool:
        return sorted(self.ranks) == list(range(SIZE)) and all(
            len(runs) == 1 and runs[0].ended_at is not None for runs in self.ranks.values()
        )

    @property
    def leader(self) -> run_log.Run | None:
        runs = self.ranks.get(0)
        return runs[0] if runs else None


def assemblies(path: Path) -> dict[str, list[Assembly]]:
    """Per task tag, its assemblies in the order their first rank started."""
    by_tag: dict[str, dict[str, Assembly]] = {}
    for rank_tag, runs in run_log.parse(path).items():
        tag, gang_id, rank = rank_tag.split("/")
        assembly = by_tag.setdefault(tag, {}).setdefault(gang_id, Assembly(gang_id))
        assembly.ranks[int(rank)] = runs
    return {
        tag: sorted(found.values(), key=lambda a: min(r[0].started_at for r in a.ranks.values()))
        for tag, found in by_tag.items()
    }


def check_gangs(path: Path, tags: list[str], killed: set[int]) -> str:
    """Each task: at least one whole assembly, and no rank run twice in one assembly. Every other
    assembly must be explained by a kill: one cut short (a rank missing — its member died before
    it started — or never ended) needs a killed process, and one killed rank if it never ended;
    a whole one repeated needs its leader killed (after its rank, before the result was sent).
    Returns a summary."""
    found = assemblies(path)
    extra = partial = 0
    for tag in tags:
        gangs = found.get(tag, [])
        assert any(gang.whole for gang in gangs), f"{tag}: no assembly ran every rank once: {gangs}"
        for gang in gangs:
            assert all(len(runs) == 1 for runs in gang.ranks.values()), f"{tag}: a rank ran twice in {gang}"
        whole = [gang for gang in gangs if gang.whole]
        for gang in gangs:
            if gang.whole:
                continue
            unfinished = {runs[0].pid for runs in gang.ranks.values() if runs[0].ended_at is None}
            explained = bool(unfinished & killed) if unfinished else bool(killed)
            assert explained, f"{tag}: assembly {gang} was cut short, yet none of its ranks was killed"
        for gang in whole[:-1]:
            assert gang.leader is not None and gang.leader.pid in killed, f"{tag}: {gang} ran whole twice"
        extra += len(whole) - 1
        partial += len(gangs) - len(whole)
    return f"{len(tags)} gangs; assemblies cut short by a kill={partial}, whole but repeated after a kill={extra}"


def mailboxes(app) -> list[str]:  # type: ignore[no-untyped-def]
    """The gang mailboxes ``<queue>.gang.<gang id>`` holding a message."""
    pattern = "^" + JOIN_QUEUE.replace(".", r"\.") + r"\."
    return [info.queue for info in app.client.list_queues(pattern=pattern) if not info.queue.endswith(".dead")]


def leftovers(app) -> str:  # type: ignore[no-untyped-def]
    """What kills left behind in the broker: messages in mailboxes nobody will read, by kind
    (``join``, ``rank``, ``abort``, ``done``: see `kittiwake.worker.gang`), and dead joins."""
    kinds: Counter[str] = Counter()
    boxes = mailboxes(app)
    for box in boxes:
        kinds.update(view.pid.split("-", 1)[0] for view in app.client.peek(box, 100))
    dead = sum(stats.size for stats in app.client.stats([f"{JOIN_QUEUE}.dead"]))
    return f"left behind: {dict(kinds) or 'nothing'} in {len(boxes)} mailboxes; {dead} dead-lettered joins"


def assert_slots_free(runs: Path) -> None:
    """The workers still assemble and run a gang at once: no slot is stuck."""
    handle = apps.gang_step.submit(str(runs), "after", 0.0)
    assert handle.result(timeout=30) == "after"


def test_a_gang_waiting_for_slots_holds_back_the_tasks_after_it(broker: BrokerProcess, app, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    job = app.job()
    gang = job.add(apps.gang_step, str(runs), "gang", 0.2)
    child = job.add(apps.dag_step, str(runs), "child", 0.0, after=[gang])
    handles = job.submit()
    serve = ("--queues", f"{GANG_QUEUE},{JOIN_QUEUE},{apps.dag_step.queue}", "--prefetch", "0")
    with workers(broker.url, tmp_path, *serve, processes=2) as two:  # two slots: a gang of three cannot assemble
        wait_for(lambda: two.log().count("did not assemble") >= 2, timeout=20, message="two failed assemblies")
        assert "child" not in run_log.parse(runs), "the child ran while its parent had not run at all"
        assert handles[child].status().state == "blocked", "trying the gang again released the task after it"
        with WorkerProcess(broker.url, tmp_path / "more.log", *serve):
            assert handles[child].result(timeout=30) == "child"
    found = run_log.parse(runs)
    gang_ends = [run.ended_at for tag, tag_runs in found.items() if tag.startswith("gang/") for run in tag_runs]
    assert len(gang_ends) == SIZE and None not in gang_ends
    assert found["child"][0].started_at >= max(gang_ends)  # type: ignore[type-var]


def test_a_member_killed_while_the_gang_assembles_is_not_counted_on(
    broker: BrokerProcess, app, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    with workers(broker.url, tmp_path, *SERVE_LEADERS):
        handle = apps.gang_step_patient.submit(str(runs), "g", 0.2)
        member = WorkerProcess(broker.url, tmp_path / "member.log", *SERVE_MEMBERS)
        # the member took a join and posted its address: it waits for its rank
        wait_for(lambda: mailboxes(app), timeout=20, message="a member to join")
        killed = set(member.worker_pids())
        member.kill()
        with WorkerProcess(broker.url, tmp_path / "members.log", *SERVE_MEMBERS, processes=2):
            assert handle.result(timeout=60) == "g"
            print("\n  " + check_gangs(runs, ["g"], killed) + "; " + leftovers(app))
            assert_slots_free(runs)


def test_a_leader_killed_while_the_gang_assembles_is_replaced(broker: BrokerProcess, app, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    leader = WorkerProcess(broker.url, tmp_path / "leader.log", *SERVE_LEADERS)
    handle = apps.gang_step_patient.submit(str(runs), "g", 0.2)
    with WorkerProcess(broker.url, tmp_path / "members.log", *SERVE_MEMBERS):
        wait_for(lambda: mailboxes(app), timeout=20, message="a member to join")
        killed = set(leader.worker_pids())
        leader.kill()
        with workers(broker.url, tmp_path, *SERVE_GANGS, processes=3):
            assert handle.result(timeout=60) == "g"
            print("\n  " + check_gangs(runs, ["g"], killed) + "; " + leftovers(app))
            assert_slots_free(runs)


@pytest.mark.parametrize("rank", [0, 1])
def test_a_rank_killed_while_the_gang_runs_makes_the_whole_gang_run_again(
    broker: BrokerProcess, app, tmp_path: Path, rank: int
) -> None:
    runs = tmp_path / "runs"
    with WorkerFleet(broker.url, tmp_path, *SERVE_GANGS, count=1, processes=4) as fleet:
        handle = apps.gang_step.submit(str(runs), "g", 1.5)

        def running() -> int | None:
            for rank_tag, tag_runs in run_log.parse(runs).items():
                if rank_tag.endswith(f"/{rank}") and tag_runs[0].ended_at is None and process_alive(tag_runs[0].pid):
                    return tag_runs[0].pid
            return None

        pid = wait_for(running, timeout=20, message=f"rank {rank} to run")
        fleet.killed_pids.add(pid)
        os.kill(pid, 9)
        assert handle.result(timeout=60) == "g"
        print("\n  " + check_gangs(runs, ["g"], fleet.killed_pids))
        gangs = assemblies(runs)["g"]
        assert len(gangs) >= 2 and gangs[-1].whole
        assert_slots_free(runs)


def test_more_gangs_than_slots_all_run(broker: BrokerProcess, app, tmp_path: Path) -> None:
    """Twelve gangs of three on six slots: every slot may lead a gang that cannot assemble; a
    process holding a parked gang then lends its slot to other gangs' joins rather than lead
    another, so the gangs get through (before: every slot a parked leader, none ever assembled)."""
    runs = tmp_path / "runs"
    with WorkerFleet(broker.url, tmp_path, *SERVE_GANGS, count=2, processes=3):
        tags = [f"t{n}" for n in range(12)]
        handles = [apps.gang_step.submit(str(runs), tag, 0.3) for tag in tags]
        assert app.results(handles, timeout=90) == tags
    print("\n  " + check_gangs(runs, tags, set()))


def run_gangs_under_kills(broker: BrokerProcess, app, tmp_path: Path, gangs: int, kills: int, seed: int) -> int:  # type: ignore[no-untyped-def]
    """`gangs` gang tasks under up to `kills` kills (fewer if they finish first); returns the kills."""
    print(f"\n{gangs} gangs, {kills} kills, seed={seed} (replay with KITTIWAKE_KILL_SEED={seed})")
    tmp_path.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    runs = tmp_path / "runs"
    started = time.monotonic()
    with WorkerFleet(broker.url, tmp_path, *SERVE_GANGS, count=2, processes=3) as fleet:
        tags = [f"t{n}" for n in range(gangs)]
        handles = [apps.gang_step.submit(str(runs), tag, rng.uniform(0.1, 0.6)) for tag in tags]
        while sum(fleet.kills.values()) < kills and not all(handle.done() for handle in handles):
            time.sleep(rng.uniform(*KILL_PAUSE_SECS))
            fleet.kill(rng)
        assert app.results(handles, timeout=120) == tags
        summary = check_gangs(runs, tags, fleet.killed_pids)
        assert_slots_free(runs)
        print(f"  kills: {dict(fleet.kills)}; {summary}; {time.monotonic() - started:.1f} s\n  {leftovers(app)}")
        return sum(fleet.kills.values())


@pytest.mark.timeout(120)
def test_gangs_assemble_and_run_whole_while_workers_are_killed(broker: BrokerProcess, app, tmp_path: Path) -> None:
    run_gangs_under_kills(broker, app, tmp_path, 6, 6, kill_seed())


@pytest.mark.soak
@pytest.mark.timeout(3600)
def test_gangs_through_a_hundred_kills(broker: BrokerProcess, app, tmp_path: Path) -> None:
    """Rounds of twelve gangs, ten kills each, until the kills are done."""
    wanted = int(os.environ.get("KITTIWAKE_GANG_KILLS", "100"))
    killed = rounds = 0
    while killed < wanted:
        killed += run_gangs_under_kills(broker, app, tmp_path / f"round{rounds}", 12, min(10, wanted - killed),
                                        kill_seed() + rounds)
        rounds += 1
    print(f"{rounds} rounds of 12 gangs, {killed} kills")
