"""Pipelines on Spark: a folder of CSV files split into one job per file, each cleaned on Spark,
merged back into totals per region (docs/pipelines.md and the README; a test runs it).

    kittiwake broker --data ./.kittiwake &
    kittiwake worker sales:flow &          # the python step (files)
    kittiwake spark-worker sales:flow &    # the Spark steps (clean, totals), one SparkSession
    python sales.py
"""

from __future__ import annotations

from pathlib import Path

from kittiwake.flow import Dataset, Flow, merge

flow = Flow("sales")  # its queues and joins live in the consistency group flow.sales


@flow.step(inputs={"folder": flow.input("raw")}, split=True)
def files(ctx, folder: Dataset) -> list[Dataset]:
    """One item per CSV file: a sequence level is pushed, the last file flagged final."""
    return [Dataset.csv(path) for path in sorted(folder.local_path.glob("*.csv"))]


@flow.step(engine="spark", inputs={"part": files})
def clean(spark, part):
    """One job per file: drop rows without an amount. Written as Parquet under the run's folder."""
    return part.dropna().selectExpr("region", "cast(amount as long) as amount")


@flow.step(engine="spark", inputs={"parts": merge(clean)})
def totals(spark, parts):
    """Once every file is cleaned: the union of the parts, summed per region. A small result can
    travel inline in the token instead of as a DataFrame."""
    rows = parts.groupBy("region").sum("amount").orderBy("region").collect()
    return [{"region": row["region"], "amount": row["sum(amount)"]} for row in rows]


def write_input(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for day in range(3):
        lines = ["region,amount"] + [f"{region},{10 * day + n}" for n, region in enumerate(["north", "south", "east"])]
        lines.append("west,")  # no amount: dropped by clean
        (folder / f"day-{day}.csv").write_text("\n".join(lines) + "\n")


def main() -> None:
    write_input(Path("sales-in"))
    run = flow.run(None, {"raw": Dataset.path("sales-in")}, data_dir="sales-runs")  # None: $KITTIWAKE_URL
    status = run.wait(timeout=300)
    print(status.state, {step.step: step.done for step in status.steps})
    print(run.outputs()["totals.out"].value)
    run.close()


if __name__ == "__main__":
    main()
