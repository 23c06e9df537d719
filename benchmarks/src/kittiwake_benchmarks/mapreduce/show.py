"""What `kittiwake bench mapreduce` shows: the table, the start-up times, the targets, and the chart.

The table has a row per app × partition size: partitions (input files, one
map task each on both systems), each system's MB/s and Kittiwake's ÷
Spark's, the tasks each ran (Kittiwake: maps, barriers and reduces; Spark:
every stage's), Kittiwake's scheduling overhead (the share of its slots'
time not spent in a task's code), maps whose output spilled to disk, maps
run by a node other than their partition's, and whether the outputs were
equal. The chart (`--plot`, matplotlib's headless Agg backend) has a panel
per app: MB/s against partition size on a log axis, Kittiwake and Spark.
"""

from __future__ import annotations

from typing import Any, Mapping

from rich.console import Console
from rich.table import Table

from kittiwake_benchmarks.mapreduce.data import size_label
from kittiwake.bench.report import headless_pyplot


def _number(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _count(value: int | None) -> str:
    return "—" if value is None else f"{value:,}"


def _equal(value: bool | None) -> str:
    return "" if value is None else ("[green]yes" if value else "[red]no")


def results_table(report: Mapping[str, Any]) -> Table:
    settings = report["settings"]
    table = Table(title=f"kittiwake bench mapreduce — {size_label(settings['size_bytes'])} per dataset, "
                        f"{settings['nodes']} nodes × {settings['concurrency']} slots vs Spark "
                        f"{settings['spark']['master']}, {settings['reducers']} reducers",
                  title_justify="left")
    for column in ("app", "partition", "partitions", "Kittiwake MB/s", "Spark MB/s", "× Spark", "Kittiwake tasks",
                   "Spark tasks", "overhead", "spilled", "stolen", "equal"):
        table.add_column(column, justify="left" if column in ("app", "equal") else "right")
    for row in report["results"]:
        overhead = row.get("native_overhead")
        table.add_row(
            row["app"], size_label(row["partition_size_bytes"]), _count(row["partitions"]),
            _number(row["native_mb_s"]), _number(row["spark_mb_s"]), _number(row.get("ratio"), 2),
            _count(row["native_tasks"]), _count(row["spark_tasks"]),
            "—" if overhead is None else f"{100 * overhead:.0f}%",
            _count(row.get("spilled_maps")), _count(row.get("stolen_maps")),
            _equal(row["outputs_equal"]) if not row.get("error") else f"[red]failed: {row['error'][:60]}",
        )
    return table


def targets_table(report: Mapping[str, Any]) -> Table:
    table = Table(title="targets (met or not, never asserted)", title_justify="left")
    for column in ("app", "target", "value", "met"):
        table.add_column(column)
    for check in report["targets"]["checks"]:
        if check["target"] == "ratio_min":
            what = f"× Spark at {size_label(check['partition_size_bytes'])} ≥ {check['bound']:g}"
            value = _number(check["value"], 2)
        else:
            low, high = report["targets"]["native_spread_range_bytes"]
            what = f"Kittiwake MB/s spread {size_label(low)}–{size_label(high)} ≤ {check['bound']:.0%}"
            value = "—" if check["value"] is None else f"{check['value']:.0%}"
        met = check["met"]
        table.add_row(check["app"], what, value, "not run" if met is None else _equal(met))
    return table


def show(console: Console, report: Mapping[str, Any]) -> None:
    console.print(results_table(report))
    reference = report["reference"]
    console.print("reference check (Kittiwake = Spark = plain Python on a sample): " + ", ".join(
        f"{app} {'[green]equal' if check['equal'] else '[red]NOT equal'}[/] "
        f"({_number((check.get('sample_bytes') or 0) / 1e6)} MB)" for app, check in reference.items()))
    spark_start = ("reused this process's session" if report["spark_reused_session"]
                   else f"{report['spark_startup_s']:.1f} s")
    console.print(f"start-up, not in any rate: Spark session {spark_start}; broker + "
                  f"{report['settings']['nodes']} worker commands {report['kittiwake_startup_s']:.1f} s; "
                  f"warm-up jobs {report['warmup_s']:.1f} s")
    console.print(targets_table(report))


def write_chart(path: str | None, report: Mapping[str, Any]) -> bool:
    """MB/s against partition size, a panel per app; False without matplotlib or rows."""
    if not path:
        return False
    pyplot = headless_pyplot()
    if pyplot is None:
        return False
    apps = list(dict.fromkeys(row["app"] for row in report["results"]))
    if not apps:
        return False
    figure, axes_list = pyplot.subplots(1, len(apps), figsize=(5 * len(apps), 4.5), squeeze=False)
    sizes = sorted({row["partition_size_bytes"] for row in report["results"]})
    for axes, app in zip(axes_list[0], apps):
        rows = sorted((row for row in report["results"] if row["app"] == app),
                      key=lambda row: row["partition_size_bytes"])
        for key, label, marker in (("native_mb_s", "Kittiwake", "o"), ("spark_mb_s", "Spark", "s")):
            points = [(row["partition_size_bytes"], row[key]) for row in rows if row[key]]
            if points:
                axes.plot([x for x, _ in points], [y for _, y in points], marker=marker, label=label)
        axes.set_xscale("log")
        axes.set_xticks(sizes)
        axes.set_xticklabels([size_label(size) for size in sizes])
        axes.minorticks_off()
        axes.set_xlabel("partition size")
        axes.set_ylabel("throughput (MB/s)")
        axes.set_ylim(bottom=0)
        axes.set_title(app)
        axes.grid(True, alpha=0.3)
        axes.legend()
    machine = report["machine"]
    figure.suptitle(f"kittiwake bench mapreduce — {size_label(report['settings']['size_bytes'])} per dataset; "
                    f"{machine['cpu_model']}, {machine['cores']} cores", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    pyplot.close(figure)
    return True
