"""The options and the ending every `kittiwake bench` command shares.

`durability_option` (`--durability`), `output_options` (`--json`, `--plot`, `--dir`), `name_list`
(a NAME,NAME option among choices), `make_console` (a terminal's width, or room for a whole table in a
log) and `finish` (the JSON report and the latency CDF). The broker's own benchmarks
(`kittiwake.bench.commands`, `kittiwake.bench.cluster`) and those of the benchmarks distribution
declare their commands with them, so every command speaks alike.

This module imports nothing of the benchmarks' runs, so `kittiwake bench --help` stays light.
"""

from __future__ import annotations

from typing import Any, Callable

import click

from kittiwake.bench.settings import DURABILITIES, DURABILITY


def durability_option(function: Any) -> Any:
    """`--durability`, the broker's, fsync by default."""
    return click.option("--durability", type=click.Choice(DURABILITIES), default=DURABILITY, show_default=True,
                        help="fsync: ok means on disk (default); os: ok means handed to the OS.")(function)


def output_options(function: Any) -> Any:
    """`--json FILE`, `--plot FILE` (a latency CDF) and `--dir` (where the throwaway directory goes)."""
    function = click.option("--dir", "parent_dir", type=click.Path(file_okay=False), default=None,
                            help="Where to create the broker's throwaway directory (default: the system temp dir).")(function)
    function = click.option("--plot", type=click.Path(dir_okay=False), default=None,
                            help="Write a latency CDF (PNG) here; needs matplotlib. Default: next to --json.")(function)
    function = click.option("--json", "json_path", type=click.Path(dir_okay=False, allow_dash=True), default=None,
                            help="Write the report as JSON to FILE ('-' for stdout).")(function)
    return function


def finish(console: Any, report: dict[str, Any], measured: dict[str, Any], title: str,
           json_path: str | None, plot: str | None) -> None:
    """Write the report to `json_path` and the latency CDF of `measured` to `--plot` (or beside the JSON)."""
    from kittiwake.bench.report import plot_path, write_cdf_plot, write_json

    if json_path:
        write_json(json_path, report)
    target = plot_path(plot, json_path)
    if write_cdf_plot(target, title, measured):
        console.print(f"[dim]latency CDF written to {target}")


def make_console() -> Any:
    """A rich console; off a terminal (a log file, a pipe) one wide enough for the whole table."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal:  # a log file or a pipe: room for the whole table
        console = Console(width=max(console.width, 160))
    return console


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


