"""Storage faults at every stage of a commit: clients get UNAVAILABLE, nothing acknowledged is lost, nothing is half-applied.

The broker runs in this process (`support.in_process_broker`) on the real
SQLite store wrapped in `support.faulty_store.FaultyStore`, which raises what
SQLite raises when the disk is full, fails or turns read-only: on a write, a
read, a commit before anything is durable, after the commit reached the disk
(the ambiguous case: the broker cannot tell it from the one before, so it
answers that the outcome is unknown), on the rollback after a failure, and on
the recovery that rebuilds the engine. Clients (`support.queue_load`) talk to
it over TCP with the real client library while faults come and go; then the
faults clear, the broker must serve again by itself, it is stopped, a fresh
broker opens the same files, and everything left is drained and judged by the
queue checker: lost = 0, unexpected = 0, no value the broker refused as "not
applied" shows up, and every batch and update is all or nothing.

The later tests pin single behaviours: a failed rollback never lets the
failed pass through, an outage rebuilds the engine about once a second and
logs a few lines, not one per pass, reads are served while writes pause, and
each reply says what failed.
"""

from __future__ import annotations

import logging
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from kittiwake import errors
from kittiwake.broker import BrokerConfig
from kittiwake.broker.pass_replies import NOT_APPLIED, OUTCOME_UNKNOWN
from kittiwake.client import Client
from kittiwake.store.sqlite import SqliteStore
from support.checker import FAIL
from support.faulty_store import Failure, FaultyStore, Stage
from support.in_process_broker import InProcessBroker
from support.queue_load import QueueLoad, drain, hung_or_cut, wait_until_serving

ROUNDS = 7  # single faults, each followed by a pause of FAULT_EVERY_SECS while the load goes on
FAULT_EVERY_SECS = (0.05, 0.15)  # the broker retries at once after the first failure of an outage
PERSISTENT_SECS = 0.3  # one round where every call of the stage fails: writes pause for a second
# Rounds whose fault brings a rollback or recovery fault after it, and how many of those fail: one
# failed rollback is retried by the rebuild; two fail the rebuild too, which leaves no engine for a second.
CHAINED_TIMES = {Stage.ROLLBACK: {1: 1, 6: 2}, Stage.RECOVER: {6: 1}}
MIN_ACKNOWLEDGED = 100


def seed() -> int:
    text = os.environ.get("KITTIWAKE_FAULT_SEED")
    return int(text) if text else 20250301


class Run:
    """A broker on a faulty store in `directory`, which can be reopened like a restart."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.store = FaultyStore(SqliteStore(directory))
        self.broker = InProcessBroker(BrokerConfig(data_dir=str(directory), port=0), self.store)

    @property
    def url(self) -> str:
        return self.broker.url

    def restart(self) -> None:
        """Stop cleanly and open a new broker on the same files: what it serves is what is on disk."""
        self.broker.close()
        self.store = FaultyStore(SqliteStore(self.directory))
        self.broker = InProcessBroker(BrokerConfig(data_dir=str(self.directory), port=0), self.store)

    def close(self) -> None:
        self.broker.close()


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    faulty = Run(tmp_path / "data")
    try:
        yield faulty
    finally:
        faulty.close()


@dataclass(frozen=True)
class Scenario:
    """Faults of one kind, armed again and again during a load."""

    stage: Stage
    failure: Failure
    also: Stage | None = None  # a rollback or recovery failing after some of the faults
    known_not_applied: bool = False  # the test knows an UNAVAILABLE here left nothing: record it as fail

    @property
    def name(self) -> str:
        also = f"+{self.also.value}" if self.also is not None else ""
        return f"{self.stage.value}{also}-{self.failure.name.lower()}"


SCENARIOS = [
    Scenario(Stage.WRITE, Failure.IO_ERROR),
    Scenario(Stage.READ, Failure.IO_ERROR),
    Scenario(Stage.COMMIT, Failure.DISK_FULL),
    # before the fsync: the broker says "unknown", but nothing reached the disk, so hold it to "not applied"
    Scenario(Stage.COMMIT, Failure.IO_ERROR, known_not_applied=True),
    Scenario(Stage.AFTER_COMMIT, Failure.IO_ERROR),
    Scenario(Stage.COMMIT, Failure.DISK_FULL, also=Stage.ROLLBACK),
    Scenario(Stage.COMMIT, Failure.IO_ERROR, also=Stage.RECOVER, known_not_applied=True),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda scenario: scenario.name)
def test_faults_at_each_commit_stage_lose_nothing_and_apply_nothing_by_half(run: Run, scenario: Scenario) -> None:
    rng = random.Random(f"{seed()}-{scenario.name}")
    print(f"\n{scenario.name}: seed={seed()} (replay with KITTIWAKE_FAULT_SEED)")
    unavailable = (lambda error: FAIL) if scenario.known_not_applied else None
    load = QueueLoad(run.url, seed=rng.randrange(2**32), **({"unavailable": unavailable} if unavailable else {}))
    load.start()
    try:
        persistent_round = rng.randrange(2, ROUNDS)
        for round_ in range(ROUNDS):
            if load.stop.is_set():
                break
            if round_ == persistent_round:
                # a fault that lasts: writes pause while reads go on; then let the broker write again
                run.store.arm(scenario.stage, scenario.failure, times=None)
                time.sleep(PERSISTENT_SECS)
                run.store.clear()
                wait_until_serving(run.url)
                continue
            chained = CHAINED_TIMES.get(scenario.also, {}).get(round_) if scenario.also is not None else None
            then = (scenario.also, chained) if scenario.also is not None and chained else None
            run.store.arm(scenario.stage, scenario.failure, times=1, then=then)
            time.sleep(rng.uniform(*FAULT_EVERY_SECS))
            if then is not None:
                wait_until_serving(run.url)
        run.store.clear()
        resumed_secs = wait_until_serving(run.url)
    finally:
        load.finish()
    injected = dict(run.store.injected)
    run.restart()
    drained = drain(run.url)
    verdict = load.verify(drained)
    report = f"{verdict.format()}\n  faults injected: {injected}; serving again {resumed_secs:.2f} s after they cleared"
    print(report)
    assert injected.get(scenario.stage, 0) > 0, f"no fault was injected\n{report}"
    assert any("UNAVAILABLE" in key for key in verdict.errors), f"no client saw UNAVAILABLE\n{report}"
    assert not hung_or_cut(verdict.errors), f"a request timed out or lost its connection\n{report}"
    assert verdict.ok, report
    assert verdict.result.acknowledged >= MIN_ACKNOWLEDGED, f"too few acknowledged enqueues to mean anything\n{report}"


# ---------------------------------------------------------------- single behaviours


def try_enqueue(client: Client, pid: str) -> errors.KittiwakeError | None:
    try:
        client.enqueue("single", pid.encode(), pid=pid)
    except errors.KittiwakeError as exc:
        return exc
    return None


def pids(client: Client) -> list[str]:
    return [task.pid for task in client.peek("single", 100)]


def test_a_failed_rollback_never_lets_the_failed_pass_through(run: Run) -> None:
    """The rollback after a failed commit fails too: the broker must not build its engine from
    the transaction left open, or the next commit makes durable what was refused."""
    with Client(run.url, timeout=10.0) as client:
        client.enqueue("single", b"kept", pid="kept")
        run.store.arm(Stage.COMMIT, Failure.DISK_FULL, times=1)
        run.store.arm(Stage.ROLLBACK, Failure.IO_ERROR, times=2)
        refused = try_enqueue(client, "refused")
        assert isinstance(refused, errors.Unavailable) and NOT_APPLIED in refused.message, refused
        wait_until_serving(run.url)
        client.enqueue("single", b"after", pid="after")
        assert pids(client) == ["after", "kept"]
    run.restart()
    with Client(run.url, timeout=10.0) as client:
        assert pids(client) == ["after", "kept"]


def test_an_outage_rebuilds_about_once_a_second_and_logs_a_few_lines(
    run: Run, caplog: pytest.LogCaptureFixture
) -> None:
    """A full disk fails every write for 2 s while a client keeps writing: each failed pass needs
    a rebuild of the engine from the store, which costs a read of the store's summary; they
    must not come one per failed pass, nor must the log get a line per pass."""
    caplog.set_level(logging.INFO, logger="kittiwake.broker")
    outage_secs = 2.0
    with Client(run.url, timeout=10.0) as client:
        client.enqueue("single", b"kept", pid="kept")
        recoveries_before = run.store.calls[Stage.RECOVER]
        caplog.clear()
        run.store.arm(Stage.COMMIT, Failure.DISK_FULL, times=None)
        refused = 0
        reads = 0
        end = time.monotonic() + outage_secs
        number = 0
        while time.monotonic() < end:
            number += 1
            if try_enqueue(client, f"during-{number:05d}") is not None:
                refused += 1
            if number % 10 == 0:
                assert pids(client) == ["kept"]  # reads are served all along
                reads += 1
        rebuilds = run.store.calls[Stage.RECOVER] - recoveries_before
        errors_logged = [r for r in caplog.records if r.levelno >= logging.ERROR]
        run.store.clear()
        resumed_secs = wait_until_serving(run.url)
        print(f"\n{number} enqueues ({refused} refused) and {reads} reads in {outage_secs} s of a full disk: "
              f"{rebuilds} rebuilds, {len(errors_logged)} error lines; serving {resumed_secs:.2f} s after it cleared")
        assert refused == number
        assert rebuilds <= outage_secs / 1.0 + 3, f"{rebuilds} rebuilds of the engine in {outage_secs} s"
        assert len(errors_logged) <= 3, [r.getMessage() for r in errors_logged]
        assert pids(client)[-1] == "kept"
    assert any("storage recovered" in r.getMessage() for r in caplog.records)


def test_reads_are_served_while_writes_pause(run: Run) -> None:
    with Client(run.url, timeout=10.0) as client:
        client.enqueue("single", b"kept", pid="kept")
        run.store.arm(Stage.COMMIT, Failure.DISK_FULL, times=None)
        for number in range(3):  # the second failure pauses writes
            assert try_enqueue(client, f"refused-{number}") is not None
        paused = try_enqueue(client, "paused")
        assert isinstance(paused, errors.Unavailable) and "not writing for a moment" in paused.message, paused
        assert "the disk is full" in paused.message
        assert client.ping()
        assert pids(client) == ["kept"]
        assert [info.queue for info in client.list_queues()] == ["single"]
        assert client.get("single", "kept").data == b"kept"
        run.store.clear()
        wait_until_serving(run.url)
        assert pids(client) == ["kept"]


@pytest.mark.parametrize(
    ("stage", "failure", "says"),
    [
        (Stage.COMMIT, Failure.DISK_FULL, f"(the disk is full); {NOT_APPLIED}"),
        (Stage.COMMIT, Failure.READ_ONLY, f"(the data directory is read-only); {NOT_APPLIED}"),
        (Stage.READ, Failure.IO_ERROR, f"(the disk reported an I/O error); {NOT_APPLIED}"),
        (Stage.COMMIT, Failure.IO_ERROR, f"(the disk reported an I/O error); {OUTCOME_UNKNOWN}"),
        (Stage.AFTER_COMMIT, Failure.IO_ERROR, f"(the disk reported an I/O error); {OUTCOME_UNKNOWN}"),
    ],
    ids=lambda value: value.name.lower() if hasattr(value, "name") else "",
)
def test_the_reply_says_what_failed_and_whether_the_change_may_have_been_applied(
    run: Run, stage: Stage, failure: Failure, says: str
) -> None:
    with Client(run.url, timeout=10.0) as client:
        client.enqueue("single", b"kept", pid="kept")
        run.store.arm(stage, failure, times=1)
        if stage is Stage.READ:
            try:
                client.peek("single")  # a peek reads the store
            except errors.KittiwakeError as exc:
                error: errors.KittiwakeError | None = exc
            else:
                error = None
        else:
            error = try_enqueue(client, "new")
        assert isinstance(error, errors.Unavailable), error
        assert says in error.message, error.message
        run.store.clear()
        wait_until_serving(run.url)
        expected = ["kept", "new"] if stage is Stage.AFTER_COMMIT else ["kept"]
        assert pids(client) == expected
    run.restart()
    with Client(run.url, timeout=10.0) as client:
        assert pids(client) == expected
