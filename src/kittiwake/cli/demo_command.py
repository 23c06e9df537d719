"""`kittiwake demo`: the main job — a data pipeline on Spark through a fresh broker, checked.

`kittiwake demo` runs `kittiwake.demo.main_job`; `kittiwake demo --classic`
runs the broker-only document pipeline of `kittiwake.demo.documents`
(fetch → extract → index by worker pools handing tasks on with atomic
updates).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from kittiwake.demo.dataset import parse_size


def _size(ctx: click.Context, param: click.Parameter, value: str) -> int:
    from kittiwake.errors import BadRequest

    try:
        return parse_size(value)
    except BadRequest as error:
        raise click.BadParameter(error.message) from None


@click.command("demo")
@click.option("--size", default="300MB", show_default=True, callback=_size, metavar="SIZE",
              help="How much event log to generate (B, kB, MB, GB; decimal units).")
@click.option("--shards", type=click.IntRange(1, 10_000), default=None,
              help="Files the log is sharded into (one Spark job per shard and step). Default: one per ~50 MB, at least 2.")
@click.option("--check-shards", type=click.IntRange(1, 10_000), default=2, show_default=True,
              help="Shards whose figures are recomputed in plain Python and compared (all of them when more).")
@click.option("--keep", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Work in this folder and keep it: the dataset, the run's Parquet, the logs, the broker's data.")
@click.option("--seed", type=int, default=2025, show_default=True, help="Seed of the generated dataset.")
@click.option("--classic", is_flag=True,
              help="Run the broker-only document pipeline (fetch → extract → index) instead.")
@click.option("--documents", default=2000, show_default=True, type=click.IntRange(1, 1_000_000),
              help="With --classic: generated documents going through fetch → extract → index.")
@click.option("--workers", "workers_per_stage", default=2, show_default=True, type=click.IntRange(1, 64),
              help="With --classic: worker processes per stage.")
@click.option("--spark-master", default="local[2]", show_default=True, metavar="MASTER",
              help="The spark-worker's master, e.g. spark://HOST:7077 (its executors must see the demo's folder).")
@click.option("--rerun", is_flag=True,
              help="Then change one shard and run the flow again: only that shard's jobs and the report run, "
              "every other job reuses the first run's outputs; the second report is checked too.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (no live tables).")
def demo(size: int, shards: int | None, check_shards: int, keep: Path | None, seed: int, classic: bool,
         documents: int, workers_per_stage: int, spark_master: str, rerun: bool, as_json: bool) -> None:
    """Run the main job: event logs cleaned, joined and reported on Spark, step by step through a broker.

    Starts a broker on a throwaway data directory (unless the global --url is given on the
    command line; KITTIWAKE_URL alone does not count), a spark-worker (one SparkSession,
    local[2] or --spark-master) and a python worker; generates --size of event logs and a user table; runs the
    flow of kittiwake.demo.shop_flow (split into shards → clean on Spark → join each shard's
    clean events with its users → merge → report) with live progress per step; prints the
    report, the run's figures and the broker's statistics; and checks the report against plain
    Python on a sample of shards. Exits 1 if the run fails or the check finds a difference.
    """
    root = click.get_current_context().find_root()
    explicit = root.get_parameter_source("url") is click.core.ParameterSource.COMMANDLINE
    demo_url = root.params.get("url") if explicit else None
    as_json = as_json or bool(root.params.get("as_json"))
    if classic:
        from kittiwake.demo.documents import main as classic_main

        sys.exit(classic_main(documents, workers_per_stage, demo_url, as_json))
    from kittiwake.demo.main_job import DemoSettings, main

    settings = DemoSettings(size_bytes=size, shards=shards, check_shards=check_shards, url=demo_url, keep=keep,
                            seed=seed, spark_master=spark_master, rerun=rerun)
    sys.exit(main(settings, as_json))
