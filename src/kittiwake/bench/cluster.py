"""`kittiwake bench cluster`: its settings, its targets and its click command.

This module declares the benchmark and nothing heavier: the `cluster` command that
`kittiwake.cli.bench_command` adds to the `bench` group, over `cluster_settings` (the settings — the
defaults are the users' path: the broker's default durability, fsync —, the `--quick` sizes of the
suite's smoke run, the targets), which the run reads too. The run is `cluster_run`, the helper processes `cluster_jobs`, the table and chart `cluster_show`;
they are imported when the command runs, so `kittiwake --help` stays light.

One run, against one broker on the same machine:

* **drain, broker-bound**: `drain_tasks` FIFO tasks pre-filled (spread evenly over the nodes by the
  cluster client), drained by `consumers` processes that lease and dequeue in batches of `batch`
  (consumer i near node i mod 2; four, so that one broker is busy, not waiting for its consumers'
  round trips); 1 broker, then 2 nodes: `drain_per_s`, `ratio_2_vs_1` (≥ 1.6).
* **user path**: `app.map` of `user_tasks` null tasks to `kittiwake worker --processes P`, 1 broker
  then 2 nodes: `user_path_ratio_2_vs_1` (no target: the workers share the cores with the brokers).
* **broker CPU per task** over the drains, 2 nodes ÷ 1 broker: `cpu_per_task_ratio` (≤ 1.1).
* **hops per pop**, one consumer popping one task per lease at each of `hop_nodes` nodes holding
  `hop_tasks_per_node` tasks each, against Fabriq's model `1 − 1/s + (s − 1)/(2m)` (s nodes, m tasks
  in all, chapter 4): `hops_per_pop` (±5%). The hop runs' brokers use `hop_durability` (os by
  default: hops do not depend on the disk, and a one-task pop per fsync would make them slow;
  `--quick` keeps the run's, so its hop cluster serves the load run too).
* **extra requests per task** of the batched consumers on 2 nodes beyond one broker's (≤ 0.01).
* **load deviation**: `producers` processes each push `producer_tasks` FIFO tasks one by one to
  `spread_nodes` nodes; the worst node's distance from the mean (≤ 2%; Fabriq measured 9.5%).
* **push p50**: single enqueues on one broker and on 2 nodes, in alternating blocks of 50 (≤ one
  broker's + 0.1 ms); beside them, as a reference with no cluster, two plain brokers pushed to in
  turn by one client (as the cluster's spreader does): what alternating between two broker
  processes costs on this machine.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import click

from kittiwake.bench.cluster_settings import CLUSTER, QUICK_CLUSTER
from kittiwake.bench.settings import DURABILITIES, DURABILITY


def _node_counts(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        counts = tuple(int(part) for part in value.split(",") if part.strip())
    except ValueError:
        raise click.BadParameter(f"node counts separated by commas, e.g. 4,8; not {value!r}") from None
    if not counts or any(count < 2 or count > 32 for count in counts):
        raise click.BadParameter("each node count is between 2 and 32")
    return counts


@click.command("cluster")
@click.option("--quick", is_flag=True, help="Small sizes everywhere, for a smoke test.")
@click.option("--drain-tasks", type=click.IntRange(1), default=None,
              help=f"Tasks of each broker-bound drain [default: {CLUSTER.drain_tasks:,}; "
                   f"{QUICK_CLUSTER['drain_tasks']:,} with --quick]")
@click.option("--batch", type=click.IntRange(1, 10_000), default=CLUSTER.batch, show_default=True,
              help="Tasks per lease and per dequeue of the drains' consumers.")
@click.option("--consumers", type=click.IntRange(1, 64), default=None,
              help=f"Consumer processes of each drain (consumer i near node i mod 2) [default: {CLUSTER.consumers}; "
                   f"{QUICK_CLUSTER['consumers']} with --quick]")
@click.option("--user-tasks", type=click.IntRange(1), default=None,
              help=f"Null tasks of each user-path drain [default: {CLUSTER.user_tasks:,}; "
                   f"{QUICK_CLUSTER['user_tasks']:,} with --quick]")
@click.option("--worker-processes", type=click.IntRange(1, 64), default=None,
              help=f"kittiwake worker --processes of the user path [default: {CLUSTER.worker_processes}; "
                   f"{QUICK_CLUSTER['worker_processes']} with --quick]")
@click.option("--hop-nodes", callback=_node_counts, default=None, metavar="N,N",
              help="Node counts of the hop runs [default: 4,8; 4 with --quick]")
@click.option("--hop-tasks-per-node", type=click.IntRange(1), default=None,
              help=f"Tasks per node of the hop runs [default: {CLUSTER.hop_tasks_per_node}; "
                   f"{QUICK_CLUSTER['hop_tasks_per_node']} with --quick]")
@click.option("--hop-durability", type=click.Choice(DURABILITIES), default=None,
              help="--durability of the hop runs' nodes only (hops do not depend on the disk) "
                   "[default: os; --durability with --quick]")
@click.option("--spread-nodes", type=click.IntRange(2, 32), default=None,
              help="Nodes of the load-deviation run [default: 8; 4 with --quick]")
@click.option("--producers", type=click.IntRange(1, 64), default=None,
              help="Producer processes of the load-deviation run [default: 8; 4 with --quick]")
@click.option("--producer-tasks", type=click.IntRange(1), default=None,
              help=f"FIFO tasks each producer pushes, one per request [default: {CLUSTER.producer_tasks:,}; "
                   f"{QUICK_CLUSTER['producer_tasks']} with --quick]")
@click.option("--push-samples", type=click.IntRange(1), default=None,
              help=f"Single enqueues timed per system [default: {CLUSTER.push_samples:,}; "
                   f"{QUICK_CLUSTER['push_samples']} with --quick]")
@click.option("--durability", type=click.Choice(DURABILITIES), default=DURABILITY, show_default=True,
              help="fsync: ok means on disk (default); os: ok means handed to the OS.")
@click.option("--dir", "parent_dir", type=click.Path(file_okay=False), default=None,
              help="Where to create the brokers' throwaway directory (default: the system temp dir).")
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="Write a chart (PNG) here; needs matplotlib. Default: next to --json.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="Write the report as JSON to FILE ('-' for stdout).")
def cluster_command(quick: bool, drain_tasks: int | None, batch: int, consumers: int | None, user_tasks: int | None,
                    worker_processes: int | None, hop_nodes: tuple[int, ...] | None, hop_tasks_per_node: int | None,
                    hop_durability: str | None, spread_nodes: int | None, producers: int | None,
                    producer_tasks: int | None, push_samples: int | None, durability: str, parent_dir: str | None,
                    plot: str | None, json_path: str | None) -> None:
    """Clusters: drains on 1 broker and 2 nodes, broker CPU per task, hops per pop vs Fabriq's
    model, extra requests, load deviation over 8 nodes, push p50."""
    from rich.console import Console

    from kittiwake.bench.cluster_run import run_cluster
    from kittiwake.bench.cluster_show import show, write_chart
    from kittiwake.bench.report import write_outputs

    base = replace(CLUSTER, **QUICK_CLUSTER) if quick else CLUSTER
    given: dict[str, Any] = {"hop_durability": hop_durability, "drain_tasks": drain_tasks, "user_tasks": user_tasks, "hop_nodes": hop_nodes,
             "hop_tasks_per_node": hop_tasks_per_node, "spread_nodes": spread_nodes, "producers": producers,
             "producer_tasks": producer_tasks, "push_samples": push_samples}
    given.update(worker_processes=worker_processes, consumers=consumers)
    settings = replace(base, batch=batch, durability=durability,
                       **{name: value for name, value in given.items() if value is not None})
    console = Console()
    if not console.is_terminal:  # a log file or a pipe: room for the whole table
        console = Console(width=max(console.width, 160))
    report = run_cluster(settings, console, parent_dir=parent_dir)
    show(console, report)
    write_outputs(console, report, json_path, plot, lambda target: write_chart(target, report))
    failed = [name for name, record in report["cluster"].items() if record.get("status") == "failed"]
    if failed:
        raise click.ClickException(f"figures failed: {', '.join(failed)}")
