"""An App and its workers under a broker user whose rights cover only its own prefix.

alice may do anything to `alice.*` and nothing else: with
`App(reply_prefix="alice.replies.", job_registry="alice.jobs")` and `kittiwake worker --queues
alice.shop,alice.shop.gang --registry-queue alice.workers`, results, delayed tasks, DAGs and
their records, dead letters, gangs, periodic ticks, the worker registry and cancelling all stay
inside that prefix. bob, with `bob.*`, can neither touch nor see any of it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from kittiwake import Client, errors
from kittiwake.app import TaskFailed
from support.auth_users import ALICE, BOB, ROOT, standard_auth_file
from support.broker_process import BrokerProcess
from worker import restricted_apps
from worker.harness import connected_app, read_lines, wait_for, workers


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", auth_file=standard_auth_file(tmp_path / "users.json"))
    try:
        yield process
    finally:
        process.kill()


def test_an_app_and_its_workers_need_rights_on_their_own_prefix_only(secured: BrokerProcess, tmp_path: Path) -> None:
    alice_url = secured.client_url(*ALICE)
    ticks = tmp_path / "ticks"
    app_iterator = connected_app(alice_url, restricted_apps.app)
    app = next(app_iterator)
    try:
        # --queues: the built-in shell task's queue, `default`, is not alice's
        with workers(alice_url, tmp_path, "--queues", "alice.shop,alice.shop.gang", "--registry-queue", "alice.workers",
                     "--beat", "--prefetch", "0", "--node", "n1", "--autoscale", "2:3",
                     "--concurrency", "2", app="worker.restricted_apps:app", processes=2,
                     env={"KITTIWAKE_TEST_TICKS": str(ticks)}) as worker:
            assert restricted_apps.add.submit(2, 3).result(timeout=30) == 5
            assert restricted_apps.add.submit(3, 4, node="n1").result(timeout=30) == 7  # alice.shop@n1
            later = restricted_apps.add.submit(1, 1, delay=0.5)  # through alice.shop.delayed
            assert later.result(timeout=30) == 2
            job = app.job()
            first = job.add(restricted_apps.add, 1, 2)
            job.add(restricted_apps.add, 10, 20, after=[first])  # after= names alice.shop
            assert job.submit().results(timeout=30) == [3, 30]
            with Client(alice_url) as alice:
                assert alice.get("alice.jobs", job.id).pid == job.id  # the job's record
            with pytest.raises(TaskFailed) as failed:
                restricted_apps.explode.submit("boom").result(timeout=30)  # read back from alice.shop.dead
            assert failed.value.type == "ValueError"
            assert sorted([restricted_apps.pair.submit().result(timeout=30)]) == [20]  # a gang of two
            waiting = restricted_apps.add.submit(0, 0, delay=300)
            assert waiting.cancel() and waiting.status().state == "failed"
            wait_for(lambda: len(read_lines(ticks)) >= 2, timeout=30, message="two periodic ticks")
            listed = subprocess.run(
                [sys.executable, "-m", "kittiwake", "--json", "workers", "--registry-queue", "alice.workers"],
                capture_output=True, text=True, timeout=60, env={**_environment(), "KITTIWAKE_URL": alice_url},
            )
            assert listed.returncode == 0, listed.stderr
            assert len(json.loads(listed.stdout)) == 2
            for pid in worker.worker_pids():  # the token reached the worker processes, not their command lines
                assert ALICE[1] not in Path(f"/proc/{pid}/cmdline").read_text()
            with Client(secured.client_url(*BOB)) as bob:
                with pytest.raises(errors.Forbidden):
                    bob.lease("alice.shop")
                with pytest.raises(errors.Forbidden):
                    bob.enqueue("bob.jobs", b"x", after=[("alice.shop", "anything")])
                assert bob.list_queues() == [] and bob.stats() == []
            assert worker.terminate() == 0
            assert "FORBIDDEN" not in worker.log(), worker.log()[-3000:]
    finally:
        for _ in app_iterator:  # closes the app: its reply queues are deleted (admin on alice.*)
            pass
    with Client(secured.client_url(*ROOT)) as root:
        names = [info.queue for info in root.list_queues()]
        assert names and all(name.startswith("alice.") for name in names), names
        assert not any(name.startswith("alice.replies.") for name in names), names


def _environment() -> dict[str, str]:
    import os

    return {name: value for name, value in os.environ.items() if name != "KITTIWAKE_URL"}
