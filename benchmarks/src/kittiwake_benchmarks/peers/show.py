"""What `kittiwake bench peers` shows: one table row per system, and a bar chart.

The table: single, threaded (one by one from several threads at once) and
bulk submit/s, drain tasks/s, Kittiwake's drain ÷ the peer's, submit → start
p50 and p99, whether an acknowledged enqueue survives a power cut on the
service as configured, and the row's notes (why it was skipped, failed or
partial, or why it has no threaded figure). The chart (`--plot`,
matplotlib's headless Agg backend) has three panels: the three submit rates
(log scale), drain tasks/s, and submit → start p50 and p99 (log scale);
systems without figures are left out. A report written before the threaded
phase existed shows "—" there.
"""

from __future__ import annotations

from typing import Any, Mapping

from rich.console import Console
from rich.table import Table

from kittiwake.bench.report import headless_pyplot


def _rate(value: float | None) -> str:
    return f"{value:,.0f}" if value else "—"


def _ms(latency: Mapping[str, float] | None, key: str) -> str:
    if not latency:
        return "—"
    value = latency[key]
    return f"{value:.2f}" if value < 100 else f"{value:,.0f}"


def _durable(value: bool | None) -> str:
    return "—" if value is None else ("[green]yes" if value else "[yellow]no")


def _threads(report: Mapping[str, Any]) -> int:
    return int(report["settings"].get("submit_threads", 8))


def _threaded(record: Mapping[str, Any]) -> Mapping[str, Any]:
    return record.get("threaded_submit") or {}


def _note(record: Mapping[str, Any]) -> str:
    status = record["status"]
    if status == "ok":
        reason = _threaded(record).get("reason")
        return f"[dim]threaded submit: {reason}" if reason else ""
    reason = (record.get("reason") or "").splitlines()[0][:160]
    colour = {"skipped": "yellow", "failed": "red", "partial": "yellow"}.get(status, "white")
    return f"[{colour}]{status}: {reason}"


def peers_table(report: Mapping[str, Any]) -> Table:
    settings = report["settings"]
    title = (f"kittiwake bench peers — {settings['tasks']:,} tasks drained by {settings['processes']} worker "
             f"processes, {settings['submits']:,} single submits, {settings['latency_samples']:,} latency samples, "
             f"{settings['payload_bytes']:,} B payload")
    table = Table(title=title, title_justify="left")
    table.add_column("system")
    table.add_column("version")
    table.add_column("single submit/s", justify="right")
    table.add_column(f"{_threads(report)}-thread submit/s", justify="right")
    table.add_column("bulk submit/s", justify="right")
    table.add_column("drain tasks/s", justify="right")
    table.add_column("resume → empty /s", justify="right")
    table.add_column("Kittiwake ÷ peer", justify="right")
    table.add_column("p50 ms", justify="right")
    table.add_column("p99 ms", justify="right")
    table.add_column("durable", justify="center")
    table.add_column("notes")
    for record in report["peers"].values():
        ratio = record.get("ratio")
        table.add_row(
            record["label"],
            record.get("version") or "—",
            _rate(record["single_submit"]["tasks_per_s"]),
            _rate(_threaded(record).get("tasks_per_s")),
            _rate(record["bulk_submit"]["tasks_per_s"]),
            _rate(record["tasks_per_s"]),
            _rate((record.get("drain") or {}).get("resume_to_empty_per_s")),
            f"{ratio:,.2f}×" if ratio else "—",
            _ms(record.get("latency_ms"), "p50"),
            _ms(record.get("latency_ms"), "p99"),
            _durable(record.get("durable")),
            _note(record),
        )
    disk = report.get("disk_commit") or {}
    if disk.get("latency_ms"):
        table.add_row("disk: 4 KiB + fsync (reference)", "—", "—", "—", "—", "—", "—", "—",
                      _ms(disk["latency_ms"], "p50"), _ms(disk["latency_ms"], "p99"), "yes",
                      f"{disk['pause_secs']:g} s apart, as the samples")
    return table


def show(console: Console, report: Mapping[str, Any]) -> None:
    console.print(peers_table(report))
    for record in report["peers"].values():
        if record.get("service"):
            console.print(f"[dim]{record['label']}: {record['service']}; workers: {record['workers']}"
                          + (f"; bulk: {record['bulk_submit']['api']}" if record["bulk_submit"].get("api") else ""))
        for change in record.get("changed_settings") or ():
            console.print(f"[dim]  changed: {change}")
        broker_cpu = (record.get("drain") or {}).get("broker_cpu_us_per_task")
        if broker_cpu is not None:
            console.print(f"[dim]  broker CPU per drained task: {broker_cpu:g} µs")
    load = report["load_average"]
    console.print(f"[dim]drain = tasks ÷ (first task's start → last task's end); resume → empty = tasks ÷ (the "
                  "paused, warm workers resumed on the backlog → the system says its queue is empty); "
                  f"submit → start one task at a time, {report['settings']['latency_gap_secs']:g} s apart, on an "
                  f"idle system. Load average before and after: {load['before'][0]:.2f}, {load['after'][0]:.2f} "
                  f"(other processes on this machine)")


def write_chart(path: str | None, report: Mapping[str, Any]) -> bool:
    """Submit rates, drain tasks/s and submit → start p50/p99 per system as a PNG; False without
    matplotlib or figures."""
    if not path:
        return False
    pyplot = headless_pyplot()
    if pyplot is None:
        return False
    records = [record for record in report["peers"].values() if record.get("tasks_per_s") or record.get("latency_ms")]
    if not records:
        return False
    labels = [record["label"].replace(", ", "\n") for record in records]
    positions = list(range(len(records)))
    figure, (submit_axes, drain_axes, latency_axes) = pyplot.subplots(1, 3, figsize=(19, 5))
    width = 0.27
    submits = (("single", lambda record: record["single_submit"].get("tasks_per_s"), "tab:purple"),
               (f"{_threads(report)} threads", lambda record: _threaded(record).get("tasks_per_s"), "tab:cyan"),
               ("bulk", lambda record: record["bulk_submit"].get("tasks_per_s"), "tab:olive"))
    for shift, (name, rate_of, colour) in zip((-width, 0.0, width), submits):
        values = [rate_of(record) or 0.0 for record in records]
        submit_bars = submit_axes.bar([p + shift for p in positions], values, width, label=name, color=colour)
        submit_axes.bar_label(submit_bars, labels=[f"{v:,.0f}" if v else "—" for v in values], fontsize=6)
    submit_axes.set_yscale("log")
    submit_axes.set_xticks(positions, labels, fontsize=8)
    submit_axes.set_ylabel("tasks/s (log scale)")
    submit_axes.set_title("submit, no worker running")
    submit_axes.grid(True, axis="y", which="both", alpha=0.3)
    submit_axes.legend(fontsize=8)
    drain = [record.get("tasks_per_s") or 0.0 for record in records]
    colours = ["tab:blue" if record["system"].startswith("kittiwake") else "tab:gray" for record in records]
    bars = drain_axes.bar(positions, drain, color=colours)
    drain_axes.bar_label(bars, labels=[f"{value:,.0f}" if value else "—" for value in drain], fontsize=8)
    drain_axes.set_xticks(positions, labels, fontsize=8)
    drain_axes.set_ylabel("tasks/s")
    drain_axes.set_title(f"drain: {report['settings']['tasks']:,} null tasks, "
                         f"{report['settings']['processes']} worker processes")
    drain_axes.grid(True, axis="y", alpha=0.3)
    width = 0.38
    for shift, key, colour in ((-width / 2, "p50", "tab:green"), (width / 2, "p99", "tab:orange")):
        values = [(record.get("latency_ms") or {}).get(key) or 0.0 for record in records]
        latency_bars = latency_axes.bar([p + shift for p in positions], values, width, label=key, color=colour)
        latency_axes.bar_label(latency_bars, labels=[f"{v:.3g}" if v else "" for v in values], fontsize=7)
    latency_axes.set_yscale("log")
    latency_axes.set_xticks(positions, labels, fontsize=8)
    latency_axes.set_ylabel("ms (log scale)")
    latency_axes.set_title(f"submit → start on an idle system, {report['settings']['latency_samples']:,} samples")
    latency_axes.grid(True, axis="y", which="both", alpha=0.3)
    latency_axes.legend()
    figure.suptitle(f"kittiwake bench peers — {report['machine']['cpu_model']}, {report['machine']['cores']} cores",
                    fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    pyplot.close(figure)
    return True
