"""`kittiwake bench`: the group that gathers the benchmarks' commands, each on fresh brokers.

The broker's own benchmarks ship in the wheel and measure this broker on this disk: `ops`
(TaskMaster §6 Table 1 and bulk operations), `latency` (idle round trips against Fabriq and the
disk's fsync), `scale` (a big queue, many queues, memory, restart, and a cold restart over 10M
tasks written straight to disk), `producer` (one thread through a batching producer, against
`Client.enqueue` and Huey's single enqueue, and the producer's added latency), `udp` (kwu://
through a lossy relay) and `cluster` (one broker against cluster nodes). Their commands are
`kittiwake.bench.commands` and `kittiwake.bench.cluster`.

The benchmarks of other systems and of a user's whole path (`tasks`, `peers`, `celery`,
`workers`, `flows`, `mapreduce`, `sqs`, `dashboard`) are the `kittiwake-benchmarks` distribution
(`benchmarks/` in the repository); its commands join the group through the entry points of
`kittiwake.bench` (`kittiwake.bench.distribution`), and where it is not installed each of those
names says how to install it. Each command prints a table, and with `--json FILE` writes the report
documented in `kittiwake.bench.report`.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib.metadata import EntryPoint
from typing import Any

import click

from kittiwake.bench import distribution
from kittiwake.bench.cluster import cluster_command
from kittiwake.bench.commands import latency_command, ops_command, producer_command, scale_command, udp_command

BUILT_IN = (ops_command, latency_command, scale_command, producer_command, udp_command, cluster_command)


class BenchGroup(click.Group):
    """The built-in commands, then those of the `kittiwake.bench` entry points (all of this
    environment's, or `entry_points` when given), then the install hint for a distribution's name."""

    def __init__(self, *args: Any, entry_points: Iterable[EntryPoint] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._given = None if entry_points is None else tuple(entry_points)
        self._installed: dict[str, EntryPoint] | None = None

    def installed(self) -> dict[str, EntryPoint]:
        if self._installed is None:
            self._installed = {name: point for name, point in distribution.installed_commands(self._given).items()
                               if name not in self.commands}
        return self._installed

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.installed()})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.commands:
            return self.commands[name]
        return distribution.load_command(name, self.installed())


def make_bench(entry_points: Iterable[EntryPoint] | None = None) -> BenchGroup:
    """The `bench` group over `entry_points` (None: this environment's)."""

    group = BenchGroup("bench", entry_points=entry_points, help=(
        "Measure the broker: ops, latency, scale, producer, udp, cluster; and, with the kittiwake-benchmarks "
        "distribution, tasks, peers, celery, workers, flows, mapreduce, sqs, dashboard (each on fresh brokers)."))
    for command in BUILT_IN:
        group.add_command(command)
    return group


bench = make_bench()
