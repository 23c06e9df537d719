"""`kittiwake bench ops`: TaskMaster §6 Table 1 and Bulk Operations, on this machine.

TaskMaster measured one node under 500 client threads with 1 KB tasks:
enqueue 1,630/s, FIFO enqueue 2,386/s, lease + dequeue 1,485/s (Table 1), and
the same operations in batches (Figure 5). This benchmark runs the five
figures one after the other on one broker, each as a closed loop of
`--clients` connections (one request in flight each) from the load processes,
warmed up for `--warmup` seconds and then measured for `--seconds`:

* `enqueue`: one task per request with an explicit random 64-bit pid (the
  broker must check the pid is new: TaskMaster's read + write). On the SQLite
  store the same load then runs against `sqlite_ceiling`, a bare asyncio +
  SQLite group-commit server on the same disk (`enqueue_ceiling`), and the
  broker's record says its `ceiling_ratio` (target ≥ 0.9).
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
import sys
from contextlib import ExitStack
from dataclasses import asdict
from typing import Any, Callable

from rich.console import Console

from kittiwake.bench import references
from kittiwake.bench.bench_store import bench_store, store_url
from kittiwake.bench.harness import Measured, Session, queue_sizes
from kittiwake.bench.jobs import Scenario
from kittiwake.bench.report import figure, check_target, machine_info, progress_bars
from kittiwake.bench.settings import OPS_BULK_PREFIX, OPS_FIGURES, OPS_SINGLE_PREFIX, OpsSettings
from kittiwake.store.location import parse_store_url

TOP_UP_MARGIN = 1.3
CEILING_COMMAND = (sys.executable, "-m", "kittiwake.bench.sqlite_ceiling")
CEILING_SOURCE = "bare asyncio + SQLite group commit (kittiwake.bench.sqlite_ceiling), same run"
CEILING_RATIO_MIN = 0.9  # explicit-pid enqueue within 10% of what the disk and SQLite allow


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
    report and the raw measurements (for plots). With `settings.brokers` > 1 the figures run
    once per row of `broker_rows` and the report's `brokers` holds each row (`ops` is the first)."""
    if settings.brokers == 1:
        ops, measured, store, startup = _run_figures(settings, console, settings.store_url, 1, parent_dir)
        report: dict[str, Any] = {
            "machine": machine_info(),
            "settings": {**_settings(settings), "store": store, "broker_startup_s": round(startup, 3)},
            "ops": ops,
        }
        return report, measured
    assert settings.store_url is not None
    rows: list[dict[str, Any]] = []
    measured = {}
    for brokers, mode, url in broker_rows(settings.store_url, settings.brokers):
        ops, row_measured, store, startup = _run_figures(settings, console, url, brokers, parent_dir)
        rows.append({"brokers": brokers, "mode": mode, "store": store, "broker_startup_s": round(startup, 3),
                     "ops": ops})
        measured.update({f"{name} ({brokers} × {mode})": value for name, value in row_measured.items()})
    report = {
        "machine": machine_info(),
        "settings": {**_settings(settings), "store": rows[0]["store"]},
        "ops": rows[0]["ops"],
        "brokers": rows,
        "scaling": scaling(rows),
    }
    return report, measured


def _settings(settings: OpsSettings) -> dict[str, Any]:
    queue_count = max(1, min(settings.queues, settings.clients))
    return {**{k: v for k, v in asdict(settings).items() if k != "store_url"}, "queues": queue_count}


def broker_rows(url: str, brokers: int) -> list[tuple[int, str, str]]:
    """(brokers, mode, store URL) of each row of a run with several brokers: one broker alone on
    the schema (brokers=one, the reference), then 1 … `brokers` brokers sharing it (brokers=many).
    Each row runs on a schema of its own, named after the URL's (`<schema>_<mode><count>`), so
    that each starts empty; the rows' schemas are created and dropped as `bench_store` does."""
    location = parse_store_url(url)
    if location.kind != "postgresql":
        raise ValueError("several brokers share a PostgreSQL store: --store postgresql://…")
    rows = [(1, "one")] + [(count, "many") for count in range(1, brokers + 1)]
    return [(count, mode, store_url(location, f"{location.schema[:50]}_{mode}{count}", mode)) for count, mode in rows]


def scaling(rows: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Per figure: each shared row's tasks/s over one shared broker's (`N×`), and one shared
    broker's over one broker alone (`many/one`, the price of sharing)."""
    one = next(row for row in rows if row["mode"] == "one")
    shared = [row for row in rows if row["mode"] == "many"]
    base = shared[0]

    def ratio(row: dict[str, Any], of: dict[str, Any], name: str) -> float | None:
        top, bottom = row["ops"].get(name, {}).get("tasks_per_s"), of["ops"].get(name, {}).get("tasks_per_s")
        return round(top / bottom, 2) if top and bottom else None

    return {
        name: {"many/one": ratio(base, one, name),
               **{f"{row['brokers']}x": ratio(row, base, name) for row in shared[1:]}}
        for name in one["ops"]
    }


def _run_figures(settings: OpsSettings, console: Console, url: str | None, brokers: int,
                 parent_dir: str | None) -> tuple[dict[str, Any], dict[str, Measured], str, float]:
    """The figures on a fresh broker (or `brokers` brokers sharing the store at `url`): their
    records, the raw measurements, the store's description and the brokers' start-up seconds."""
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
    suffix = "" if brokers == 1 and settings.brokers == 1 else f" [{brokers} × {parse_store_url(url or '').brokers}]"
    with ExitStack() as stack:
        if url is not None:
            store = stack.enter_context(bench_store(url)).describe()
        session = stack.enter_context(Session(durability=settings.durability, processes=settings.processes,
                                              parent_dir=parent_dir, store_url=url, brokers=brokers))
        bar = stack.enter_context(progress_bars(console))

        def timed(name: str, label: str, scenario: Scenario) -> None:
            if name in wanted:
                measured[name] = session.timed(scenario, clients, settings.warmup_secs, settings.seconds,
                                               bar(label + suffix))

        def rate(*names: str) -> float:
            """The best enqueue rate measured, or the lease figure's own target when none ran."""
            return max((measured[name].tasks_per_sec for name in names if name in measured), default=0.0)

        timed("enqueue", "enqueue, explicit pid", Scenario("enqueue", single, data_bytes=data))
        timed("fifo_enqueue", "FIFO enqueue", Scenario("fifo_enqueue", single, data_bytes=data))
        if "lease_dequeue" in wanted:
            estimate = rate("enqueue", "fifo_enqueue") or references.OPS["lease_dequeue"].target_tasks_per_sec
            _top_up(session, single, estimate, run_secs, bar("top up (unmeasured)" + suffix))
        timed("lease_dequeue", "lease + dequeue", Scenario("lease_dequeue", single, data_bytes=data))
        timed("batch_enqueue", f"batch enqueue ×{batch}", Scenario("fifo_enqueue", bulk, batch=batch, data_bytes=data))
        if "batch_lease_dequeue" in wanted:
            estimate = rate("batch_enqueue") or references.OPS["batch_lease_dequeue"].target_tasks_per_sec
            _top_up(session, bulk, estimate, run_secs, bar("top up (unmeasured)" + suffix))
        timed("batch_lease_dequeue", f"batch lease + dequeue ×{batch}",
              Scenario("lease_dequeue", bulk, batch=batch, data_bytes=data))
        broker_startup_s = session.startup_secs
    if "enqueue" in measured and url is None:
        with ExitStack() as stack:  # the bare reference, same run, same load, same disk
            ceiling = stack.enter_context(Session(durability=settings.durability, processes=settings.processes,
                                                  parent_dir=parent_dir, command=CEILING_COMMAND))
            bar = stack.enter_context(progress_bars(console))
            measured["enqueue_ceiling"] = ceiling.timed(
                Scenario("enqueue", single, data_bytes=data), clients, settings.warmup_secs, settings.seconds,
                bar("enqueue, explicit pid: bare asyncio + SQLite ceiling"))

    shape = {
        "enqueue": (1, 1), "fifo_enqueue": (1, 1), "lease_dequeue": (1, 2),
        "batch_enqueue": (batch, 1), "batch_lease_dequeue": (batch, 2),
    }
    ops = {
        name: _record(name, measured[name], batch=size, requests=requests, queues=queue_count, clients=clients)
        for name, (size, requests) in shape.items() if name in measured
    }
    if "enqueue_ceiling" in measured:
        ops["enqueue_ceiling"] = ceiling_record(ops["enqueue"], measured["enqueue_ceiling"], queue_count, clients)
    return ops, measured, store, broker_startup_s


def ceiling_record(enqueue: dict[str, Any], measured: Measured, queues: int, clients: int) -> dict[str, Any]:
    """The bare ceiling's own figure; the broker's `enqueue` record gains `ceiling_ratio` (its tasks/s
    over the ceiling's) and the target on it."""
    ceiling = figure(measured, batch=1, requests_per_op=1, clients=clients, queues=queues,
                     server=CEILING_SOURCE)
    rate, bare = enqueue.get("tasks_per_s"), ceiling.get("tasks_per_s")
    enqueue["ceiling_ratio"] = round(rate / bare, 3) if rate and bare else None
    enqueue["ceiling"] = {"source": CEILING_SOURCE, "tasks_per_s": bare}
    enqueue["target"] = {**(enqueue.get("target") or {}), "ceiling_ratio_min": CEILING_RATIO_MIN}
    enqueue["meets_target"] = check_target(enqueue)
    return ceiling


def show_brokers(console: Console, report: dict[str, Any]) -> None:
    """One table of a run with several brokers: tasks/s per figure and row, and the ratios."""
    from rich.table import Table

    rows = report["brokers"]
    table = Table(title=f"kittiwake bench ops — brokers sharing one PostgreSQL schema, "
                        f"{report['settings']['queues']} queue(s), tasks/s")
    table.add_column("figure")
    for row in rows:
        table.add_column(f"{row['brokers']} × {row['mode']}", justify="right")
    ratios = sorted({key for ratio in report["scaling"].values() for key in ratio}, key=lambda k: (k != "many/one", k))
    for key in ratios:
        table.add_column(key, justify="right")
    for name, ratio in report["scaling"].items():
        rates = [row["ops"].get(name, {}).get("tasks_per_s") for row in rows]
        table.add_row(name, *(f"{rate:,.0f}" if rate else "—" for rate in rates),
                      *(f"{ratio[key]:.2f}" if ratio.get(key) else "—" for key in ratios))
    console.print(table)
