"""`kittiwake gen-data`: write the input of a MapReduce app (a word corpus or TeraSort records) from a seed.

The data and its layout are `kittiwake.mapreduce.gen_data`'s; this module parses the
options, shows a progress bar of bytes written and prints what was written.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from kittiwake.byte_sizes import parse_byte_size
from kittiwake.errors import BadRequest


def _size(ctx: click.Context, param: click.Parameter, value: str) -> int:
    try:
        return parse_byte_size(value)
    except BadRequest as error:
        raise click.BadParameter(error.message) from None


@click.command("gen-data")
@click.option("--kind", type=click.Choice(["text", "records"]), required=True,
              help="text: lines of Zipf-distributed words (part-NNNNN.txt); records: gensort's 100-byte "
              "TeraSort records (part-NNNNN.bin).")
@click.option("--size", required=True, callback=_size, metavar="SIZE",
              help="How much to write in all: B, kB, MB, GB in decimal units (1 MB = 1,000,000 bytes), "
              "case-insensitive, or a plain number of bytes.")
@click.option("--partition-size", required=True, callback=_size, metavar="SIZE",
              help="Bytes per file (same units), at most --size. Text files end after the line that reaches "
              "it; record files hold whole records.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory to write into, new or empty; _manifest.json there lists the files.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="The same kind, sizes and seed write byte-identical files.")
def gen_data(kind: str, size: int, partition_size: int, out_dir: Path, seed: int) -> None:
    """Write deterministic input data for the MapReduce apps into --out, in partition files."""
    try:
        from kittiwake.mapreduce import gen_data as generation
    except ModuleNotFoundError as error:
        if error.name != "numpy":
            raise
        raise click.ClickException("gen-data needs numpy: pip install 'kittiwake[mapreduce]'") from None
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    try:
        plan = generation.plan(kind, size, partition_size, seed)
    except BadRequest as error:
        raise click.BadParameter(error.message, param_hint="'--partition-size'") from None
    total = sum(plan.target_bytes(index) for index in range(plan.partitions))
    started = time.perf_counter()
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  TimeRemainingColumn(), console=Console(stderr=True), transient=True) as progress:
        bar = progress.add_task(f"{kind} → {out_dir}", total=total)
        manifest = generation.write(plan, out_dir, lambda written: progress.update(bar, completed=written))
    elapsed_secs = time.perf_counter() - started
    written = manifest["bytes_written"]
    rate = written / elapsed_secs / 1e6 if elapsed_secs > 0 else 0.0
    click.echo(f"wrote {manifest['partitions']} {kind} files, {written:,} bytes, to {out_dir} in "
               f"{elapsed_secs:.2f} s ({rate:.1f} MB/s); see {out_dir / generation.MANIFEST_NAME}")
