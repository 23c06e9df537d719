"""The benchmarks of other systems: a distribution of their own, found through entry points.

`kittiwake bench` measures this broker on the user's disk with what the wheel ships (`ops`,
`latency`, `scale`, `producer`, `udp`, `cluster`). The benchmarks that run other systems beside it
or take a user's whole path through Spark, Celery or SQS clients (`tasks`, `peers`, `workers`,
`flows`, `mapreduce`, `sqs`, `celery`, `dashboard`) are the `kittiwake-benchmarks` distribution
(`benchmarks/` in the repository, package `kittiwake_benchmarks`), which depends on the extras
they need. It plugs in from above, as kombu's transports do: each of its click commands is an
entry point of the group `kittiwake.bench` (`installed_commands`), and a figure of the broker's
own benchmarks that needs another system (`producer`'s Huey reference) an entry point of
`kittiwake.bench.references` (`reference`). Where it is not installed, a command of its names
says how to install it (`not_installed_command`) instead of click's "No such command".
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib.metadata import EntryPoint, entry_points
from typing import Any

import click

COMMANDS_GROUP = "kittiwake.bench"  # each entry point names a click command of `kittiwake bench`
REFERENCES_GROUP = "kittiwake.bench.references"  # each names a function measuring another system
DISTRIBUTION = "kittiwake-benchmarks"
# The commands the distribution provides: named here so that, without it, they say where they went.
DISTRIBUTION_COMMANDS = ("tasks", "peers", "celery", "workers", "flows", "mapreduce", "sqs", "dashboard")
INSTALL_HINT = (f"it is part of the {DISTRIBUTION} distribution, not installed here. From a checkout of "
                "Kittiwake: `make setup`, or `pip install -e ./benchmarks` (it installs "
                "kittiwake[spark,peers,sqs,kombu] with it).")


def installed_commands(points: Iterable[EntryPoint] | None = None) -> dict[str, EntryPoint]:
    """The entry points of `COMMANDS_GROUP` by name: of `points`, or of this environment when None."""
    found = entry_points(group=COMMANDS_GROUP) if points is None else points
    return {point.name: point for point in found}


def not_installed_command(name: str, reason: str | None = None) -> click.Command:
    """A command standing for `name` of the distribution: whatever it is given, it says how to install
    the distribution (and `reason`, when loading its entry point failed) and exits with status 1."""

    def explain() -> None:
        cause = f" (loading it failed: {reason})" if reason else ""
        raise click.ClickException(f"`kittiwake bench {name}`: {INSTALL_HINT}{cause}")

    return click.Command(
        name, callback=explain,
        help=f"Not installed: part of the {DISTRIBUTION} distribution (pip install -e ./benchmarks).",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
        add_help_option=False,
    )


def load_command(name: str, points: dict[str, EntryPoint]) -> click.Command | None:
    """The command `name` of `points`; a `not_installed_command` for a distribution's name that is
    missing or fails to load; None for a name nobody provides."""
    point = points.get(name)
    if point is not None:
        try:
            command = point.load()
        except ImportError as exc:  # installed, but a dependency of it is not
            return not_installed_command(name, f"{type(exc).__name__}: {exc}")
        if not isinstance(command, click.Command):
            raise TypeError(f"entry point {point.value} of {COMMANDS_GROUP} is not a click command: {command!r}")
        return command
    if name in DISTRIBUTION_COMMANDS:
        return not_installed_command(name)
    return None


def reference(name: str) -> Any | None:
    """The function the entry point `name` of `REFERENCES_GROUP` names, or None where none is installed."""
    for point in entry_points(group=REFERENCES_GROUP, name=name):
        try:
            return point.load()
        except ImportError:
            return None
    return None
