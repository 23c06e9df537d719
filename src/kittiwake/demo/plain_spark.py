"""The pipeline demo as ONE plain PySpark driver script: the peer the flow is measured against.

The same transformations as the flow (`kittiwake.demo.transforms`), on the
same generated data and the same session settings, written the way a Spark
user would write them without Kittiwake: read every shard at once, clean,
join with the user table, compute the figures, write them and the report —
one query, nothing written in between. It writes what the flow writes
(`figures/`, `report.json`; the flow's clean rows are built into its join
too, never written: `shop_flow`), so the two can be compared figure by
figure.

`run` returns the report and the seconds of each part; `kittiwake bench
flows` calls it on the session its Spark worker uses; `main` starts a session
as the demo's spark-worker does (`local[2]`, the FAIR scheduler,
`transforms.SESSION_SETTINGS`).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from kittiwake.demo import transforms
from kittiwake.demo.dataset import Manifest


def run(spark: Any, manifest: Manifest, out_dir: str | Path) -> dict[str, Any]:
    """Clean, enrich, figure and report the whole dataset; the report and the seconds of each part."""
    out = Path(out_dir)
    transforms.apply_settings(spark)
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    cleaned = transforms.clean(transforms.read_events(spark, [shard.path for shard in manifest.shards]))
    enriched = transforms.enrich(cleaned, transforms.read_users(spark, manifest.users_path))
    transforms.figures(enriched).write.mode("overwrite").parquet(str(out / "figures"))
    seconds["figures"] = time.perf_counter() - started
    mark = time.perf_counter()
    report = transforms.report_rows(spark.read.parquet(str(out / "figures")))
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    seconds["report"] = time.perf_counter() - mark
    seconds["total"] = time.perf_counter() - started
    return {"report": report, "seconds": seconds}


def main(argv: list[str]) -> int:
    from kittiwake.flow.spark_worker import start_session

    if len(argv) != 2:
        print("usage: python -m kittiwake.demo.plain_spark DATASET_DIR OUT_DIR", file=sys.stderr)
        return 2
    spark = start_session("local[2]", transforms.SESSION_SETTINGS, app_name="kittiwake-plain-spark")
    try:
        outcome = run(spark, Manifest.load(argv[0]), argv[1])
    finally:
        spark.stop()
    print(json.dumps(outcome["seconds"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
