"""The commands of the broker's own benchmarks: `kittiwake bench ops`, `latency`, `scale`, `producer`, `udp`.

Each declares its options over the defaults in `settings` (the help says each default) and imports
its run only when it runs, so `kittiwake --help` stays light. `cluster`'s command is in `cluster`,
beside its settings; the group that gathers them, and the benchmarks of other systems from their
own distribution, is `kittiwake.cli.bench_command`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import click

from kittiwake.bench.command_options import durability_option, finish, make_console, output_options
from kittiwake.bench.settings import (
    OPS_FIGURES,
    QUICK_PRODUCER,
    LatencySettings,
    OpsSettings,
    ProducerBenchSettings,
    ScaleSettings,
)

# The defaults of every option (settings imports nothing of the benchmarks, so --help stays light).
OPS, LATENCY, SCALE, PRODUCER = OpsSettings(), LatencySettings(), ScaleSettings(), ProducerBenchSettings()


@click.command("ops")
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
@durability_option
@output_options
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
    console = make_console()
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
    finish(console, report, measured, "kittiwake bench ops", json_path, plot)


@click.command("latency")
@click.option("--samples", type=click.IntRange(1, 10_000_000), default=LATENCY.samples, show_default=True,
              help="Sequential samples per figure.")
@click.option("--fsync-samples", type=click.IntRange(1, 10_000_000), default=None,
              help="fsync samples (default: --samples; stops after 20 s on a slow disk).")
@durability_option
@output_options
def latency_command(samples: int, fsync_samples: int | None, durability: str, json_path: str | None,
                    plot: str | None, parent_dir: str | None) -> None:
    """Idle broker: enqueue round trip and enqueue → parked lease, vs Fabriq and the disk's fsync."""
    from kittiwake.bench.latency import run_latency
    from kittiwake.bench.report import print_machine, show_figures

    console = make_console()
    settings = LatencySettings(samples=samples, fsync_samples=fsync_samples or samples, durability=durability)
    report, measured = run_latency(settings, console, parent_dir=parent_dir)
    show_figures(console, f"kittiwake bench latency — {durability}, ×ref = vs Fabriq push p50", report["latency"])
    print_machine(console, report["machine"])
    finish(console, report, measured, "kittiwake bench latency", json_path, plot)


@click.command("scale")
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
@durability_option
@output_options
def scale_command(big: int, queues: int, spread: int, samples: int, fill_batch: int, recovery_tasks: int,
                  durability: str, json_path: str | None, plot: str | None, parent_dir: str | None) -> None:
    """A big queue and many queues: enqueue rate, head-of-queue latency, listing, RSS, restart, cold restart."""
    from kittiwake.bench.report import print_machine
    from kittiwake.bench.scale import run_scale, show

    console = make_console()
    settings = ScaleSettings(big=big, queues=queues, spread=spread, samples=samples, fill_batch=fill_batch,
                             recovery_tasks=recovery_tasks, durability=durability)
    report, measured = run_scale(settings, console, parent_dir=parent_dir)
    show(console, report)
    print_machine(console, report["machine"])
    finish(console, report, measured, "kittiwake bench scale", json_path, plot)


@click.command("producer")
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
@durability_option
@output_options
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
    console = make_console()
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


@click.command("udp")
@click.option("--seconds", type=click.FloatRange(0.1), default=5.0, show_default=True, help="Load per row.")
@click.option("--threads", type=click.IntRange(1, 1024), default=16, show_default=True,
              help="Threads sharing one UDP client (requests in flight).")
@click.option("--batch", type=click.IntRange(1, 64), default=8, show_default=True, help="Tasks per enqueue request.")
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of the relay's drops.")
@durability_option
@click.option("--json", "json_path", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="Write the report as JSON to FILE ('-' for stdout).")
@click.option("--dir", "parent_dir", type=click.Path(file_okay=False), default=None,
              help="Where to create the broker's throwaway directory (default: the system temp dir).")
def udp_command(seconds: float, threads: int, batch: int, seed: int, durability: str, json_path: str | None,
                parent_dir: str | None) -> None:
    """Enqueue over kwu:// through a lossy relay at 0%, 1.4% and 5% loss, and over TCP, on one broker."""
    from kittiwake.bench.report import machine_info, print_machine, write_json
    from kittiwake.bench.udp_loss import UdpLossSettings, measure, table

    console = make_console()
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
