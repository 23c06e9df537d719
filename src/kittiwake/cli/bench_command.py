"""`kittiwake bench`: the benchmarks of `kittiwake.bench` as CLI commands.

Twelve subcommands, each starting its own broker on a throwaway directory:
`ops` (TaskMaster §6 Table 1 and bulk operations), `latency` (idle round
trips against Fabriq and the disk's fsync), `scale` (a big queue, many
queues, memory, restart, and a cold restart over 10M tasks written straight
to disk), `tasks` (worker processes running null,
sleep and mixed tasks, against CloudKon, Albatross and PySpark), `peers`
(Kittiwake's App and workers beside Celery, RQ, Dramatiq, Huey and pgqueuer;
its `--plot` is a bar chart of every system's drain rate and latency), `celery` (one Celery app's
null tasks on the kombu transport `kittiwake://` and on Redis), `workers` (the App and
`kittiwake worker` with its default flags: app.map drains, efficiency of sleeping tasks on slots,
a mix of short and long tasks and its longest idle-while-waiting; its `--plot` draws the drains
and each slot's timeline), `producer` (one thread through a batching producer, against
`Client.enqueue` and Huey's single enqueue, and the producer's added latency), `flows` (a three-input
join, a Spark step's start, the main job's flow against one PySpark script), `mapreduce`
(grep, wordcount and sort on `kittiwake worker --node` commands against PySpark on the same
gen-data input, MB/s against partition size; its `--plot` draws a panel per app), `sqs` (boto3
send → receive → delete against the broker's SQS API and moto_server in the same run) and `dashboard`
(the HTTP port's queue table, overview and event stream over 100K queues, against /healthz). Each prints a
table, and with `--json FILE` writes the report documented in `kittiwake.bench.report`; a latency
CDF plot goes to `--plot FILE` (or next to the JSON file) when matplotlib is installed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import click

from kittiwake.bench.cluster import cluster_command
from kittiwake.bench.settings import (
    CELERY_POOLS,
    CelerySettings,
    DURABILITIES,
    DURABILITY,
    FLOWS_FIGURES,
    MAPREDUCE_APPS,
    MAPREDUCE_PARTITION_SIZES,
    OPS_FIGURES,
    PEER_SYSTEMS,
    PEERS_SUBMIT_THREADS,
    QUICK_FLOWS,
    QUICK_TASKS,
    FlowsSettings,
    LatencySettings,
    MapReduceSettings,
    OpsSettings,
    PeersSettings,
    ProducerBenchSettings,
    QUICK_PRODUCER,
    QuickFlowsName,
    QuickTasksName,
    ScaleSettings,
    TasksSettings,
    WORKERS_FIGURES,
    WorkersSettings,
    quick_settings,
)

# The defaults of every option (settings imports nothing of the benchmarks, so --help stays light).
OPS, LATENCY, SCALE, TASKS, PEERS = OpsSettings(), LatencySettings(), ScaleSettings(), TasksSettings(), PeersSettings()
FLOWS = FlowsSettings()
PRODUCER = ProducerBenchSettings()
CELERY = CelerySettings()
WORKERS = WorkersSettings()


def _durability_option(function: Any) -> Any:
    return click.option("--durability", type=click.Choice(DURABILITIES), default=DURABILITY, show_default=True,
                        help="fsync: ok means on disk (default); os: ok means handed to the OS.")(function)


def _output_options(function: Any) -> Any:
    function = click.option("--dir", "parent_dir", type=click.Path(file_okay=False), default=None,
                            help="Where to create the broker's throwaway directory (default: the system temp dir).")(function)
    function = click.option("--plot", type=click.Path(dir_okay=False), default=None,
                            help="Write a latency CDF (PNG) here; needs matplotlib. Default: next to --json.")(function)
    function = click.option("--json", "json_path", type=click.Path(dir_okay=False, allow_dash=True), default=None,
                            help="Write the report as JSON to FILE ('-' for stdout).")(function)
    return function


def _finish(console: Any, report: dict[str, Any], measured: dict[str, Any], title: str,
            json_path: str | None, plot: str | None) -> None:
    from kittiwake.bench.report import plot_path, write_cdf_plot, write_json

    if json_path:
        write_json(json_path, report)
    target = plot_path(plot, json_path)
    if write_cdf_plot(target, title, measured):
        console.print(f"[dim]latency CDF written to {target}")


def _console() -> Any:
    from rich.console import Console

    console = Console()
    if not console.is_terminal:  # a log file or a pipe: room for the whole table
        console = Console(width=max(console.width, 160))
    return console


def _quick_default(name: QuickTasksName) -> str:
    """The help's note of an option whose default --quick changes: `[default: 100,000; 5,000 with --quick]`."""
    return f"[default: {getattr(TASKS, name):,g}; {QUICK_TASKS[name]:,g} with --quick]"


@click.group("bench")
def bench() -> None:
    """Measure the broker: ops, latency, scale, tasks, peers, celery, workers, flows, mapreduce, sqs, dashboard, cluster (each on fresh brokers)."""


bench.add_command(cluster_command)


@bench.command("ops")
@click.option("--seconds", type=click.FloatRange(0.1), default=OPS.seconds, show_default=True,
              help="Measured seconds per figure.")
@click.option("--warmup", type=click.FloatRange(0.0), default=OPS.warmup_secs, show_default=True,
              help="Unmeasured seconds before each figure.")
@click.option("--clients", type=click.IntRange(1, 10_000), default=OPS.clients, show_default=True,
              help="Connections, each with one request in flight.")
@click.option("--batch", type=click.IntRange(1, 10_000), default=OPS.batch, show_default=True,
              help="Tasks per request in the batched figures.")
@click.option("--queues", type=click.IntRange(1, 10_000), default=OPS.queues, show_default=True,
              help="Queues the clients share (connection i uses queue i mod N).")
@click.option("--processes", type=click.IntRange(1, 64), default=OPS.processes, show_default=True,
              help="Load processes the clients are spread over.")
@click.option("--only", multiple=True, type=click.Choice(OPS_FIGURES),
              help="Run only this figure (repeatable), e.g. to profile one operation.")
@click.option("--store", "store_url", metavar="URL", default=None,
              help="Run the broker on this store: sqlite://DIR or postgresql://[USER@]HOST[:PORT]/DB[?schema=NAME]. "
              "It must hold no task; a directory or schema the benchmark creates is removed at the end. "
              "Default: a throwaway SQLite directory.")
@click.option("--brokers", type=click.IntRange(1, 16), default=OPS.brokers, show_default=True,
              help="Above 1 (a PostgreSQL --store): run the figures with one broker alone on the schema "
              "(brokers=one), then with 1 … N brokers sharing it (brokers=many), each on a fresh schema "
              "<schema>_one1, <schema>_many1, …; connection i talks to broker i mod N.")
@_durability_option
@_output_options
def ops_command(seconds: float, warmup: float, clients: int, batch: int, queues: int, processes: int,
                only: tuple[str, ...], store_url: str | None, brokers: int, durability: str, json_path: str | None,
                plot: str | None, parent_dir: str | None) -> None:
    """TaskMaster §6 Table 1 on this machine: single-task and batched enqueue, lease + dequeue."""
    from kittiwake import errors
    from kittiwake.bench.bench_store import BenchStoreError
    from kittiwake.bench.ops import run_ops, show_brokers
    from kittiwake.bench.report import print_machine, show_figures
    from kittiwake.store.location import parse_store_url

    if store_url is not None:
        try:
            parse_store_url(store_url)
        except ValueError as exc:
            raise click.BadParameter(f"--store {store_url!r}: {exc}", param_hint="--store") from None
    if brokers > 1 and (store_url is None or parse_store_url(store_url).kind != "postgresql"):
        raise click.BadParameter("several brokers share a PostgreSQL store: give --store postgresql://…",
                                 param_hint="--brokers")
    console = _console()
    settings = OpsSettings(seconds=seconds, warmup_secs=warmup, clients=clients, batch=batch, queues=queues,
                           processes=processes, durability=durability, only=only, store_url=store_url,
                           brokers=brokers)
    try:
        report, measured = run_ops(settings, console, parent_dir=parent_dir)
    except (errors.StorageFailure, BenchStoreError) as exc:  # the store cannot be opened, or holds tasks
        what = exc.message if isinstance(exc, errors.KittiwakeError) else exc
        raise click.ClickException(f"--store: {what}") from None
    for row in report.get("brokers") or [{"store": report["settings"]["store"], "ops": report["ops"]}]:
        shared = f" — {row['brokers']} broker(s), brokers={row['mode']}" if "brokers" in row else ""
        show_figures(console, f"kittiwake bench ops — {clients} clients, {durability}, {row['store']}{shared}, "
                     "×ref = vs TaskMaster Table 1", row["ops"])
    if "brokers" in report:
        show_brokers(console, report)
    print_machine(console, report["machine"])
    _finish(console, report, measured, "kittiwake bench ops", json_path, plot)


@bench.command("latency")
@click.option("--samples", type=click.IntRange(1, 10_000_000), default=LATENCY.samples, show_default=True,
              help="Sequential samples per figure.")
@click.option("--fsync-samples", type=click.IntRange(1, 10_000_000), default=None,
              help="fsync samples (default: --samples; stops after 20 s on a slow disk).")
@_durability_option
@_output_options
def latency_command(samples: int, fsync_samples: int | None, durability: str, json_path: str | None,
                    plot: str | None, parent_dir: str | None) -> None:
    """Idle broker: enqueue round trip and enqueue → parked lease, vs Fabriq and the disk's fsync."""
    from kittiwake.bench.latency import run_latency
    from kittiwake.bench.report import print_machine, show_figures

    console = _console()
    settings = LatencySettings(samples=samples, fsync_samples=fsync_samples or samples, durability=durability)
    report, measured = run_latency(settings, console, parent_dir=parent_dir)
    show_figures(console, f"kittiwake bench latency — {durability}, ×ref = vs Fabriq push p50", report["latency"])
    print_machine(console, report["machine"])
    _finish(console, report, measured, "kittiwake bench latency", json_path, plot)


@bench.command("scale")
@click.option("--big", type=click.IntRange(1), default=SCALE.big, show_default=True,
              help="Tasks in the one big queue.")
@click.option("--queues", type=click.IntRange(0), default=SCALE.queues, show_default=True,
              help="Queues to spread --spread tasks over.")
@click.option("--spread", type=click.IntRange(0), default=SCALE.spread, show_default=True,
              help="Tasks spread over --queues queues.")
@click.option("--samples", type=click.IntRange(1, 1_000_000), default=SCALE.samples, show_default=True,
              help="Sequential samples per latency figure.")
@click.option("--fill-batch", type=click.IntRange(1, 10_000), default=SCALE.fill_batch, show_default=True,
              help="Tasks per enqueue request while filling.")
@click.option("--recovery-tasks", type=click.IntRange(0), default=SCALE.recovery_tasks, show_default=True,
              help="Tasks written straight to disk for the cold-restart figure; 0 skips it.")
@_durability_option
@_output_options
def scale_command(big: int, queues: int, spread: int, samples: int, fill_batch: int, recovery_tasks: int,
                  durability: str, json_path: str | None, plot: str | None, parent_dir: str | None) -> None:
    """A big queue and many queues: enqueue rate, head-of-queue latency, listing, RSS, restart, cold restart."""
    from kittiwake.bench.report import print_machine
    from kittiwake.bench.scale import run_scale, show

    console = _console()
    settings = ScaleSettings(big=big, queues=queues, spread=spread, samples=samples, fill_batch=fill_batch,
                             recovery_tasks=recovery_tasks, durability=durability)
    report, measured = run_scale(settings, console, parent_dir=parent_dir)
    show(console, report)
    print_machine(console, report["machine"])
    _finish(console, report, measured, "kittiwake bench scale", json_path, plot)


@bench.command("tasks")
@click.option("--quick", is_flag=True, help="Small sizes everywhere, for a smoke test.")
@click.option("--tasks", type=click.IntRange(1), default=None,
              help=f"Null tasks in the throughput figure  {_quick_default('tasks')}")
@click.option("--workers", type=click.IntRange(1, 64), default=TASKS.workers, show_default=True,
              help="Worker processes (one task at a time each).")
@click.option("--bundle", type=click.IntRange(1, 10_000), default=TASKS.bundle, show_default=True,
              help="Tasks per enqueue request from the submitter.")
@click.option("--max-batch", type=click.IntRange(1, 10_000), default=TASKS.max_batch, show_default=True,
              help="Tasks per lease, at most (workers lease about 20 ms of work at a time).")
@click.option("--results", type=click.Choice(["batch", "task"]), default=TASKS.results, show_default=True,
              help="One result message per finished batch, or one per task.")
@click.option("--latency-tasks", type=click.IntRange(1), default=None,
              help=f"Tasks in the submit → start figure  {_quick_default('latency_tasks')}")
@click.option("--latency-rate", type=click.FloatRange(1.0), default=TASKS.latency_rate_per_sec, show_default=True,
              help="Tasks per second in the submit → start figure, one per request.")
@click.option("--busy-secs", type=click.FloatRange(0.01), default=None,
              help=f"Work per worker in each sleep 1/16/128 ms figure  {_quick_default('busy_secs')}")
@click.option("--mixed-busy-secs", type=click.FloatRange(0.01), default=None,
              help=f"Work per worker in the mixed 1 ms–1 s figure  {_quick_default('mixed_busy_secs')}")
@click.option("--spark-tasks", type=click.IntRange(0), default=None,
              help=f"Null tasks on PySpark local[2]; 0 skips Spark  {_quick_default('spark_tasks')}")
@_durability_option
@_output_options
def tasks_command(quick: bool, tasks: int | None, workers: int, bundle: int, max_batch: int, results: str,
                  latency_tasks: int | None, latency_rate: float, busy_secs: float | None,
                  mixed_busy_secs: float | None, spark_tasks: int | None, durability: str,
                  json_path: str | None, plot: str | None, parent_dir: str | None) -> None:
    """Workers pulling null, sleep and mixed tasks: throughput, submit → start latency, efficiency, vs PySpark."""
    from kittiwake.bench.report import print_machine
    from kittiwake.bench.tasks import run_tasks, show

    console = _console()
    settings = TasksSettings(workers=workers, bundle=bundle, max_batch=max_batch, results=results,
                             latency_rate_per_sec=latency_rate, durability=durability)
    if quick:
        settings = quick_settings(settings)
    settings = replace(  # the sizes given on the command line
        settings,
        tasks=settings.tasks if tasks is None else tasks,
        latency_tasks=settings.latency_tasks if latency_tasks is None else latency_tasks,
        busy_secs=settings.busy_secs if busy_secs is None else busy_secs,
        mixed_busy_secs=settings.mixed_busy_secs if mixed_busy_secs is None else mixed_busy_secs,
        spark_tasks=settings.spark_tasks if spark_tasks is None else spark_tasks,
    )
    report, measured = run_tasks(settings, console, parent_dir=parent_dir)
    show(console, report)
    print_machine(console, report["machine"])
    _finish(console, report, measured, "kittiwake bench tasks", json_path, plot)


def name_list(choices: tuple[str, ...], default: tuple[str, ...]) -> Callable[..., tuple[str, ...]]:
    """A click callback: NAME,NAME among `choices` (`default` when not given), unknown names refused."""

    def split(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...]:
        if value is None:
            return default
        names = tuple(name.strip() for name in value.split(",") if name.strip())
        unknown = [name for name in names if name not in choices]
        if unknown:
            raise click.BadParameter(f"unknown: {', '.join(unknown)}; choose from {','.join(choices)}")
        return names

    return split


@bench.command("producer")
@click.option("--quick", is_flag=True, help="Small sizes everywhere, for a smoke test.")
@click.option("--tasks", type=click.IntRange(1), default=None,
              help=f"Tasks through the producer [default: {PRODUCER.tasks:,}; {QUICK_PRODUCER['tasks']:,} with --quick]")
@click.option("--client-tasks", type=click.IntRange(1), default=None,
              help=f"Tasks through Client.enqueue [default: {PRODUCER.client_tasks:,}]")
@click.option("--huey-tasks", type=click.IntRange(1), default=None,
              help=f"Huey single enqueues [default: {PRODUCER.huey_tasks:,}]")
@click.option("--samples", type=click.IntRange(1), default=None,
              help=f"Latency samples of each kind [default: {PRODUCER.samples:,}]")
@click.option("--data-bytes", type=click.IntRange(0, 1 << 20), default=PRODUCER.data_bytes, show_default=True,
              help="Data per task (Huey's payload too).")
@click.option("--huey/--no-huey", default=True, show_default=True, help="Measure Huey on Redis too.")
@click.option("--redis-url", default=PRODUCER.redis_url, show_default=True,
              help="Huey's Redis database (claimed and emptied, as by bench peers).")
@click.option("--udp/--no-udp", default=True, show_default=True,
              help="Also enqueue over kwu:// through a lossy relay at 0%, 1.4% and 5% loss (as bench udp).")
@click.option("--udp-seconds", type=click.FloatRange(0.1), default=None,
              help="Load per UDP row [default: 5; 0.5 with --quick].")
@_durability_option
@_output_options
def producer_command(quick: bool, tasks: int | None, client_tasks: int | None, huey_tasks: int | None,
                     samples: int | None, data_bytes: int, huey: bool, redis_url: str, udp: bool,
                     udp_seconds: float | None, durability: str,
                     json_path: str | None, plot: str | None, parent_dir: str | None) -> None:
    """One thread through a batching producer: tasks/s vs Client.enqueue and Huey, its added latency,
    and enqueues over UDP under loss."""
    from kittiwake.bench.producer import run_producer, show
    from kittiwake.bench.report import print_machine, write_json

    base = replace(PRODUCER, **QUICK_PRODUCER) if quick else PRODUCER
    settings = replace(base, tasks=base.tasks if tasks is None else tasks,
                       client_tasks=base.client_tasks if client_tasks is None else client_tasks,
                       huey_tasks=base.huey_tasks if huey_tasks is None else huey_tasks,
                       samples=base.samples if samples is None else samples,
                       data_bytes=data_bytes, huey=huey, redis_url=redis_url, durability=durability)
    console = _console()
    report = run_producer(settings, console, parent_dir=parent_dir)
    show(console, report)
    if udp:
        from kittiwake.bench.udp_loss import UdpLossSettings, measure, table

        seconds = udp_seconds if udp_seconds is not None else (0.5 if quick else UdpLossSettings().seconds)
        report["udp"] = measure(UdpLossSettings(seconds=seconds, durability=durability), parent_dir=parent_dir)
        console.print(table(report["udp"]))
    print_machine(console, report["machine"])
    if json_path:
        write_json(json_path, report)


@bench.command("peers")
@click.option("--tasks", type=click.IntRange(1), default=PEERS.tasks, show_default=True,
              help="The drain's backlog: --submits of them one by one, the rest through each bulk API.")
@click.option("--submits", type=click.IntRange(0), default=PEERS.submits, show_default=True,
              help="Tasks submitted one by one from one thread (at most --tasks).")
@click.option("--threaded-submits", type=click.IntRange(0), default=PEERS.threaded_submits, show_default=True,
              help=f"Tasks submitted one by one from {PEERS_SUBMIT_THREADS} threads at once, after the latency "
                   "samples, no worker running (0 skips).")
@click.option("--latency-samples", type=click.IntRange(1), default=PEERS.latency_samples, show_default=True,
              help="submit → start samples, one task at a time on an idle system.")
@click.option("--latency-gap", "latency_gap_secs", type=click.FloatRange(0.0), default=PEERS.latency_gap_secs,
              show_default=True, help="Seconds between two latency samples.")
@click.option("--peers", callback=name_list(PEER_SYSTEMS, PEER_SYSTEMS), default=None, metavar="NAME,NAME",
              help=f"Peers to run beside Kittiwake  [default: {','.join(PEER_SYSTEMS)}]")
@click.option("--processes", type=click.IntRange(1, 64), default=PEERS.processes, show_default=True,
              help="Worker processes of every system.")
@click.option("--redis-url", default=PEERS.redis_url, show_default=True,
              help="The Redis database of the Redis peers; emptied before and after each (never FLUSHALL).")
@click.option("--pg-dsn", default=PEERS.pg_dsn, show_default=True,
              help="The PostgreSQL database of pgqueuer; its objects go to a schema of this run's own.")
@click.option("--max-drain-secs", type=click.FloatRange(1.0), default=PEERS.max_drain_secs, show_default=True,
              help="A drain still running after this is reported as partial, at the rate it reached.")
@click.option("--kittiwake-store", "kittiwake_store", metavar="URL", default=None,
              help="Run Kittiwake's broker on this store, e.g. postgresql://[USER@]HOST[:PORT]/DB[?schema=NAME] "
              "beside pgqueuer on the same server. It must hold no task; a schema the run creates is dropped. "
              "Default: a throwaway SQLite directory.")
@click.option("--dir", "parent_dir", type=click.Path(file_okay=False), default=None,
              help="Where to create the throwaway directory (default: the system temp dir).")
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="Write a bar chart (PNG) of drain and latency here; needs matplotlib. Default: next to --json.")
@click.option("--json", "--json-out", "json_path", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="Write the report as JSON to FILE ('-' for stdout).")
def peers_command(tasks: int, submits: int, threaded_submits: int, latency_samples: int, latency_gap_secs: float, peers: tuple[str, ...],
                  processes: int, redis_url: str, pg_dsn: str, max_drain_secs: float, kittiwake_store: str | None,
                  parent_dir: str | None, plot: str | None, json_path: str | None) -> None:
    """Kittiwake's App and workers beside Celery, RQ, Dramatiq, Huey and pgqueuer: submit, drain, latency."""
    from kittiwake.bench.peers.run import run_peers
    from kittiwake.bench.peers.show import show, write_chart
    from kittiwake.bench.report import plot_path, print_machine, write_json
    from kittiwake.store.location import parse_store_url

    if kittiwake_store is not None:
        try:
            parse_store_url(kittiwake_store)
        except ValueError as exc:
            raise click.BadParameter(f"{kittiwake_store!r}: {exc}", param_hint="--kittiwake-store") from None
    console = _console()
    settings = PeersSettings(tasks=tasks, submits=min(submits, tasks), threaded_submits=threaded_submits,
                             latency_samples=latency_samples,
                             latency_gap_secs=latency_gap_secs, peers=peers, processes=processes,
                             redis_url=redis_url, pg_dsn=pg_dsn, max_drain_secs=max_drain_secs,
                             kittiwake_store=kittiwake_store)
    report = run_peers(settings, console, parent_dir=parent_dir)
    show(console, report)
    print_machine(console, report["machine"])
    if json_path:
        write_json(json_path, report)
    target = plot_path(plot, json_path)
    if write_chart(target, report):
        console.print(f"[dim]bar chart written to {target}")


@bench.command("celery")
@click.option("--tasks", type=click.IntRange(1), default=CELERY.tasks, show_default=True,
              help="Null tasks submitted, then drained, per system and pool.")
@click.option("--pools", callback=name_list(CELERY_POOLS, CELERY_POOLS), default=None, metavar="NAME,NAME",
              help=f"Celery worker pools to run each system with, of {', '.join(CELERY_POOLS)} [default: all].")
@click.option("--concurrency", type=click.IntRange(1, 64), default=CELERY.concurrency, show_default=True,
              help="Child processes of the prefork pool.")
@click.option("--redis-url", default=CELERY.redis_url, show_default=True,
              help="The Redis database Celery's Redis transport uses (claimed, emptied before and after).")
@click.option("--max-drain-secs", type=click.FloatRange(1.0), default=CELERY.max_drain_secs, show_default=True,
              help="A drain still running after this fails its figure.")
@click.option("--dir", "parent_dir", type=click.Path(file_okay=False), default=None,
              help="Where to create the broker's throwaway directory (default: the system temp dir).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="Write the report as JSON to FILE ('-' for stdout).")
def celery_command(tasks: int, pools: tuple[str, ...], concurrency: int, redis_url: str, max_drain_secs: float,
                   parent_dir: str | None, json_path: str | None) -> None:
    """One Celery app's null tasks (acks_late) on Kittiwake's kombu transport and on Redis: submit and drain."""
    from kittiwake.bench.celery_transport import run_celery
    from kittiwake.bench.report import print_machine, show_figures, write_json

    console = _console()
    settings = CelerySettings(tasks=tasks, pools=pools, concurrency=concurrency, redis_url=redis_url,
                              max_drain_secs=max_drain_secs)
    report = run_celery(settings, console, parent_dir=parent_dir)
    show_figures(console, "kittiwake bench celery — tasks/s, × ref = Kittiwake over Redis", report["celery"])
    for system, text in report["services"].items():
        console.print(f"[dim]{system}: {text}")
    for name, record in report["celery"].items():
        if record.get("first_error"):
            console.print(f"[red]{name}: {record['first_error']}")
    print_machine(console, report["machine"])
    if json_path:
        write_json(json_path, report)


@bench.command("workers")
@click.option("--tasks", type=click.IntRange(1), default=WORKERS.tasks, show_default=True,
              help="Null tasks in each app.map drain.")
@click.option("--processes", type=click.IntRange(1, 64), default=WORKERS.processes, show_default=True,
              help="kittiwake worker --processes, every figure.")
@click.option("--concurrency", type=click.IntRange(1, 1000), default=WORKERS.concurrency, show_default=True,
              help="kittiwake worker --concurrency of the efficiency and mix figures (the drains run the default, 1).")
@click.option("--rounds", type=click.IntRange(1, 10_000), default=WORKERS.rounds, show_default=True,
              help="The efficiency figure runs rounds × slots sleeping tasks.")
@click.option("--sleep-secs", type=click.FloatRange(0.001, 3600), default=WORKERS.sleep_secs, show_default=True,
              help="How long the efficiency figure's tasks and the mix's long tasks sleep.")
@click.option("--mix-short", type=click.IntRange(0), default=WORKERS.mix_short, show_default=True,
              help=f"Tasks of {WORKERS.short_secs * 1000:g} ms in the mix (beside {WORKERS.mix_long_per_slot} long "
                   "tasks per slot).")
@click.option("--only", callback=name_list(WORKERS_FIGURES, ()), default=None, metavar="NAME,NAME",
              help=f"Run only these figures  [default: {','.join(WORKERS_FIGURES)}]")
@click.option("--worker-arg", "worker_args", multiple=True, metavar="OPTION",
              help="Advanced, for A/B runs: one more option of every kittiwake worker command (repeatable), "
                   "e.g. --worker-arg=--prefetch=1000. The figures are then no longer the defaults'.")
@click.option("--dir", "parent_dir", type=click.Path(file_okay=False), default=None,
              help="Where to create the throwaway directory (default: the system temp dir).")
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="Write a chart (PNG) of the drains and of each slot's timeline here; needs matplotlib "
                   "(pip install kittiwake[plot]). Default: next to --json.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="Write the report as JSON to FILE ('-' for stdout).")
def workers_command(tasks: int, processes: int, concurrency: int, rounds: int, sleep_secs: float, mix_short: int,
                    only: tuple[str, ...], worker_args: tuple[str, ...], json_path: str | None, plot: str | None,
                    parent_dir: str | None) -> None:
    """The App and `kittiwake worker` with default flags: app.map drains, efficiency on slots, a 1 ms / 1 s mix."""
    from kittiwake.bench.report import plot_path, print_machine, write_json
    from kittiwake.bench.workers.run import run_workers
    from kittiwake.bench.workers.show import show, write_chart

    console = _console()
    settings = replace(WORKERS, tasks=tasks, processes=processes, concurrency=concurrency, rounds=rounds,
                       sleep_secs=sleep_secs, mix_short=mix_short, only=only, worker_args=worker_args)
    report, timelines = run_workers(settings, console, parent_dir=parent_dir)
    show(console, report)
    print_machine(console, report["machine"])
    if json_path:
        write_json(json_path, report)
    target = plot_path(plot, json_path)
    if target:
        if write_chart(target, report, timelines):
            console.print(f"[dim]chart written to {target}")
        else:
            console.print("[yellow]no chart: matplotlib is not installed (pip install kittiwake[plot]) "
                          "or no figure ran")


def _flows_quick_default(name: QuickFlowsName) -> str:
    return f"[default: {getattr(FLOWS, name)}; {QUICK_FLOWS[name]} with --quick]"


@bench.command("flows")
@click.option("--quick", is_flag=True, help="Small sizes everywhere, for a smoke test.")
@click.option("--join-keys", type=click.IntRange(1), default=None,
              help=f"Keys of the three-input join (three tokens each)  {_flows_quick_default('join_keys')}")
@click.option("--producers", type=click.IntRange(1, 64), default=FLOWS.producers, show_default=True,
              help="Producer processes sending the tokens.")
@click.option("--batch", type=click.IntRange(1, 10_000), default=FLOWS.batch, show_default=True,
              help="Tokens per enqueue request.")
@click.option("--in-flight", type=click.IntRange(1, 1000), default=FLOWS.in_flight, show_default=True,
              help="Requests outstanding per producer.")
@click.option("--start-samples", type=click.IntRange(1), default=None,
              help=f"Runs of the step-start probe  {_flows_quick_default('start_samples')}")
@click.option("--size", default=None, metavar="SIZE",
              help=f"The pipeline's generated dataset, as `kittiwake demo --size`  {_flows_quick_default('size')}")
@click.option("--shards", type=click.IntRange(1, 10_000), default=None,
              help="Shards of the dataset. Default: as the demo (one per ~50 MB).")
@click.option("--warmup-size", default=None, metavar="SIZE",
              help=f"An unmeasured pass of both pipelines first; 0 skips it  {_flows_quick_default('warmup_size')}")
@click.option("--repeats", type=click.IntRange(1, 100), default=None,
              help=f"Passes of each pipeline in the overhead figure, ABBA order  {_flows_quick_default('repeats')}")
@click.option("--only", multiple=True, type=click.Choice(FLOWS_FIGURES),
              help="Run only this figure (repeatable), e.g. to profile the join.")
@_durability_option
@_output_options
def flows_command(quick: bool, join_keys: int | None, producers: int, batch: int, in_flight: int,
                  start_samples: int | None, size: str | None, shards: int | None, warmup_size: str | None,
                  repeats: int | None, only: tuple[str, ...], durability: str, json_path: str | None, plot: str | None,
                  parent_dir: str | None) -> None:
    """Pipelines on Spark: join tokens/s vs plain enqueue, Spark step start vs a no-op Spark job, the main job's flow vs one PySpark script."""
    from kittiwake.bench.flows import run_flows, show
    from kittiwake.bench.report import print_machine
    from kittiwake.demo.dataset import parse_size
    from kittiwake.errors import BadRequest

    console = _console()
    settings = FlowsSettings(producers=producers, batch=batch, in_flight=in_flight, shards=shards,
                             durability=durability, only=only)
    if quick:
        settings = replace(settings, **QUICK_FLOWS)
    settings = replace(  # the sizes given on the command line
        settings,
        join_keys=settings.join_keys if join_keys is None else join_keys,
        start_samples=settings.start_samples if start_samples is None else start_samples,
        size=settings.size if size is None else size,
        warmup_size=settings.warmup_size if warmup_size is None else warmup_size,
        repeats=settings.repeats if repeats is None else repeats,
    )
    try:
        parse_size(settings.size)
        if settings.warmup_size.strip() not in ("", "0"):
            parse_size(settings.warmup_size)
    except BadRequest as error:
        raise click.BadParameter(error.message) from None
    report, measured = run_flows(settings, console, parent_dir=parent_dir)
    show(console, report)
    print_machine(console, report["machine"])
    _finish(console, report, measured, "kittiwake bench flows", json_path, plot)


MAPREDUCE = MapReduceSettings()


def _byte_size(ctx: click.Context, param: click.Parameter, value: str) -> int:
    from kittiwake.byte_sizes import parse_byte_size
    from kittiwake.errors import BadRequest

    try:
        size = parse_byte_size(value)
    except BadRequest as error:
        raise click.BadParameter(error.message) from None
    if size < 100:
        raise click.BadParameter(f"must be at least 100 bytes, not {value!r}")
    return size


def _byte_sizes(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, ...]:
    sizes = tuple(_byte_size(ctx, param, part.strip()) for part in value.split(",") if part.strip())
    if not sizes:
        raise click.BadParameter("give at least one size, e.g. 100KB,1MB")
    if len(set(sizes)) != len(sizes):
        raise click.BadParameter("a size is given twice")
    return tuple(sorted(sizes))


@bench.command("mapreduce")
@click.option("--app", "app_name", type=click.Choice([*MAPREDUCE_APPS, "all"]), default="all", show_default=True,
              help="The MapReduce app to run; all runs grep, wordcount and sort.")
@click.option("--size", default="1GB", show_default=True, callback=_byte_size, metavar="SIZE",
              help="Bytes of every dataset (B, KB, MB, GB, decimal units, as gen-data).")
@click.option("--partition-sizes", default=",".join(MAPREDUCE_PARTITION_SIZES), show_default=True,
              callback=_byte_sizes, metavar="SIZE,SIZE",
              help="Bytes per input file, one dataset (and one row per app) each; each at most --size.")
@click.option("--reducers", type=click.IntRange(1, 10_000), default=MAPREDUCE.reducers, show_default=True,
              help="Reduce tasks on both systems (Spark: spark.sql.shuffle.partitions).")
@click.option("--nodes", type=click.IntRange(1, 64), default=MAPREDUCE.nodes, show_default=True,
              help="kittiwake worker --node n0, n1, … commands (map tasks placed round robin on them).")
@click.option("--concurrency", type=click.IntRange(1, 1000), default=MAPREDUCE.concurrency, show_default=True,
              help="--concurrency of each worker command.")
@click.option("--pattern", default=None,
              help="Grep's literal pattern. Default: the fourth most frequent word of the seed's vocabulary.")
@click.option("--seed", type=int, default=MAPREDUCE.seed, show_default=True, help="gen-data's seed.")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None,
              help="Keep the datasets here and reuse those already made with the same kind, sizes and seed. "
                   "Default: a temp dir removed at the end.")
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="Write a chart (PNG) of MB/s against partition size, a panel per app; needs matplotlib. "
                   "Default: next to --json.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="Write the report as JSON to FILE ('-' for stdout).")
def mapreduce_command(app_name: str, size: int, partition_sizes: tuple[int, ...], reducers: int, nodes: int,
                      concurrency: int, pattern: str | None, seed: int, data_dir: str | None, plot: str | None,
                      json_path: str | None) -> None:
    """Grep, wordcount and sort on Kittiwake's workers vs PySpark, same input: MB/s against partition size."""
    from kittiwake.bench.report import plot_path, print_machine, write_json

    too_large = [value for value in partition_sizes if value > size]
    if too_large:
        raise click.BadParameter(f"{too_large[0]:,} bytes is larger than --size ({size:,} bytes)",
                                 param_hint="'--partition-sizes'")
    if pattern is not None and (not pattern or "\n" in pattern or "\r" in pattern):
        raise click.BadParameter("a grep pattern is one non-empty line", param_hint="'--pattern'")
    from kittiwake.bench.mapreduce.run import run_mapreduce
    from kittiwake.bench.mapreduce.show import show, write_chart
    from kittiwake.bench.spark_peer import spark_available

    reason = spark_available()
    if reason is not None:
        raise click.ClickException(f"bench mapreduce runs Spark beside Kittiwake: {reason}")
    console = _console()
    settings = replace(MAPREDUCE, apps=MAPREDUCE_APPS if app_name == "all" else (app_name,), size_bytes=size,
                       partition_sizes=partition_sizes, reducers=reducers, nodes=nodes, concurrency=concurrency,
                       pattern=pattern, seed=seed, data_dir=data_dir)
    report = run_mapreduce(settings, console)
    show(console, report)
    print_machine(console, report["machine"])
    if json_path:
        write_json(json_path, report)
    target = plot_path(plot, json_path)
    if target:
        if write_chart(target, report):
            console.print(f"[dim]chart written to {target}")
        else:
            console.print("[yellow]no chart: matplotlib is not installed (pip install kittiwake[plot])")


@bench.command("sqs")
@click.option("--seconds", type=click.FloatRange(0.1), default=5.0, show_default=True,
              help="Measured seconds per figure and system.")
@click.option("--warmup", type=click.FloatRange(0.0), default=1.0, show_default=True,
              help="Unmeasured seconds before each figure.")
@click.option("--processes", type=click.IntRange(1, 64), default=2, show_default=True, help="Load processes.")
@click.option("--threads", type=click.IntRange(1, 256), default=8, show_default=True,
              help="Threads per load process, each with its own boto3 client.")
@click.option("--only", multiple=True, type=click.Choice(("single", "batch")),
              help="Run only this figure (repeatable).")
@_durability_option
@click.option("--json", "json_path", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="Write the report as JSON to FILE ('-' for stdout).")
@click.option("--dir", "parent_dir", type=click.Path(file_okay=False), default=None,
              help="Where to create the broker's throwaway directory (default: the system temp dir).")
def sqs_command(seconds: float, warmup: float, processes: int, threads: int, only: tuple[str, ...],
                durability: str, json_path: str | None, parent_dir: str | None) -> None:
    """boto3 send → receive → delete against Kittiwake's SQS API and moto_server, same run; ×ref = vs moto_server."""
    from kittiwake.bench.report import print_machine, show_figures, write_json

    try:
        from kittiwake.bench.sqs import FIGURES, SqsBenchSettings, run_sqs
        import boto3  # noqa: F401
        import moto.server  # noqa: F401
    except ImportError as exc:
        raise click.ClickException(f"{exc.name} is missing: pip install 'kittiwake[sqs]'") from None
    console = _console()
    settings = SqsBenchSettings(seconds=seconds, warmup_secs=warmup, processes=processes, threads=threads,
                                durability=durability, figures=only or FIGURES)
    report = run_sqs(settings, parent_dir=parent_dir)
    show_figures(console, f"kittiwake bench sqs — {processes}×{threads} boto3 clients, {durability}, "
                 "tasks/s = messages sent, received and deleted, ×ref = vs moto_server", report["sqs"])
    print_machine(console, report["machine"])
    if json_path:
        write_json(json_path, report)


@bench.command("dashboard")
@click.option("--queues", type=click.IntRange(1, 10_000_000), default=100_000, show_default=True,
              help="Queues on the broker, one task each.")
@click.option("--workers", type=click.IntRange(0, 256), default=10, show_default=True,
              help="Threads leasing and dequeuing (and enqueueing) meanwhile.")
@click.option("--samples", type=click.IntRange(1), default=200, show_default=True, help="Requests per figure.")
@click.option("--stream-samples", type=click.IntRange(1), default=10, show_default=True,
              help="Enqueues timed to their stream event.")
@_durability_option
@click.option("--json", "json_path", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="Write the report as JSON to FILE ('-' for stdout).")
@click.option("--dir", "parent_dir", type=click.Path(file_okay=False), default=None,
              help="Where to create the broker's throwaway directory (default: the system temp dir).")
def dashboard_command(queues: int, workers: int, samples: int, stream_samples: int, durability: str,
                      json_path: str | None, parent_dir: str | None) -> None:
    """The HTTP port's views (queue table, overview, stream) on a broker of many queues; ×healthz = vs /healthz."""
    from kittiwake.bench.dashboard import DashboardSettings, run_dashboard, table
    from kittiwake.bench.report import print_machine, write_json

    console = _console()
    settings = DashboardSettings(queues=queues, workers=workers, samples=samples, stream_samples=stream_samples,
                                 durability=durability)
    report = run_dashboard(settings, parent_dir=parent_dir, say=lambda text: console.print(f"[dim]{text}"))
    console.print(table(f"kittiwake bench dashboard — {queues:,} queues, {workers} workers leasing, {durability}; "
                        f"× healthz = median over /healthz's on the same port; load {report['load_ops_per_s']:,.0f} "
                        "tasks/s meanwhile", report["dashboard"]))
    print_machine(console, report["machine"])
    if json_path:
        write_json(json_path, report)


@bench.command("udp")
@click.option("--seconds", type=click.FloatRange(0.1), default=5.0, show_default=True, help="Load per row.")
@click.option("--threads", type=click.IntRange(1, 1024), default=16, show_default=True,
              help="Threads sharing one UDP client (requests in flight).")
@click.option("--batch", type=click.IntRange(1, 64), default=8, show_default=True, help="Tasks per enqueue request.")
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of the relay's drops.")
@_durability_option
@click.option("--json", "json_path", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="Write the report as JSON to FILE ('-' for stdout).")
@click.option("--dir", "parent_dir", type=click.Path(file_okay=False), default=None,
              help="Where to create the broker's throwaway directory (default: the system temp dir).")
def udp_command(seconds: float, threads: int, batch: int, seed: int, durability: str, json_path: str | None,
                parent_dir: str | None) -> None:
    """Enqueue over kwu:// through a lossy relay at 0%, 1.4% and 5% loss, and over TCP, on one broker."""
    from kittiwake.bench.report import machine_info, print_machine, write_json
    from kittiwake.bench.udp_loss import UdpLossSettings, measure, table

    console = _console()
    settings = UdpLossSettings(seconds=seconds, threads=threads, batch=batch, seed=seed, durability=durability)
    rows = measure(settings, parent_dir=parent_dir)
    console.print(table(rows))
    report: dict[str, Any] = {
        "machine": machine_info(),
        "settings": {"seconds": seconds, "threads": threads, "batch": batch, "seed": seed, "durability": durability},
        "udp": rows,
    }
    print_machine(console, report["machine"])
    if json_path:
        write_json(json_path, report)
