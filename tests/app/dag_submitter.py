"""The DAGs of the kill tests, and a submitter program to kill in the middle of `job.submit()`.

`build_dag` makes a job of `dag_step` tasks tagged ``<prefix><index>`` with
fan-out (early tasks get many children) and fan-in (up to four parents each,
and a last task waiting on fifty). As a program::

    python -m app.dag_submitter URL RUNS_PATH ORDER_PATH PREFIX SIZE CHUNK STEP_SECS SEED

it builds such a job, writes the order `submit` sends it in (one JSON line
per task: tag and task id) to ORDER_PATH, prints ``submitting``, submits in
requests of CHUNK tasks, prints ``submitted <seconds>`` and exits — without
waiting for results, like a submitter that dies right after. The test kills
it somewhere in between.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from worker import apps

FAN_IN = 50  # parents of the last task
STEP_SECS = 0.1


def build_dag(app: Any, runs: Path, size: int, rng: random.Random, prefix: str = "", step_secs: float = STEP_SECS):
    """(job, nodes, edges as (parent tag, child tag)) for a DAG of `size` tasks."""
    job = app.job()

    def add(index: int, parents: list[int]) -> Any:
        return job.add(apps.dag_step, str(runs), f"{prefix}{index}", step_secs, after=[nodes[p] for p in parents])

    nodes: list[Any] = []
    edges: list[tuple[str, str]] = []
    for index in range(size - 1):
        parents = sorted({int(rng.random() ** 2 * index) for _ in range(rng.randint(1, 4))}) if index else []
        nodes.append(add(index, parents))
        edges += [(f"{prefix}{p}", f"{prefix}{index}") for p in parents]
    last = list(range(max(0, size - 1 - FAN_IN), size - 1))
    nodes.append(add(size - 1, last))
    edges += [(f"{prefix}{p}", f"{prefix}{size - 1}") for p in last]
    return job, nodes, edges


def main(argv: list[str]) -> None:
    url, runs, order_path, prefix, size, chunk, step_secs, seed = argv
    apps.app.url = url
    job, _, _ = build_dag(apps.app, Path(runs), int(size), random.Random(int(seed)), prefix, float(step_secs))
    with open(order_path, "w") as order:
        for node in job.order():
            order.write(json.dumps({"tag": node.args[1], "id": node.task_id}) + "\n")
    apps.app.client.ping()  # connected: the time to kill is all submit's
    print("submitting", flush=True)
    begun = time.monotonic()
    job.submit(chunk=int(chunk))
    print(f"submitted {time.monotonic() - begun:.6f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
