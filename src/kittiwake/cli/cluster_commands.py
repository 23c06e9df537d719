"""`kittiwake cluster ...`: a cluster's map, its nodes' state, and growing it by a node.

* `cluster map --cluster FILE`: each node's address, index (the residue of its ids) and slots,
  whether the addresses are TLS ports, and the epoch.
* `cluster status [--url kw://a,b,c | --cluster FILE]`: every node up or down, the epoch it serves,
  its slots, tasks and rates, and the load deviation (`kittiwake.cluster.status`); exit status 1
  when a node is down or the epochs disagree.
* `cluster grow --from OLD --to NEW --store NAME=STORE ...`: the offline move of every task to its
  owner under a map that appends nodes (`kittiwake.cluster.grow`), a progress bar per node, then what
  moved by slot range and by node.

Refusals print `kittiwake cluster ...: why` on stderr and exit 1; a bad option exits 2.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from kittiwake import errors
from kittiwake.cli.context import CliContext

if TYPE_CHECKING:
    from kittiwake.cluster.cluster_map import ClusterMap
    from kittiwake.cluster.grow import GrowReport
    from kittiwake.cluster.status import ClusterStatus
    from kittiwake.store.location import StoreLocation

_STORE_HELP = ("NAME=STORE, once per node of the new map: the node's data directory (as `broker --data`), "
               "sqlite://DIR or postgresql://… (as `broker --store`).")


@click.group("cluster")
def cluster() -> None:
    """A cluster of brokers: its map, its nodes' state, growing it by a node."""


def _read_map(path: str, option: str) -> ClusterMap:
    from kittiwake.cluster.cluster_map import ClusterMap

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise click.BadParameter(f"{path}: {exc.strerror or exc}", param_hint=option) from None
    try:
        return ClusterMap.from_toml(text)
    except errors.BadRequest as exc:
        raise click.BadParameter(f"{path}: {exc.message}", param_hint=option) from None


def _as_json(obj: CliContext | None, flag: bool) -> bool:
    return flag or (obj is not None and obj.json)


# ------------------------------------------------------------ map


@cluster.command("map")
@click.option("--cluster", "cluster_file", required=True, metavar="FILE", help="The cluster file (TOML).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def map_command(obj: CliContext | None, cluster_file: str, as_json: bool) -> None:
    """Print each node's address, index and slots, and the map's epoch."""
    from kittiwake.cluster.growth import SlotRange

    cluster_map = _read_map(cluster_file, "--cluster")
    rows: list[dict[str, Any]] = []
    for index, node in enumerate(cluster_map.nodes):
        slots = cluster_map.slots_of(node.name)
        ranges: list[SlotRange] = []
        for slot in slots:
            if ranges and ranges[-1].last == slot - 1:
                ranges[-1] = SlotRange(ranges[-1].first, slot, node.name, node.name)
            else:
                ranges.append(SlotRange(slot, slot, node.name, node.name))
        shown = ", ".join(str(r.first) if r.count == 1 else f"{r.first}-{r.last}" for r in ranges)
        rows.append({"name": node.name, "address": str(node.address), "index": index, "slots": len(slots),
                     "ranges": shown})
    if _as_json(obj, as_json):
        click.echo(json.dumps({"epoch": cluster_map.epoch, "slots": cluster_map.slots, "tls": cluster_map.tls,
                               "nodes": rows}))
        return
    from rich.console import Console
    from rich.table import Table

    over = ", TLS ports" if cluster_map.tls else ""
    table = Table(title=f"cluster map: {cluster_map.slots} slots{over}, epoch {cluster_map.epoch}")
    for column in ("node", "address", "index", "slots", "slot ranges"):
        table.add_column(column, justify="right" if column in ("index", "slots") else "left")
    for row in rows:
        table.add_row(row["name"], row["address"], str(row["index"]), f"{row['slots']:,}", row["ranges"])
    Console().print(table)


# ------------------------------------------------------------ status


@cluster.command("status")
@click.option("--url", "url", metavar="kw://[USER:TOKEN@]HOST:PORT,HOST:PORT,...",
              help="Any nodes of the cluster (the map is asked of them); default: the global --url or "
              "$KITTIWAKE_URL. Credentials found there are used for every node.")
@click.option("--cluster", "cluster_file", metavar="FILE",
              help="The cluster file: ask every node it names (over TLS when it says tls = true, verified "
              "against $KITTIWAKE_CA or the system's CAs).")
@click.option("--timeout", default=2.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Seconds to wait for each node.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_obj
def status(obj: CliContext | None, url: str | None, cluster_file: str | None, timeout: float, as_json: bool) -> None:
    """Show every node: up or down, the epoch it serves, its slots, tasks and rates, and the load deviation.

    Tasks are the sum of the sizes of the node's queues (dead letters and delayed entries included);
    rates are 1-minute enqueue and dequeue rates summed over its queues. The load deviation is how far
    the worst node's tasks lie from the mean of the nodes up, in percent of the mean. Exit status 1
    when a node is down or the nodes do not all serve the map's epoch.
    """
    from kittiwake.cluster import status as cluster_status
    from kittiwake.client.url import URL_ENV

    if url is None and cluster_file is None:
        url = (obj.url if obj is not None else None) or os.environ.get(URL_ENV)
        if not url:
            raise click.UsageError("give --url kw://host:port,... or --cluster FILE")
    try:
        scheme, credentials, addresses = cluster_status.node_urls(url) if url else ("kw", "", [])
    except errors.BadRequest as exc:
        raise click.BadParameter(exc.message, param_hint="--url") from None
    if not credentials.partition("?")[0]:
        credentials = _env_credentials(URL_ENV) + credentials
    probe = cluster_status.probe_with_client(timeout)

    def url_for(address: str) -> str:
        return cluster_status.url_of(scheme, credentials, address)

    cluster_map = _read_map(cluster_file, "--cluster") if cluster_file else None
    if cluster_map is not None and cluster_map.tls and url is None:
        scheme = "kws"  # the map's addresses are TLS ports: verified against $KITTIWAKE_CA or the system's CAs
    if cluster_map is None:
        for address in addresses:  # the first node that answers as a node gives the map
            try:
                _, found, _ = probe(url_for(address), address)
            except (errors.KittiwakeError, OSError):
                continue
            cluster_map = cluster_status.cluster_from_answer(found)
            if cluster_map is not None:
                break
    if cluster_map is not None:
        members = [(node.name, str(node.address)) for node in cluster_map.nodes]
    else:
        members = [(address, address) for address in addresses]
    nodes = cluster_status.gather(members, cluster_map, url_for, probe)
    report = cluster_status.summarize(nodes, cluster_map.epoch if cluster_map is not None else None)
    if _as_json(obj, as_json):
        click.echo(json.dumps(report.to_json()))
    else:
        _show_status(report)
    if not report.healthy:
        sys.exit(1)


def _env_credentials(variable: str) -> str:
    """`user:token@` of the URL in $`variable` (a node or cluster URL), or ""."""
    text = os.environ.get(variable, "")
    rest = text.partition("://")[2].partition("?")[0]
    userinfo, at, _ = rest.rpartition("@")
    return userinfo + at if userinfo else ""


def _show_status(report: ClusterStatus) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"cluster epoch {report.epoch or '?'}: load deviation {report.load_deviation:.1f}%")
    columns = ("node", "address", "up", "epoch", "slots", "tasks", "available", "leased", "enqueue/s", "dequeue/s")
    for column in columns:
        table.add_column(column, justify="left" if column in ("node", "address", "epoch") else "right")
    for node in report.nodes:
        epoch = node.epoch if node.epoch is not None else ("not a node" if node.up else "-")
        table.add_row(
            node.name, node.address, "up" if node.up else "[red]down[/red]", epoch,
            "-" if node.slots is None else f"{node.slots:,}",
            *([f"{node.tasks:,}", f"{node.available:,}", f"{node.leased:,}",
               f"{node.enqueue_per_s:,.1f}", f"{node.dequeue_per_s:,.1f}"] if node.up else ["-"] * 5),
        )
    console = Console()
    console.print(table)
    for note in report.notes:
        console.print(note)
    for node in report.nodes:
        if node.error:
            console.print(f"{node.name}: {node.error}")


# ------------------------------------------------------------ grow


@cluster.command("grow")
@click.option("--from", "old_file", required=True, metavar="OLD.toml", help="The cluster file the nodes serve now.")
@click.option("--to", "new_file", required=True, metavar="NEW.toml",
              help="The cluster file to grow to: the old one with nodes appended to [nodes].")
@click.option("--store", "stores", multiple=True, required=True, metavar="NAME=STORE", help=_STORE_HELP)
@click.option("--batch", default=500, show_default=True, type=click.IntRange(min=1),
              help="Tasks moved per pair of transactions (written on the new node, then deleted from the old).")
@click.option("--json", "as_json", is_flag=True, help="Print what moved as one JSON document, no progress bars.")
@click.pass_obj
def grow(obj: CliContext | None, old_file: str, new_file: str, stores: tuple[str, ...], batch: int,
         as_json: bool) -> None:
    """Move every task whose owner changes under NEW.toml to its new node, with every node stopped.

    Run it with every node of the cluster stopped (a store a broker serves is refused); then start
    every node with NEW.toml. Tasks move with all their attributes, DAG edges, dead letters, delayed
    entries and named groups whole (join tokens included); a leased task keeps its lease only where
    the new map still routes that lease to it (a named group's queue), else it is moved available and
    will be delivered again. Each batch is committed on the new node before it is deleted from the
    old, so an interrupted run loses nothing, and running it again finishes the move (a task already
    on its new node is not written twice; another task under its queue and pid there stops the move,
    naming it). Every --store of a node of OLD.toml must exist (a path that does not is an error, never
    created). Stores that record a node identity get the new epoch; a node whose store holds tasks
    refuses to start on NEW.toml until this has run.
    """
    from kittiwake.cluster.grow import GrowError
    from kittiwake.cluster.grow import grow as run_grow

    old_map = _read_map(old_file, "--from")
    new_map = _read_map(new_file, "--to")
    locations = _store_locations(stores)
    quiet = _as_json(obj, as_json)
    try:
        if quiet:
            report = run_grow(old_map, new_map, locations, batch=batch)
        else:
            report = _grow_with_bars(old_map, new_map, locations, batch)
    except (GrowError, errors.BadRequest, errors.StorageFailure, OSError) as exc:
        what = exc.message if isinstance(exc, errors.KittiwakeError) else exc
        click.echo(f"kittiwake cluster grow: {what}", err=True)
        sys.exit(1)
    if quiet:
        click.echo(json.dumps(_grow_json(old_map, new_map, report)))
    else:
        _show_grow(old_map, new_map, report)


def _store_locations(stores: tuple[str, ...]) -> dict[str, StoreLocation]:
    from kittiwake.store.location import SQLITE_PREFIX, parse_store_url

    locations: dict[str, StoreLocation] = {}
    for item in stores:
        name, sep, where = item.partition("=")
        if not sep or not name or not where:
            raise click.BadParameter(f"{item!r}: write NAME=STORE", param_hint="--store")
        if name in locations:
            raise click.BadParameter(f"node {name!r} is given twice", param_hint="--store")
        url = where if "://" in where else SQLITE_PREFIX + where  # a bare directory, as `broker --data`
        try:
            locations[name] = parse_store_url(url)
        except ValueError as exc:
            raise click.BadParameter(f"{item!r}: {exc}", param_hint="--store") from None
    return locations


def _grow_with_bars(old_map: ClusterMap, new_map: ClusterMap, locations: dict[str, StoreLocation],
                    batch: int) -> GrowReport:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from kittiwake.cluster.grow import grow as run_grow

    bars = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[moved]} moved"))
    ids: dict[str, Any] = {}

    class Bars:
        def started(self, node: str, tasks: int) -> None:
            if not bars.live.is_started:
                bars.start()
            ids[node] = bars.add_task(f"node {node}", total=tasks, moved=0)

        def advanced(self, node: str, looked_at: int, moved: int) -> None:
            bars.update(ids[node], completed=looked_at, moved=moved)

    try:
        return run_grow(old_map, new_map, locations, batch=batch, progress=Bars())
    finally:
        if bars.live.is_started:
            bars.stop()


def _grow_json(old_map: ClusterMap, new_map: ClusterMap, report: GrowReport) -> dict[str, Any]:
    return {
        "from_epoch": old_map.epoch,
        "to_epoch": new_map.epoch,
        "moved": report.total_moved,
        "by_node": [{"from": source, "to": target, "tasks": count}
                    for (source, target), count in sorted(report.moved.items())],
        "by_range": report.by_range,
        "already_there": report.already_there,
        "leases_kept": report.leases_kept,
        "leases_dropped": report.leases_dropped,
        "edges_moved": report.edges_moved,
        "edges_split": report.edges_split,
        "tasks_before": report.tasks_before,
        "tasks_after": report.tasks_after,
        "epochs_recorded": report.epochs_recorded,
    }


def _show_grow(old_map: ClusterMap, new_map: ClusterMap, report: GrowReport) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:
        console = Console(width=max(console.width, 120))
    console.print(f"epoch {old_map.epoch} → {new_map.epoch}: moved {report.total_moved:,} task(s)")
    if report.moved:
        by_node = Table(title="tasks moved by node")
        for column in ("from", "to", "tasks"):
            by_node.add_column(column, justify="right" if column == "tasks" else "left")
        for (source, target), count in sorted(report.moved.items()):
            by_node.add_row(source, target, f"{count:,}")
        console.print(by_node)
        by_range = Table(title="tasks moved by slot range")
        by_range.add_column("why")
        by_range.add_column("tasks", justify="right")
        for label, count in sorted(report.by_range.items()):
            by_range.add_row(label, f"{count:,}")
        console.print(by_range)
    lines = [f"tasks in all stores: {report.tasks_before:,} before, {report.tasks_after:,} after"]
    if report.already_there:
        lines.append(f"{report.already_there:,} task(s) were on their new node already (an interrupted run)")
    if report.leases_kept or report.leases_dropped:
        lines.append(f"leases: {report.leases_kept:,} kept, {report.leases_dropped:,} dropped (delivered again)")
    if report.edges_moved:
        lines.append(f"DAG edges moved: {report.edges_moved:,}")
    if report.edges_split:
        lines.append(f"warning: {report.edges_split:,} DAG edge(s) now join tasks on different nodes "
                     "(give a DAG's pids one routing tag)")
    recorded = ", ".join(report.epochs_recorded)
    lines.append(f"new epoch recorded in the stores of: {recorded}" if recorded
                 else "no store records a node identity: nothing to record")
    lines.append(f"now start every node with the new cluster file (epoch {new_map.epoch})")
    for line in lines:
        console.print(line)
