"""The worker registry: live workers, what they run, and their records gone when they stop or die."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

from kittiwake.worker.registry import all_workers, live_workers
from support.broker_process import BrokerProcess
from worker import apps
from worker.harness import wait_for, workers


def test_live_workers_show_host_pid_and_running_tasks(broker: BrokerProcess, app, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    with workers(broker.url, tmp_path, "--processes", "2", "--queues", "short", processes=2) as worker:
        records = wait_for(lambda: (lambda r: r if len(r) == 2 else None)(live_workers(app.client)),
                           message="two live workers")
        assert sorted(record.info["pid"] for record in records) == sorted(worker.worker_pids())
        assert {record.info["host"] for record in records} == {socket.gethostname()}
        handle = apps.slow.submit(str(runs), "busy", 3.0)
        busy = wait_for(lambda: [r for r in live_workers(app.client) if r.running], message="a busy worker")
        assert busy[0].running == [f"short/{handle.pid}"]
        assert wait_for(lambda: any((r.utilisation or 0) > 0.5 for r in live_workers(app.client)),
                        message="utilisation")
        listing = subprocess.run(
            [sys.executable, "-m", "kittiwake", "--url", broker.url, "--json", "workers"],
            capture_output=True, text=True, timeout=30,
        )
        assert listing.returncode == 0, listing.stderr
        shown = json.loads(listing.stdout)
        assert sorted(row["pid"] for row in shown) == sorted(worker.worker_pids())
        assert [row["running"] for row in shown if row["running"]] == [[f"short/{handle.pid}"]]
        handle.result(timeout=30)
        assert worker.terminate() == 0
    assert all_workers(app.client) == []  # stopping workers remove their records


def test_a_killed_workers_record_stops_being_live(broker: BrokerProcess, app, tmp_path: Path) -> None:
    worker = workers(broker.url, tmp_path)
    wait_for(lambda: live_workers(app.client), message="a live worker")
    worker.kill()
    wait_for(lambda: not live_workers(app.client), timeout=10, message="the record to expire")
    assert len(all_workers(app.client)) == 1
    with workers(broker.url, tmp_path):  # a starting worker prunes dead records
        wait_for(lambda: len(all_workers(app.client)) == 1 and live_workers(app.client), message="pruning")


def test_a_record_being_registered_is_not_pruned(broker: BrokerProcess, app) -> None:
    """A starting worker's prune must not remove a record another worker has enqueued and not yet
    leased (the two steps of registering): that worker would be missing until its next beat."""
    from kittiwake.constants import WORKERS_QUEUE
    from kittiwake.worker.registry import prune_dead

    app.client.enqueue(WORKERS_QUEUE, json.dumps({"host": "h"}), pid="w-starting", receiver="w-starting",
                       max_attempts=1_000_000)
    assert prune_dead(app.client) == 0
    assert [record.id for record in all_workers(app.client)] == ["w-starting"]
