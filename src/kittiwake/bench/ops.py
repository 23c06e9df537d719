"""`kittiwake bench ops`: TaskMaster §6 Table 1 and Bulk Operations, on this machine.

TaskMaster measured one node under 500 client threads with 1 KB tasks:
enqueue 1,630/s, FIFO enqueue 2,386/s, lease + dequeue 1,485/s (Table 1), and
the same operations in batches (Figure 5). This benchmark runs the five
figures one after the other on one broker, each as a closed loop of
`--clients` connections (one request in flight each) from the load processes,
warmed up for `--warmup` seconds and then measured for `--seconds`:

* `enqueue`: one task per request with an explicit random 64-bit pid (the
  broker must check the pid is new: TaskMaster's read + write).
* `fifo_enqueue`: one task per request, pid assigned by the broker.
* `lease_dequeue`: lease one task, then dequeue it — two requests; one
  operation is the pair, its latency runs from sending the lease to the
  dequeue's reply.
* `batch_enqueue`: `--batch` FIFO tasks per request.
* `batch_lease_dequeue`: lease up to `--batch` tasks, dequeue them in one
  request.

Queues. TaskMaster's threads of one process shared a queue while processes
worked on disjoint queues; here connection i works on queue i % `--queues`
(10 by default, so 5 connections share each queue at 50 clients). The lease
phases consume what the enqueue phases left in the same queues; before each
lease phase the queues are topped up (batched, unmeasured) to 1.3 × what the
preceding enqueue rate could consume, so no queue runs dry while measured
(`empty_leases` in the record says if one did anyway). `--only` runs some of
the figures (a lease figure alone is topped up for its own target rate),
for profiling one operation.

Store. The broker runs on a throwaway SQLite directory unless `--store URL`
names another store (`bench_store`: it must hold no task; a schema or
directory the benchmark created is removed at the end). The report's
settings name the store without its password.
"""

from __future__ import annotations

import math
from contextlib import ExitStack
from dataclasses import asdict
from typing import Any, Callable

from rich.console import Console

from kittiwake.bench import references
from kittiwake.bench.bench_store import bench_store
from kittiwake.bench.harness import Measured, Session, queue_sizes
from kittiwake.bench.jobs import Scenario
from kittiwake.bench.report import figure, check_target, machine_info, progress_bars
from kittiwake.bench.settings import OPS_BULK_PREFIX, OPS_FIGURES, OPS_SINGLE_PREFIX, OpsSettings

TOP_UP_MARGIN = 1.3


def _top_up(session: Session, queues: tuple[str, ...], rate: float, seconds: float,
            progress: Callable[[float, int], None]) -> None:
    """Fill each queue to what `rate` tasks/s spread over them could take in `seconds`."""
    per_queue = math.ceil(rate * seconds * TOP_UP_MARGIN / len(queues)) + 100
    with session.link() as link:
        prefix = queues[0].rsplit(".", 1)[0]
        sizes = queue_sizes(link, "^" + prefix.replace(".", r"\.") + r"\.")
    missing = {queue: per_queue - sizes.get(queue, 0) for queue in queues}
    session.fill({queue: count for queue, count in missing.items() if count > 0}, progress=progress)
    progress(1.0, sum(count for count in missing.values() if count > 0))


def _record(name: str, measured: Measured, *, batch: int, requests: int, queues: int, clients: int) -> dict[str, Any]:
    reference = references.OPS[name]
    record = figure(
        measured,
        ratio=references.rate_ratio(measured.tasks_per_sec, reference.tasks_per_sec),
        reference={"source": reference.source, "tasks_per_s": reference.tasks_per_sec} if reference.source else None,
        target={"tasks_per_s_min": reference.target_tasks_per_sec},
        batch=batch,
        requests_per_op=requests,
        clients=clients,
        queues=queues,
    )
    record["meets_target"] = check_target(record)
    return record


def run_ops(settings: OpsSettings, console: Console, *, parent_dir: str | None = None) -> tuple[dict[str, Any], dict[str, Measured]]:
    """Run the figures (all five unless `settings.only` names some); returns the JSON
    report and the raw measurements (for plots)."""
    clients = settings.clients
    queue_count = max(1, min(settings.queues, clients))
    single = tuple(f"{OPS_SINGLE_PREFIX}{k}" for k in range(queue_count))
    bulk = tuple(f"{OPS_BULK_PREFIX}{k}" for k in range(queue_count))
    data = settings.data_bytes
    batch = settings.batch
    wanted = set(settings.only or OPS_FIGURES)
    run_secs = settings.warmup_secs + settings.seconds
    measured: dict[str, Measured] = {}
    store = "sqlite (throwaway directory)"
    with ExitStack() as stack:
        if settings.store_url is not None:
            store = stack.enter_context(bench_store(settings.store_url)).describe()
        session = stack.enter_context(Session(durability=settings.durability, processes=settings.processes,
                                              parent_dir=parent_dir, store_url=settings.store_url))
        bar = stack.enter_context(progress_bars(console))

        def timed(name: str, label: str, scenario: Scenario) -> None:
            if name in wanted:
                measured[name] = session.timed(scenario, clients, settings.warmup_secs, settings.seconds, bar(label))

        def rate(*names: str) -> float:
            """The best enqueue rate measured, or the lease figure's own target when none ran."""
            return max((measured[name].tasks_per_sec for name in names if name in measured), default=0.0)

        timed("enqueue", "enqueue, explicit pid", Scenario("enqueue", single, data_bytes=data))
        timed("fifo_enqueue", "FIFO enqueue", Scenario("fifo_enqueue", single, data_bytes=data))
        if "lease_dequeue" in wanted:
            estimate = rate("enqueue", "fifo_enqueue") or references.OPS["lease_dequeue"].target_tasks_per_sec
            _top_up(session, single, estimate, run_secs, bar("top up (unmeasured)"))
        timed("lease_dequeue", "lease + dequeue", Scenario("lease_dequeue", single, data_bytes=data))
        timed("batch_enqueue", f"batch enqueue ×{batch}", Scenario("fifo_enqueue", bulk, batch=batch, data_bytes=data))
        if "batch_lease_dequeue" in wanted:
            estimate = rate("batch_enqueue") or references.OPS["batch_lease_dequeue"].target_tasks_per_sec
            _top_up(session, bulk, estimate, run_secs, bar("top up (unmeasured)"))
        timed("batch_lease_dequeue", f"batch lease + dequeue ×{batch}",
              Scenario("lease_dequeue", bulk, batch=batch, data_bytes=data))
        broker_startup_s = session.startup_secs

    shape = {
        "enqueue": (1, 1), "fifo_enqueue": (1, 1), "lease_dequeue": (1, 2),
        "batch_enqueue": (batch, 1), "batch_lease_dequeue": (batch, 2),
    }
    ops = {
        name: _record(name, measured[name], batch=size, requests=requests, queues=queue_count, clients=clients)
        for name, (size, requests) in shape.items() if name in measured
    }
    report = {
        "machine": machine_info(),
        "settings": {**{k: v for k, v in asdict(settings).items() if k != "store_url"}, "store": store, "queues": queue_count,
                     "broker_startup_s": round(broker_startup_s, 3)},
        "ops": ops,
    }
    return report, measured
