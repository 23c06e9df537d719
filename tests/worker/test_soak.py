"""Soak: a worker running 1,000,000 null tasks keeps a flat memory profile (run with --soak).

Tasks are submitted in bundles while two worker processes run them; the
resident memory of each worker process is sampled as it goes. After a
warm-up (the first tenth of the tasks), memory may not grow by more than
`GROWTH_LIMIT_MB`: nothing per task may be kept (held-task records, outcomes,
lease heaps, connection buffers).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from support.broker_process import BrokerProcess
from worker import apps
from worker.harness import workers

TASKS = 1_000_000
BUNDLE = 5000
GROWTH_LIMIT_MB = 20.0


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


@pytest.mark.soak
@pytest.mark.timeout(1800)
def test_a_million_null_tasks_with_flat_memory(broker: BrokerProcess, app, tmp_path: Path) -> None:
    with workers(broker.url, tmp_path, "--processes", "2", "--queues", "null", "--prefetch", "500",
                 processes=2) as worker:
        pids = worker.worker_pids()
        samples: list[tuple[int, list[float]]] = []
        submitted = 0
        while submitted < TASKS:
            apps.null.map(range(BUNDLE), chunk=BUNDLE)
            submitted += BUNDLE
            while (backlog := sum(s.size for s in app.client.stats("null"))) > 4 * BUNDLE:
                time.sleep(0.05)
            if submitted % (TASKS // 50) == 0:
                samples.append((submitted - backlog, [rss_mb(pid) for pid in pids]))
        while sum(s.size for s in app.client.stats("null")) > 0:
            time.sleep(0.1)
        samples.append((TASKS, [rss_mb(pid) for pid in pids]))
        assert worker.worker_pids() == pids  # no process crashed and was replaced
    warm = [rss for done, rss in samples if done >= TASKS // 10][0]
    final = samples[-1][1]
    growth = [end - start for start, end in zip(warm, final)]
    print("worker RSS MB (tasks done, per process):", [(done, [round(m, 1) for m in rss]) for done, rss in samples])
    assert max(growth) <= GROWTH_LIMIT_MB, growth
