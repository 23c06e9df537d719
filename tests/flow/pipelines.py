"""Flows the flow tests run: imported by the tests and by `kittiwake spark-worker flow.pipelines:…`.

* `sales`: a folder of CSV files split into one token per file (python), each
  cleaned on Spark, merged back into one total per region (Spark).
* `tiny`: the same shape with python steps only (fast: no Spark), for the
  engine's bookkeeping — interleaved runs, garbage collection, failures.
* `hints`: a three-input step with one optional input fed by a step that
  emits on that port for some items only.
* `chain`: CSV files split per file (python), each tidied and summed on Spark
  (two Spark steps at one key), the sums merged into a report; every step
  declares itself deterministic (``reuse=True`` for the flow). `fused`: the
  same steps in a flow that fuses through the cache (``fuse=True``);
  `planned`: the same, reused, with `tidy` fused into `sums`' plan
  (``fuse="plan"``); `all_planned`: every Spark step fused into its
  consumer's plan (``Flow(fuse="plan")``: tidy and sums are built in report's
  query).
* `once`: one Spark step, reused, allowed a single attempt: a job whose
  attempt is counted by mistake fails its run.
* `stamps`: one Spark step that stamps its rows with the attempt that made
  them, and waits before it returns while a file says so (`maybe_hold`).

Steps fail, sleep, stall or wait on purpose while files in `$KITTIWAKE_TEST_FAIL_DIR` say so
(`maybe_fail`, `maybe_stall`, `maybe_hold`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from kittiwake.flow import Dataset, Flow, StepContext, current_step, merge, optional

FAIL_FILE_ENV = "KITTIWAKE_TEST_FAIL_DIR"


def maybe_fail(step: str) -> None:
    """Raise while `$KITTIWAKE_TEST_FAIL_DIR/<step>` exists; sleep while `<step>.slow` exists."""
    folder = os.environ.get(FAIL_FILE_ENV)
    if not folder:
        return
    if Path(folder, step).exists():
        raise RuntimeError(f"{step} fails on purpose")
    slow = Path(folder, f"{step}.slow")
    if slow.exists():
        time.sleep(float(slow.read_text() or "1"))


# ------------------------------------------------------------------- sales (Spark)

sales = Flow("sales", lease_secs=10, max_attempts=3)


@sales.step(inputs={"folder": sales.input("raw")}, split=True)
def files(ctx: StepContext, folder: Dataset):
    for path in sorted(folder.local_path.glob("*.csv")):
        yield Dataset.csv(str(path))


def maybe_stall(spark, step: str) -> None:
    """While `$KITTIWAKE_TEST_FAIL_DIR/<step>.stall` exists: a Spark job of that many seconds (a
    task sleeping on an executor), which a cancelled job group interrupts."""
    folder = os.environ.get(FAIL_FILE_ENV)
    stall = Path(folder, f"{step}.stall") if folder else None
    if stall is not None and stall.exists():
        secs = float(stall.read_text() or "5")
        spark.sparkContext.parallelize([secs], 1).map(lambda s: time.sleep(s) or s).count()


@sales.step(engine="spark", inputs={"part": files}, retry_backoff=0.2)
def clean(spark, part):
    from pyspark.sql import functions as F

    maybe_fail("clean")
    maybe_stall(spark, "clean")
    return part.where(F.col("amount").isNotNull()).withColumn("amount", F.col("amount").cast("long")) \
        .withColumn("part", F.lit(current_step().index))


@sales.step(engine="spark", inputs={"parts": merge(clean)})
def totals(spark, parts):
    from pyspark.sql import functions as F

    return parts.groupBy("region").agg(F.sum("amount").alias("amount"), F.countDistinct("part").alias("parts"))


# ------------------------------------------------------------------- tiny (python only)

tiny = Flow("tiny", lease_secs=5, max_attempts=2)


@tiny.step(inputs={"numbers": tiny.input("numbers")}, split=True)
def spread(ctx: StepContext, numbers: Dataset):
    return [Dataset.inline(n) for n in numbers.value]


@tiny.step(inputs={"n": spread}, retry_backoff=0.1)
def square(ctx: StepContext, n: Dataset):
    maybe_fail("square")
    return n.value * n.value


@tiny.step(inputs={"squares": merge(square)})
def add(ctx: StepContext, squares: list[Dataset]):
    return {"sum": sum(s.value for s in squares), "run": ctx.run, "count": len(squares)}


# ------------------------------------------------------------------- hints (optional input)

hints = Flow("hints", lease_secs=5)


@hints.step(inputs={"words": hints.input("words")}, split=True)
def each(ctx: StepContext, words: Dataset):
    return [Dataset.inline(word) for word in words.value]


@hints.step(inputs={"word": each}, outputs=("upper", "length", "hint"))
def facts(ctx: StepContext, word: Dataset):
    out = {"upper": word.value.upper(), "length": len(word.value)}
    if word.value.startswith("k"):
        out["hint"] = f"{word.value} starts with k"
    return out


@hints.step(inputs={"upper": facts["upper"], "length": facts["length"], "hint": optional(facts["hint"])})
def line(ctx: StepContext, upper: Dataset, length: Dataset, hint: Dataset | None = None):
    return f"{upper.value}:{length.value}" + (f" ({hint.value})" if hint is not None else "")


@hints.step(inputs={"lines": merge(line)})
def page(ctx: StepContext, lines: list[Dataset]):
    return [item.value for item in lines]


# ------------------------------------------------------- chain (Spark, reused) and fused (the same, fused)


def chain_flow(name: str, tidy_fuse: str | None = None, **options) -> Flow:
    """CSV files split per file, each tidied and summed on Spark, the sums merged into a report."""
    flow = Flow(name, lease_secs=4, max_attempts=3, **options)

    @flow.step(inputs={"folder": flow.input("raw")}, split=True)
    def listing(ctx: StepContext, folder: Dataset):
        return [Dataset.csv(str(path)) for path in sorted(folder.local_path.glob("*.csv"))]

    @flow.step(engine="spark", inputs={"part": listing}, retry_backoff=0.2, fuse=tidy_fuse)
    def tidy(spark, part):
        """Rows with an amount, as longs (fuses into `sums` on the same worker, where the flow fuses)."""
        from pyspark.sql import functions as F

        maybe_fail("tidy")
        return part.where(F.col("amount").isNotNull()).select("region", F.col("amount").cast("long").alias("amount"))

    @flow.step(engine="spark", inputs={"rows": tidy}, retry_backoff=0.2)
    def sums(spark, rows):
        """One part's total per region (fuses into `report`, where the flow fuses)."""
        from pyspark.sql import functions as F

        maybe_fail("sums")
        return rows.groupBy("region").agg(F.sum("amount").alias("amount"), F.count(F.lit(1)).alias("rows"))

    @flow.step(engine="spark", inputs={"parts": merge(sums)})
    def report(spark, parts):
        from pyspark.sql import functions as F

        return parts.groupBy("region").agg(F.sum("amount").alias("amount"), F.sum("rows").alias("rows"),
                                           F.count(F.lit(1)).alias("parts"))

    return flow


chain = chain_flow("chain", reuse=True)
fused = chain_flow("fused", fuse=True)
planned = chain_flow("planned", tidy_fuse="plan", reuse=True)
all_planned = chain_flow("all_planned", fuse="plan")


# ------------------------------------------------------------------- once (Spark, one attempt)

once = Flow("once", lease_secs=20, max_attempts=1, reuse=True)


@once.step(engine="spark", inputs={"rows": once.input("rows")})
def doubled(spark, rows):
    return rows.selectExpr("n * 2 AS n")


# ------------------------------------------------------------------- stamps (Spark, attempts told apart)


def maybe_hold(step: str) -> None:
    """Wait while `$KITTIWAKE_TEST_FAIL_DIR/<step>.hold` exists."""
    folder = os.environ.get(FAIL_FILE_ENV)
    while folder and Path(folder, f"{step}.hold").exists():
        time.sleep(0.05)


stamps = Flow("stamps", lease_secs=4, max_attempts=3)


@stamps.step(engine="spark", inputs={"rows": stamps.input("rows")})
def stamp(spark, rows):
    from pyspark.sql import functions as F

    attempt = current_step().attempt
    maybe_hold("stamp")
    return rows.withColumn("attempt", F.lit(attempt))
