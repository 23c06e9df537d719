"""`kittiwake demo`: start a broker on the embedded store and run a real pipeline end to end."""

from __future__ import annotations

import sys

import click


@click.command("demo")
@click.option("--documents", default=2000, show_default=True, type=click.IntRange(1, 1_000_000),
              help="How many generated documents go through fetch → extract → index.")
@click.option("--workers", "workers_per_stage", default=2, show_default=True, type=click.IntRange(1, 64),
              help="Worker processes per stage.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def demo(documents: int, workers_per_stage: int, as_json: bool) -> None:
    """Run a fetch → extract → index document pipeline on a fresh broker.

    Starts a broker on a throwaway data directory (unless the global --url is
    given on the command line; KITTIWAKE_URL alone does not count), feeds
    it a generated corpus, runs a pool of worker processes per stage that lease
    tasks and atomically dequeue-and-enqueue them into the next stage, then
    prints per-queue statistics and stops the broker.
    """
    from kittiwake.demo.pipeline import main

    root = click.get_current_context().find_root()
    explicit = root.get_parameter_source("url") is click.core.ParameterSource.COMMANDLINE
    demo_url = root.params.get("url") if explicit else None
    sys.exit(main(documents, workers_per_stage, demo_url, as_json or bool(root.params.get("as_json"))))
