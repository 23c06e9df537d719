"""What the benchmarks show and write: machine facts, figure records, tables, JSON, a CDF plot.

Every measured figure becomes one record of the same shape, in the JSON file
and in the table:

    {"tasks_per_s": float | null, "latency_ms": {"p50", "p90", "p99", "p999", "max"} | null,
     "samples": int, "errors": int, "ratio": float | null, "reference": {...} | null,
     "target": {...} | null, "meets_target": bool | null, ...figure-specific extras}

`ratio` is how many times Kittiwake is ahead of the reference (above 1 is
better, see `references`); `target` keys end in `_min` or `_max`. Extras
such as `broker_cpu_percent` and `load_cpu_percent` are CPU time over the run
as a percentage of one core (every broker thread; summed over the load
processes), so a reader can tell which side was the bottleneck. A JSON file
is `{"machine": {...}, "settings": {...}, "<benchmark>": {figure name: record,
...}}`; `scale` adds the plain numbers `rss_mb` and `recovery_s` beside its
records. Progress bars and tables are drawn with rich; the CDF plot needs
matplotlib and is skipped without it.
"""

from __future__ import annotations

import json
import os
import platform
import sqlite3
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

import kittiwake
from kittiwake.bench.harness import Measured
from kittiwake.bench.wire import event_loop_name

# ----------------------------------------------------------------- machine


def _first_line_value(path: str, key: str) -> str | None:
    try:
        with open(path) as lines:
            for line in lines:
                if line.startswith(key):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def machine_info() -> dict[str, Any]:
    """The facts a reader needs to compare two runs."""
    memory_kb = _first_line_value("/proc/meminfo", "MemTotal")
    return {
        "cpu_model": _first_line_value("/proc/cpuinfo", "model name") or platform.processor() or "unknown",
        "cores": os.cpu_count(),
        "memory_gb": round(int(memory_kb.split()[0]) / 1024 / 1024, 1) if memory_kb else None,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "sqlite": sqlite3.sqlite_version,
        "kernel": f"{platform.system()} {platform.release()}",
        "kittiwake": kittiwake.__version__,
        "load_event_loop": event_loop_name(),
    }


# ----------------------------------------------------------------- records


def figure(
    measured: Measured | None,
    *,
    rate: bool = True,
    ratio: float | None = None,
    reference: Mapping[str, Any] | None = None,
    target: Mapping[str, float] | None = None,
    meets_target: bool | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The record of one figure; `rate=False` for figures where tasks/s means nothing."""
    record: dict[str, Any] = {
        "tasks_per_s": None,
        "latency_ms": None,
        "samples": 0,
        "errors": 0,
    }
    if measured is not None:
        result = measured.result
        record["tasks_per_s"] = round(measured.tasks_per_sec, 1) if rate and result.tasks else None
        record["latency_ms"] = measured.latency_ms
        record["samples"] = len(result.latencies_ns)
        record["errors"] = result.errors
        if result.first_error:
            record["first_error"] = result.first_error
        if result.empties:
            record["empty_leases"] = result.empties
        if measured.broker_cpu_percent is not None:
            record["broker_cpu_percent"] = measured.broker_cpu_percent
        if measured.client_cpu_percent is not None:
            record["load_cpu_percent"] = measured.client_cpu_percent
    record.update(
        ratio=ratio,
        reference=dict(reference) if reference else None,
        target=dict(target) if target else None,
        meets_target=meets_target,
    )
    record.update(extra)
    return record


def check_target(record: Mapping[str, Any]) -> bool | None:
    """Whether a record meets every `<metric>_min` / `<metric>_max` of its target."""
    target = record.get("target")
    if not target:
        return None
    verdicts = []
    for key, bound in target.items():
        metric, _, kind = key.rpartition("_")
        value = _metric(record, metric)
        if value is None:
            return None
        verdicts.append(value >= bound if kind == "min" else value <= bound)
    return all(verdicts)


def _metric(record: Mapping[str, Any], metric: str) -> float | None:
    if metric.startswith("latency_ms_"):
        latency = record.get("latency_ms") or {}
        return latency.get(metric.removeprefix("latency_ms_"))
    value = record.get(metric)
    return float(value) if isinstance(value, (int, float)) else None


def describe_target(target: Mapping[str, float] | None) -> str:
    if not target:
        return ""
    parts = []
    for key, bound in target.items():
        metric, _, kind = key.rpartition("_")
        sign = "≥" if kind == "min" else "≤"
        if metric == "tasks_per_s":
            parts.append(f"{sign} {bound:,.0f}/s")
        elif metric.startswith("latency_ms_"):
            label = metric.removeprefix("latency_ms_").replace("p999", "p99.9")
            parts.append(f"{label} {sign} {bound:.3g} ms")
        else:
            parts.append(f"{metric} {sign} {bound:g}")
    return ", ".join(parts)


# ------------------------------------------------------------------ output


@contextmanager
def progress_bars(console: Console) -> Iterator[Callable[[str], Callable[[float, int], None]]]:
    """`with progress_bars(console) as bar: harness_call(progress=bar("what"))`."""
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[tasks]:>12,} tasks"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )

    def bar(description: str) -> Callable[[float, int], None]:
        task_id = progress.add_task(description, total=1.0, tasks=0)

        def update(fraction: float, tasks: int) -> None:
            progress.update(task_id, completed=fraction, tasks=tasks)

        return update

    with progress:
        yield bar


def _ms(latency: Mapping[str, float] | None, key: str) -> str:
    if not latency:
        return "—"
    value = latency[key]
    return f"{value:.2f}" if value < 100 else f"{value:,.0f}"


def figures_table(title: str, figures: Mapping[str, Any]) -> Table:
    """One row per figure record; plain numbers (rss_mb, ...) are left to `numbers_table`."""
    table = Table(title=title, title_justify="left")
    table.add_column("figure")
    table.add_column("tasks/s", justify="right")
    for label in ("p50", "p90", "p99", "p99.9", "max"):
        table.add_column(f"{label} ms", justify="right")
    table.add_column("× ref", justify="right")
    table.add_column("target")
    table.add_column("met", justify="center")
    table.add_column("broker CPU", justify="right")  # % of one core, all threads
    table.add_column("load CPU", justify="right")  # % of one core, summed over load processes
    for name, record in figures.items():
        if not isinstance(record, Mapping):
            continue
        latency = record.get("latency_ms")
        rate = record.get("tasks_per_s")
        met = record.get("meets_target")
        table.add_row(
            name,
            f"{rate:,.0f}" if rate else "—",
            *(_ms(latency, key) for key in ("p50", "p90", "p99", "p999", "max")),
            f"{record['ratio']:,.1f}" if record.get("ratio") else "—",
            describe_target(record.get("target")),
            "" if met is None else ("[green]yes" if met else "[red]no"),
            f"{record['broker_cpu_percent']:.0f}%" if "broker_cpu_percent" in record else "",
            f"{record['load_cpu_percent']:.0f}%" if "load_cpu_percent" in record else "",
        )
    return table


def numbers_table(title: str, rows: list[tuple[str, str, str, bool | None]]) -> Table:
    """Rows of (what, value, target, met)."""
    table = Table(title=title, title_justify="left")
    for column in ("figure", "value", "target", "met"):
        table.add_column(column)
    for what, value, target, met in rows:
        table.add_row(what, value, target, "" if met is None else ("[green]yes" if met else "[red]no"))
    return table


def print_machine(console: Console, machine: Mapping[str, Any]) -> None:
    console.print(
        f"[dim]{machine['cpu_model']}, {machine['cores']} cores, {machine['memory_gb']} GB; "
        f"{machine['python']}, SQLite {machine['sqlite']}, {machine['kernel']}; load on {machine['load_event_loop']}"
    )


def write_json(path: str, report: Mapping[str, Any]) -> None:
    text = json.dumps(report, indent=2)
    if path == "-":
        sys.stdout.write(text + "\n")
        return
    Path(path).write_text(text + "\n")


def write_outputs(console: Console, report: Mapping[str, Any], json_path: str | None, plot: str | None,
                  chart: Callable[[str], bool], what: str = "chart") -> None:
    """The end every benchmark's command shares: the machine line, the JSON to `json_path`, and
    `chart(path)` where `--plot` (or the JSON's name) asks for one, saying whether it was drawn."""
    print_machine(console, report["machine"])
    if json_path:
        write_json(json_path, report)
    target = plot_path(plot, json_path)
    if target:
        if chart(target):
            console.print(f"[dim]{what} written to {target}")
        else:
            console.print("[yellow]no chart: matplotlib is not installed (pip install kittiwake[plot]) "
                          "or no figure ran")


def plot_path(plot: str | None, json_path: str | None) -> str | None:
    """Where the CDF goes: --plot, else next to the --json file."""
    if plot:
        return plot
    if json_path and json_path != "-":
        return str(Path(json_path).with_suffix(".png"))
    return None


def headless_pyplot() -> Any:
    """matplotlib's pyplot drawing to files only, or None when the `plot` extra is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as pyplot
    except ImportError:
        return None
    return pyplot


def write_cdf_plot(path: str | None, title: str, series: Mapping[str, Measured | None]) -> bool:
    """A latency CDF per figure (log x axis); False, silently, without matplotlib or samples."""
    if not path:
        return False
    pyplot = headless_pyplot()
    if pyplot is None:
        return False
    figure_, axes = pyplot.subplots(figsize=(8, 5))
    drawn = False
    for name, measured in series.items():
        if measured is None or not measured.result.latencies_ns:
            continue
        values = sorted(value / 1e6 for value in measured.result.latencies_ns)
        count = len(values)
        axes.plot(values, [(index + 1) / count for index in range(count)], label=name)
        drawn = True
    if not drawn:
        pyplot.close(figure_)
        return False
    axes.set_xscale("log")
    axes.set_xlabel("latency (ms)")
    axes.set_ylabel("fraction of operations")
    axes.set_title(title)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    figure_.tight_layout()
    figure_.savefig(path, dpi=120)
    pyplot.close(figure_)
    return True


def show_figures(console: Console, title: str, figures: Mapping[str, Any]) -> None:
    """The table of every measured figure (records with a rate or latencies)."""
    measured = {
        name: record for name, record in figures.items()
        if isinstance(record, Mapping) and (record.get("tasks_per_s") is not None or record.get("latency_ms"))
    }
    console.print(figures_table(title, measured))
