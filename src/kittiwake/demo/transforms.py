"""The pipeline demo's transformations, as Spark DataFrame functions shared by both drivers.

The flow (`kittiwake.demo.flow_pipeline`) applies them to one shard at a time,
a step each; the plain PySpark script (`kittiwake.demo.plain_spark`) applies
them to the whole dataset at once. Both therefore do the same work and must
write the same figures:

* `read_events`: the raw CSV, every column a string (nothing inferred, no
  extra job);
* `clean`: keep the rows `rules` accepts, normalise them (event type in lower
  case, URL without scheme case, query string or trailing slash, amount a
  decimal), and drop replayed rows by `event_id`;
* `enrich`: join the clean events with the users (country, plan);
* `figures`: the report's figures in long form, one row per
  (dimension, key, detail): events, purchases and revenue per country and
  plan, per event type, per user and per page. Sums only, so figures of
  shards add up to the figures of the whole (`combine`), exactly: revenue is
  a decimal, never a float;
* `top`: the largest rows of a dimension, for the printed report.

The rules are written once in `rules` and read by Spark here and by the
plain-Python check (`kittiwake.demo.check`).
"""

from __future__ import annotations

from typing import Any

from kittiwake.demo import rules
from kittiwake.demo.dataset import EVENT_COLUMNS

# Session settings both drivers use (runtime SQL settings: a running session takes them too).
# Measured with `kittiwake bench flows` on two cores: adaptive execution re-plans every stage,
# which costs the flow's many small jobs more than it saves; with two shuffle partitions and
# 25 MB splits a 50 MB shard's job still keeps both cores busy, with the fewest tasks and files.
SESSION_SETTINGS = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.files.maxPartitionBytes": str(25 * 1000 * 1000),
    "spark.sql.adaptive.enabled": "false",
}
FIGURE_COLUMNS = ("dimension", "key", "detail", "events", "purchases", "revenue")
DIMENSIONS = ("country_plan", "event_type", "user", "page")
REVENUE_TYPE = "decimal(22,2)"


def apply_settings(spark: Any, settings: dict[str, str | None] | None = None) -> dict[str, str | None]:
    """Put `settings` (default `SESSION_SETTINGS`; None unsets) on a running session; returns what
    they replaced, to put back with another call."""
    previous: dict[str, str | None] = {}
    for key, value in (SESSION_SETTINGS if settings is None else settings).items():
        previous[key] = spark.conf.get(key, None)
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)
    return previous


def event_schema() -> Any:
    from pyspark.sql.types import StringType, StructField, StructType

    return StructType([StructField(column, StringType(), True) for column in EVENT_COLUMNS])


def read_events(spark: Any, paths: str | list[str]) -> Any:
    """The raw log: a header line, then rows of strings (empty fields are null)."""
    return spark.read.csv(paths, schema=event_schema(), header=True, mode="PERMISSIVE")


def clean(raw: Any) -> Any:
    """Well-formed rows only, normalised, each `event_id` once."""
    from pyspark.sql import functions as F

    event_type = F.lower(F.trim(F.col("event_type")))
    money = event_type.isin(*rules.MONEY_TYPES)
    ts = F.expr(f"try_to_timestamp(ts, '{rules.SPARK_TIME_PATTERN}')")
    url = F.regexp_replace(F.regexp_replace(F.lower(F.trim(F.col("url"))), rules.URL_TAIL, ""), "/+$", "")
    well_formed = (
        F.col("event_id").rlike(rules.ID_PATTERN)
        & F.col("user_id").rlike(rules.ID_PATTERN)
        & F.col("ts").rlike(rules.TIME_PATTERN)
        & ts.isNotNull()
        & event_type.isin(*rules.EVENT_TYPES)
        & (~money | F.col("amount").rlike(rules.AMOUNT_PATTERN))
        & F.col("url").isNotNull()
    )
    return (
        raw.where(well_formed)
        .select(
            F.col("event_id").cast("bigint").alias("event_id"),
            F.col("user_id").cast("bigint").alias("user_id"),
            ts.alias("ts"),
            event_type.alias("event_type"),
            F.when(money, F.col("amount").cast("decimal(12,2)")).alias("amount"),
            url.alias("url"),
        )
        .dropDuplicates(["event_id"])
    )


def read_users(spark: Any, path: str) -> Any:
    return spark.read.parquet(path).select("user_id", "country", "plan")


def enrich(events: Any, users: Any) -> Any:
    """Each clean event with its user's country and plan (events of unknown users are dropped)."""
    return events.join(users, "user_id", "inner")


def figures(enriched: Any) -> Any:
    """The report's figures of `enriched` in long form (see the module's docstring), one job."""
    from pyspark.sql import functions as F

    purchase = F.col("event_type") == "purchase"
    refund = F.col("event_type") == "refund"
    signed = (F.when(purchase, F.col("amount")).when(refund, -F.col("amount"))
              .otherwise(F.lit(0).cast("decimal(12,2)")))
    facets = F.explode(F.array(
        F.struct(F.lit("country_plan").alias("dimension"), F.col("country").alias("key"), F.col("plan").alias("detail")),
        F.struct(F.lit("event_type").alias("dimension"), F.col("event_type").alias("key"), F.lit("").alias("detail")),
        F.struct(F.lit("user").alias("dimension"), F.col("user_id").cast("string").alias("key"),
                 F.concat_ws("/", "country", "plan").alias("detail")),
        F.struct(F.lit("page").alias("dimension"), F.col("url").alias("key"), F.lit("").alias("detail")),
    )).alias("facet")
    return (
        enriched.select(facets, purchase.cast("int").alias("purchase"), signed.alias("signed"))
        .groupBy("facet.dimension", "facet.key", "facet.detail")
        .agg(F.count(F.lit(1)).alias("events"), F.sum("purchase").cast("bigint").alias("purchases"),
             F.sum("signed").cast(REVENUE_TYPE).alias("revenue"))
    )


def combine(partial_figures: Any) -> Any:
    """Figures of parts (shards) summed into the figures of the whole."""
    from pyspark.sql import functions as F

    return (
        partial_figures.groupBy("dimension", "key", "detail")
        .agg(F.sum("events").cast("bigint").alias("events"), F.sum("purchases").cast("bigint").alias("purchases"),
             F.sum("revenue").cast(REVENUE_TYPE).alias("revenue"))
    )


def report_rows(all_figures: Any, top: int = 10) -> dict[str, list[dict[str, Any]]]:
    """What the printed report shows, collected: every country/plan and event type row, the
    `top` users by revenue and the `top` pages by events (ties by key), as plain Python."""
    from pyspark.sql import functions as F

    small = all_figures.where(F.col("dimension").isin("country_plan", "event_type")).collect()
    users = (all_figures.where(F.col("dimension") == "user")
             .orderBy(F.col("revenue").desc(), F.col("key").cast("bigint")).limit(top).collect())
    pages = (all_figures.where(F.col("dimension") == "page")
             .orderBy(F.col("events").desc(), F.col("key")).limit(top).collect())
    return rules.report_from_rows([row.asDict() for row in (*small, *users, *pages)], top)
