"""The main job's flow: a shop's event logs cleaned, joined and reported on Spark, step by step.

    shards (python, split) ──► clean (spark) ──────┐
            │                                      ├─► enrich (spark) ──► report (spark, merge)
            └───────────────► users (python) ──────┘

* `shards` reads the dataset's manifest and emits one token per shard (a
  split: keys ``<run>/00000000``, ``<run>/00000001``, …), inline: the shard's
  paths, its user range and each file's size and modification time (so a
  changed file changes the token, and with it the fingerprint of the jobs
  that read it);
* `clean` reads a shard's raw CSV, keeps the well-formed rows, normalises
  them and drops replays (`transforms.clean`), and returns them. It is fused
  into `enrich`'s plan (``fuse="plan"``, `kittiwake.flow.plan_fusion`): its
  job only hands `enrich` a recipe, and each `enrich` job reads the CSV,
  cleans and joins in one Spark query — no clean Parquet written and read
  back, one query's fixed cost instead of two (measured with `kittiwake
  bench flows`; caching the clean rows for `enrich`, ``fuse="cache"``, costs
  more than it saves);
* `users`, on a python worker, cuts the user table down to the shard's users
  (the log is sharded by user) with pyarrow;
* `enrich` is where two inputs meet: the broker's join starts it once the
  clean events AND the users of the same shard (same key) are there. It joins
  them and returns the shard's figures (`transforms.figures`), written by the
  worker;
* `report` merges the whole sequence — the broker starts it when every
  shard's figures arrived, the last one flagged final — sums the figures
  (`transforms.combine`), writes them as Parquet and returns the printed
  report's rows inline (`summary`).

Every step is deterministic and says so (``reuse=True`` for the flow): a
second run reuses every job whose inputs did not change
(`kittiwake.flow.reuse`) — change one shard and only that shard's chain and
the report run again (`kittiwake demo --rerun`).

Each step notes when it was entered and when its outputs were written
(`StepClock`; a Spark step's DataFrames are written by the worker after the
function returns: `StepContext.when_written`) in
``<data_dir>/<run>/_timings/``, which `kittiwake bench flows` reads to say
where the time goes. `kittiwake spark-worker kittiwake.demo.shop_flow` and
`kittiwake worker kittiwake.demo.shop_flow` run it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from kittiwake.flow import Dataset, Flow, StepContext, current_step, merge

FLOW_NAME = "shop"
TIMINGS_DIR = "_timings"
LEASE_SECS = 120.0  # a Spark job of a big shard runs for a while; the lease is renewed anyway

USERS_SCHEMA = "user_id BIGINT, country STRING, plan STRING"  # what `users` writes, as DDL

flow = Flow(FLOW_NAME, lease_secs=LEASE_SECS, max_attempts=3, reuse=True)


class StepClock:
    """Notes when a step's function was entered and when its outputs were written (the function
    left, for one that writes them itself; `lazy`: once the worker wrote the DataFrames it returned),
    in the run's `_timings` folder."""

    def __init__(self, context: StepContext, *, lazy: bool = False) -> None:
        self.context = context
        self.entered = time.time()
        self.lazy = lazy

    def __enter__(self) -> StepClock:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is not None:
            return
        if self.lazy:
            self.context.when_written(self.note)
        else:
            self.note()

    def note(self) -> None:
        context = self.context
        folder = Path(context.data_dir, context.run, TIMINGS_DIR)
        folder.mkdir(parents=True, exist_ok=True)
        name = ".".join([context.step, *(f"{index:08d}" for index in context.indices)]) or context.step
        record = {"step": context.step, "key": context.key, "entered": self.entered, "left": time.time(),
                  "attempt": context.attempt, "pid": os.getpid(), "fused_into": context.extra.get("fused_into")}
        temporary = folder / f".{name}.json.tmp"
        temporary.write_text(json.dumps(record))
        temporary.replace(folder / f"{name}.json")


def jobs_per_step(shards: int) -> dict[str, int]:
    """How many jobs each step runs for a dataset of `shards` shards."""
    return {"shards": 1, "clean": shards, "users": shards, "enrich": shards, "report": 1}


def read_timings(data_dir: str | Path, run: str) -> list[dict[str, Any]]:
    """Every step's entry and exit of one run, as `StepClock` wrote them."""
    folder = Path(data_dir, run, TIMINGS_DIR)
    return [json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))]


@flow.step(inputs={"dataset": flow.input("dataset")}, split=True)
def shards(ctx: StepContext, dataset: Dataset) -> list[Dataset]:
    """One token per shard of the dataset (its manifest lists them)."""
    from kittiwake.demo.dataset import Manifest

    with StepClock(ctx):
        manifest = Manifest.load(dataset.local_path)
        return [Dataset.inline({"index": shard.index, "path": shard.path, "user_start": shard.user_start,
                                 "user_end": shard.user_end, "users_path": manifest.users_path,
                                 "version": _file_version(shard.path), "users_version": _file_version(manifest.users_path)})
                for shard in manifest.shards]


def _file_version(path: str) -> list[int]:
    """[size, modification time ns] of a file the token names, so that the token changes with it."""
    info = os.stat(path)
    return [info.st_size, info.st_mtime_ns]


@flow.step(engine="spark", inputs={"shard": shards}, fuse="plan")
def clean(spark: Any, shard: dict[str, Any]) -> Any:
    """The shard's well-formed rows, normalised and without replays (built into `enrich`'s query)."""
    from kittiwake.demo import transforms

    with StepClock(current_step(), lazy=True):
        return transforms.clean(transforms.read_events(spark, shard["path"]))


@flow.step(inputs={"shard": shards})
def users(ctx: StepContext, shard: Dataset) -> Dataset:
    """The users of the shard (user ids within its range), as Parquet, with pyarrow."""
    import pyarrow.parquet as parquet

    with StepClock(ctx):
        spec = shard.value
        table = parquet.read_table(spec["users_path"], columns=["user_id", "country", "plan"],
                                   filters=[("user_id", ">=", spec["user_start"]), ("user_id", "<", spec["user_end"])])
        folder = Path(ctx.output_path())
        folder.mkdir(parents=True, exist_ok=True)
        parquet.write_table(table, folder / "part-00000.parquet")
    return Dataset.parquet(str(folder), schema=USERS_SCHEMA)


@flow.step(engine="spark", inputs={"events": clean, "users": users})
def enrich(spark: Any, events: Any, users: Any) -> Any:
    """The shard's clean events joined with its users, summed into the shard's figures."""
    from kittiwake.demo import transforms

    with StepClock(current_step(), lazy=True):
        return transforms.figures(transforms.enrich(events, users))


@flow.step(engine="spark", inputs={"parts": merge(enrich)}, outputs=("figures", "summary"))
def report(spark: Any, parts: Any) -> dict[str, Any]:
    """Every shard's figures summed (Parquet) and the printed report's rows (inline)."""
    from kittiwake.demo import transforms

    context = current_step()
    with StepClock(context):
        path = context.output_path("figures")
        transforms.combine(parts).write.mode("overwrite").parquet(path)
        summary = transforms.report_rows(spark.read.parquet(path))
    return {"figures": Dataset.parquet(path), "summary": Dataset.inline(summary)}
