"""`kittiwake mapreduce`: run wordcount, grep or sort over a directory of part files on the broker's workers.

The job is `kittiwake.mapreduce.driver.run_native`'s; this module parses the
options, shows a progress bar of finished tasks and prints what the job did
(or `--json`). Workers must be running: ``kittiwake worker
kittiwake.mapreduce.tasks:app [--node NAME]``.
"""

from __future__ import annotations

from pathlib import Path

import click

from kittiwake.cli.context import CliContext, pass_cli
from kittiwake.cli.output import print_json
from kittiwake.errors import KittiwakeError


@click.command("mapreduce")
@click.argument("app_name", metavar="APP", type=click.Choice(["wordcount", "grep", "sort"]))
@click.argument("input_dir", metavar="INPUT", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.argument("out_dir", metavar="OUT", type=click.Path(file_okay=False, path_type=Path))
@click.option("--reducers", type=click.IntRange(1, 1024), default=4, show_default=True,
              help="Reduce tasks, each writing one part-r-NNNNN file (key ranges: the files in order are sorted).")
@click.option("--pattern", help="grep: the literal to look for (one line, at most 1 KiB).")
@click.option("--nodes", default="", metavar="N1,N2",
              help="Node names to spread the map tasks over, round robin (workers started with --node NAME "
              "run their own first and steal when idle). Default: any worker.")
@click.option("--spill-mb", type=click.FloatRange(min=0.001), default=64.0, show_default=True,
              help="A map's buffered output past this many MB spills to disk.")
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Where spilled intermediates go (default: the temporary directory); small ones live in "
              "/dev/shm. Workers on other machines need both on a shared file system.")
@click.option("--timeout", "timeout_secs", type=click.FloatRange(min=1), default=3600.0, show_default=True,
              help="Give up waiting after this many seconds.")
@pass_cli
def mapreduce(cli: CliContext, app_name: str, input_dir: Path, out_dir: Path, reducers: int, pattern: str | None,
              nodes: str, spill_mb: float, work_dir: Path | None, timeout_secs: float) -> None:
    """Run APP (wordcount, grep, sort) over INPUT's part-* files into OUT (new or empty)."""
    try:
        from kittiwake.mapreduce.driver import run_native
    except ModuleNotFoundError as error:
        raise click.ClickException(f"mapreduce needs {error.name}: pip install 'kittiwake[mapreduce]'") from None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if app_name == "grep" and not pattern:
        raise click.UsageError("grep needs --pattern")
    if app_name != "grep" and pattern:
        raise click.UsageError(f"--pattern is grep's; {app_name} takes none")
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as progress:
        bar = progress.add_task(f"{app_name} {input_dir} → {out_dir}", total=None)
        try:
            run = run_native(cli.url, app_name, input_dir, out_dir, reducers=reducers, pattern=pattern,
                             nodes=[node for node in nodes.split(",") if node], spill_bytes=int(spill_mb * 1e6),
                             work_dir=work_dir, timeout=timeout_secs,
                             progress=lambda done, total: progress.update(bar, completed=done, total=total))
        except KittiwakeError as error:
            raise click.ClickException(str(error)) from None
        except TimeoutError:
            raise click.ClickException(f"the job did not finish in {timeout_secs:g} s") from None
    if cli.json:
        print_json(run.as_dict())
        return
    click.echo(f"{app_name}: {run.input_bytes:,} bytes in {run.maps} maps and {run.reducers} reduces, "
               f"{run.seconds:.2f} s ({run.mb_s:.1f} MB/s); {run.output_bytes:,} bytes written to {out_dir}")
    click.echo(f"maps: {run.local_maps} on their node, {run.stolen_maps} stolen, {run.spilled_maps} spilled; "
               f"tasks' own run time {run.busy_seconds:.2f} s")
