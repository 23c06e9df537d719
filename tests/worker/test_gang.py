"""Gang tasks: N worker slots assemble and each runs the task with its rank; a gang that cannot
assemble is put back and tried again without holding its workers."""

from __future__ import annotations

from pathlib import Path

from support.broker_process import BrokerProcess
from worker import apps
from worker.harness import WorkerProcess, read_lines, wait_for, workers

GANG_QUEUES = ("--queues", "gang,gang.gang,tests", "--prefetch", "0")


def test_a_gang_of_three_assembles_on_three_slots(broker: BrokerProcess, app, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    with workers(broker.url, tmp_path, *GANG_QUEUES, processes=3) as worker:
        handle = apps.gang_of_three.submit(str(runs), key="gang #1 (any key)")
        sums = [apps.add.submit(n, n) for n in range(10)]  # ordinary tasks run beside the gang
        assert handle.result(timeout=30) == 0
        assert app.results(sums, timeout=30) == [2 * n for n in range(10)]
        lines = wait_for(lambda: (lambda rows: rows if len(rows) == 3 else None)(read_lines(runs)),
                         message="three ranks")
        rows = [line.split() for line in lines]
        assert sorted(int(row[0]) for row in rows) == [0, 1, 2]
        assert {row[1] for row in rows} == {"3"}
        peers = {row[2] for row in rows}
        assert len(peers) == 1 and len(set(peers.pop().split(","))) == 3
        assert sorted(int(row[3]) for row in rows) == sorted(worker.worker_pids())  # one rank per process
        assert worker.terminate() == 0


def test_a_gang_that_cannot_assemble_is_retried_without_holding_workers(
    broker: BrokerProcess, app, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    with workers(broker.url, tmp_path, *GANG_QUEUES, processes=3) as worker:
        handle = apps.gang_of_five.submit(str(runs))
        wait_for(lambda: worker.log().count("did not assemble") >= 2, timeout=20, message="two failed assemblies")
        assert read_lines(runs) == []
        assert apps.add.submit(2, 3).result(timeout=20) == 5  # the workers are not stuck
        with WorkerProcess(broker.url, tmp_path / "more.log", *GANG_QUEUES, processes=2):
            assert handle.result(timeout=30) == 0  # five slots now: it assembles
            wait_for(lambda: len(read_lines(runs)) == 5, message="five ranks")
        assert sorted(int(line.split()[0]) for line in read_lines(runs)) == [0, 1, 2, 3, 4]
