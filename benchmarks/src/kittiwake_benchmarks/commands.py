"""The commands of the benchmarks of other systems: `kittiwake bench tasks`, `peers`, `celery`, `workers`,
`flows`, `mapreduce`, `sqs`, `dashboard`.

Each is an entry point of the group `kittiwake.bench` (this distribution's pyproject.toml), which
`kittiwake bench` loads (`kittiwake.bench.distribution`). Each declares its options over the
defaults in `settings` (the help says each default) with the options every bench command shares
(`kittiwake.bench.command_options`), and imports its run only when it runs, so `kittiwake --help`
stays light.
"""

from __future__ import annotations

from dataclasses import replace

import click

from kittiwake.bench.command_options import durability_option, finish, make_console, name_list, output_options
from kittiwake_benchmarks.settings import (
    CELERY_POOLS,
    FLOWS_FIGURES,
    MAPREDUCE_APPS,
    MAPREDUCE_PARTITION_SIZES,
    PEER_SYSTEMS,
    PEERS_SUBMIT_THREADS,
    QUICK_FLOWS,
    QUICK_TASKS,
    CelerySettings,
    FlowsSettings,
    MapReduceSettings,
    PeersSettings,
    QuickFlowsName,
    QuickTasksName,
    TasksSettings,
    WORKERS_FIGURES,
    WorkersSettings,
    quick_settings,
)

# The defaults of every option (settings imports nothing of the benchmarks, so --help stays light).
TASKS, PEERS, FLOWS = TasksSettings(), PeersSettings(), FlowsSettings()
CELERY = CelerySettings()
WORKERS = WorkersSettings()


def _quick_default(name: QuickTasksName) -> str:
    """The help's note of an option whose default --quick changes: `[default: 100,000; 5,000 with --quick]`."""
    return f"[default: {getattr(TASKS, name):,g}; {QUICK_TASKS[name]:,g} with --quick]"


@click.command("tasks")
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
@durability_option
@output_options
def tasks_command(quick: bool, tasks: int | None, workers: int, bundle: int, max_batch: int, results: str,
                  latency_tasks: int | None, latency_rate: float, busy_secs: float | None,
                  mixed_busy_secs: float | None, spark_tasks: int | None, durability: str,
                  json_path: str | None, plot: str | None, parent_dir: str | None) -> None:
    """Workers pulling null, sleep and mixed tasks: throughput, submit → start latency, efficiency, vs PySpark."""
    from kittiwake.bench.report import print_machine
    from kittiwake_benchmarks.tasks import run_tasks, show

    console = make_console()
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
    finish(console, report, measured, "kittiwake bench tasks", json_path, plot)


@click.command("peers")
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
    from kittiwake_benchmarks.peers.run import run_peers
    from kittiwake_benchmarks.peers.show import show, write_chart
    from kittiwake.bench.report import write_outputs
    from kittiwake.store.location import parse_store_url

    if kittiwake_store is not None:
        try:
            parse_store_url(kittiwake_store)
        except ValueError as exc:
            raise click.BadParameter(f"{kittiwake_store!r}: {exc}", param_hint="--kittiwake-store") from None
    console = make_console()
    settings = PeersSettings(tasks=tasks, submits=min(submits, tasks), threaded_submits=threaded_submits,
                             latency_samples=latency_samples,
                             latency_gap_secs=latency_gap_secs, peers=peers, processes=processes,
                             redis_url=redis_url, pg_dsn=pg_dsn, max_drain_secs=max_drain_secs,
                             kittiwake_store=kittiwake_store)
    report = run_peers(settings, console, parent_dir=parent_dir)
    show(console, report)
    write_outputs(console, report, json_path, plot, lambda target: write_chart(target, report), what="bar chart")


@click.command("celery")
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
    from kittiwake_benchmarks.celery_transport import run_celery
    from kittiwake.bench.report import print_machine, show_figures, write_json

    console = make_console()
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


@click.command("workers")
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
    from kittiwake.bench.report import write_outputs
    from kittiwake_benchmarks.workers.run import run_workers
    from kittiwake_benchmarks.workers.show import show, write_chart

    console = make_console()
    settings = replace(WORKERS, tasks=tasks, processes=processes, concurrency=concurrency, rounds=rounds,
                       sleep_secs=sleep_secs, mix_short=mix_short, only=only, worker_args=worker_args)
    report, timelines = run_workers(settings, console, parent_dir=parent_dir)
    show(console, report)
    write_outputs(console, report, json_path, plot, lambda target: write_chart(target, report, timelines))


def _flows_quick_default(name: QuickFlowsName) -> str:
    return f"[default: {getattr(FLOWS, name)}; {QUICK_FLOWS[name]} with --quick]"


@click.command("flows")
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
@durability_option
@output_options
def flows_command(quick: bool, join_keys: int | None, producers: int, batch: int, in_flight: int,
                  start_samples: int | None, size: str | None, shards: int | None, warmup_size: str | None,
                  repeats: int | None, only: tuple[str, ...], durability: str, json_path: str | None, plot: str | None,
                  parent_dir: str | None) -> None:
    """Pipelines on Spark: join tokens/s vs plain enqueue, Spark step start vs a no-op Spark job, the main job's flow vs one PySpark script."""
    from kittiwake_benchmarks.flows import run_flows, show
    from kittiwake.bench.report import print_machine
    from kittiwake.demo.dataset import parse_size
    from kittiwake.errors import BadRequest

    console = make_console()
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
    finish(console, report, measured, "kittiwake bench flows", json_path, plot)


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


@click.command("mapreduce")
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
    from kittiwake.bench.report import write_outputs

    too_large = [value for value in partition_sizes if value > size]
    if too_large:
        raise click.BadParameter(f"{too_large[0]:,} bytes is larger than --size ({size:,} bytes)",
                                 param_hint="'--partition-sizes'")
    if pattern is not None and (not pattern or "\n" in pattern or "\r" in pattern):
        raise click.BadParameter("a grep pattern is one non-empty line", param_hint="'--pattern'")
    from kittiwake_benchmarks.mapreduce.run import run_mapreduce
    from kittiwake_benchmarks.mapreduce.show import show, write_chart
    from kittiwake.testing.spark_session import spark_available

    reason = spark_available()
    if reason is not None:
        raise click.ClickException(f"bench mapreduce runs Spark beside Kittiwake: {reason}")
    console = make_console()
    settings = replace(MAPREDUCE, apps=MAPREDUCE_APPS if app_name == "all" else (app_name,), size_bytes=size,
                       partition_sizes=partition_sizes, reducers=reducers, nodes=nodes, concurrency=concurrency,
                       pattern=pattern, seed=seed, data_dir=data_dir)
    report = run_mapreduce(settings, console)
    show(console, report)
    write_outputs(console, report, json_path, plot, lambda target: write_chart(target, report))


@click.command("sqs")
@click.option("--seconds", type=click.FloatRange(0.1), default=5.0, show_default=True,
              help="Measured seconds per figure and system.")
@click.option("--warmup", type=click.FloatRange(0.0), default=1.0, show_default=True,
              help="Unmeasured seconds before each figure.")
@click.option("--processes", type=click.IntRange(1, 64), default=2, show_default=True, help="Load processes.")
@click.option("--threads", type=click.IntRange(1, 256), default=8, show_default=True,
              help="Threads per load process, each with its own boto3 client.")
@click.option("--only", multiple=True, type=click.Choice(("single", "batch")),
              help="Run only this figure (repeatable).")
@durability_option
@click.option("--json", "json_path", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="Write the report as JSON to FILE ('-' for stdout).")
@click.option("--dir", "parent_dir", type=click.Path(file_okay=False), default=None,
              help="Where to create the broker's throwaway directory (default: the system temp dir).")
def sqs_command(seconds: float, warmup: float, processes: int, threads: int, only: tuple[str, ...],
                durability: str, json_path: str | None, parent_dir: str | None) -> None:
    """boto3 send → receive → delete against Kittiwake's SQS API and moto_server, same run; ×ref = vs moto_server."""
    from kittiwake.bench.report import print_machine, show_figures, write_json

    try:
        from kittiwake_benchmarks.sqs import FIGURES, SqsBenchSettings, run_sqs
        import boto3  # noqa: F401
        import moto.server  # noqa: F401
    except ImportError as exc:
        raise click.ClickException(f"{exc.name} is missing: pip install 'kittiwake[sqs]'") from None
    console = make_console()
    settings = SqsBenchSettings(seconds=seconds, warmup_secs=warmup, processes=processes, threads=threads,
                                durability=durability, figures=only or FIGURES)
    report = run_sqs(settings, parent_dir=parent_dir)
    show_figures(console, f"kittiwake bench sqs — {processes}×{threads} boto3 clients, {durability}, "
                 "tasks/s = messages sent, received and deleted, ×ref = vs moto_server", report["sqs"])
    print_machine(console, report["machine"])
    if json_path:
        write_json(json_path, report)


@click.command("dashboard")
@click.option("--queues", type=click.IntRange(1, 10_000_000), default=100_000, show_default=True,
              help="Queues on the broker, one task each.")
@click.option("--workers", type=click.IntRange(0, 256), default=10, show_default=True,
              help="Threads leasing and dequeuing (and enqueueing) meanwhile.")
@click.option("--samples", type=click.IntRange(1), default=200, show_default=True, help="Requests per figure.")
@click.option("--stream-samples", type=click.IntRange(1), default=10, show_default=True,
              help="Enqueues timed to their stream event.")
@durability_option
@click.option("--json", "json_path", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="Write the report as JSON to FILE ('-' for stdout).")
@click.option("--dir", "parent_dir", type=click.Path(file_okay=False), default=None,
              help="Where to create the broker's throwaway directory (default: the system temp dir).")
def dashboard_command(queues: int, workers: int, samples: int, stream_samples: int, durability: str,
                      json_path: str | None, parent_dir: str | None) -> None:
    """The HTTP port's views (queue table, overview, stream) on a broker of many queues; ×healthz = vs /healthz."""
    from kittiwake_benchmarks.dashboard import DashboardSettings, run_dashboard, table
    from kittiwake.bench.report import print_machine, write_json

    console = make_console()
    settings = DashboardSettings(queues=queues, workers=workers, samples=samples, stream_samples=stream_samples,
                                 durability=durability)
    report = run_dashboard(settings, parent_dir=parent_dir, say=lambda text: console.print(f"[dim]{text}"))
    console.print(table(f"kittiwake bench dashboard — {queues:,} queues, {workers} workers leasing, {durability}; "
                        f"× healthz = median over /healthz's on the same port; load {report['load_ops_per_s']:,.0f} "
                        "tasks/s meanwhile", report["dashboard"]))
    print_machine(console, report["machine"])
    if json_path:
        write_json(json_path, report)


