"""The headline figures, from the benchmark records committed in docs/figures/headline.json.

That file has the shape every benchmark writes (`kittiwake.bench.report`): `{"machine", "settings",
"<benchmark>": {figure: record}}`, a record holding `tasks_per_s`, `latency_ms`, `ratio`,
`reference`, `target` and `meets_target`; `headline` lists the (benchmark, figure) pairs shown, in
order. The README's table of headline figures is these rows (a test compares them).

`report_table` renders a whole report of one run — `kittiwake bench ops|flows|cluster --json`, the
file committed as written under docs/figures/bench-*.json — as a table of its figure records (tasks/s,
p50, p99, the metrics its target names, the target, met) with the machine and its load, so the
performance page's tables of those benchmarks are the files' numbers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RECORDS = Path(__file__).resolve().parents[1] / "figures" / "headline.json"
HEADER = "| figure | Kittiwake | reference | × reference |\n| --- | ---: | --- | ---: |"


def load() -> dict[str, Any]:
    return json.loads(RECORDS.read_text())


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:g}"


def _measured(record: dict[str, Any]) -> str:
    if record.get("tasks_per_s") is not None:
        return f"{_number(record['tasks_per_s'])} tasks/s"
    if record.get("mb_per_s") is not None:
        return f"{_number(record['mb_per_s'])} MB/s"
    latency = record["latency_ms"]
    return f"p50 {latency['p50']:g} ms, p99 {latency['p99']:g} ms"


def _reference(reference: dict[str, Any]) -> str:
    if "tasks_per_s" in reference:
        return f"{reference['name']}: {_number(reference['tasks_per_s'])} tasks/s"
    if "mb_per_s" in reference:
        return f"{reference['name']}: {_number(reference['mb_per_s'])} MB/s"
    return reference["name"]


def headline_rows() -> list[str]:
    records = load()
    rows = []
    for benchmark, name in records["headline"]:
        record = records[benchmark][name]
        rows.append(f"| {record['title']} (`{record['command']}`) | {_measured(record)} | "
                    f"{_reference(record['reference'])} | {_number(record['ratio'])}× |")
    return rows


def machine_line() -> str:
    machine = load()["machine"]
    return (f"Measured on {machine['cpu_model']}, {machine['memory_gb']} GB, {machine['kernel']}, {machine['python']}, "
            f"SQLite {machine['sqlite']}, {machine['load_event_loop']}; durability `{load()['settings']['durability']}`.")


def headline_table() -> str:
    return HEADER + "\n" + "\n".join(headline_rows()) + "\n\n" + machine_line() + "\n"


# ------------------------------------------------------------ whole reports of one run

REPORTS = {  # part name -> (file under docs/figures, the report's section of figure records)
    "bench-ops": ("bench-ops.json", "ops"),
    "bench-flows": ("bench-flows.json", "flows"),
    "bench-cluster": ("bench-cluster.json", "cluster"),
}
REPORT_HEADER = ("| figure | tasks/s | p50 ms | p99 ms | measured against the target | target | met |\n"
                 "| --- | ---: | ---: | ---: | --- | --- | :---: |")


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.4g}"
    return str(value)


def _target_metrics(record: dict[str, Any]) -> str:
    """Each metric the target names, as the record has it (`ratio 1.74`, `overhead_percent 17.1`)."""
    parts = []
    for key in record.get("target") or {}:
        metric = key.rpartition("_")[0]
        if metric == "tasks_per_s" or metric.startswith("latency_ms_"):
            continue  # in their own columns
        parts.append(f"{metric} {_cell(record.get(metric))}")
    return ", ".join(parts)


def report_table(part: str) -> str:
    """Every figure record of one committed `kittiwake bench … --json` report, as the command's table
    shows them, with the machine and its load: the page's numbers are the file's."""
    from kittiwake.bench.report import describe_target

    name, section = REPORTS[part]
    report = json.loads((RECORDS.parent / name).read_text())
    rows = []
    for figure, record in report[section].items():
        if not isinstance(record, dict) or not ({"tasks_per_s", "latency_ms", "target"} & set(record)):
            continue
        latency = record.get("latency_ms") or {}
        met = record.get("meets_target")
        label = f"`{figure}`" + (f" {record['label']}" if record.get("label") else "")
        rows.append(f"| {label} | {_cell(record.get('tasks_per_s'))} | "
                    f"{_cell(latency.get('p50'))} | {_cell(latency.get('p99'))} | {_target_metrics(record)} | "
                    f"{describe_target(record.get('target'))} | {'' if met is None else ('✓' if met else '✗')} |")
    machine = report["machine"]
    load = report.get("load_average") or {}
    line = (f"`docs/figures/{name}`, as `kittiwake bench … --json` wrote it: {machine['cpu_model']}, "
            f"{machine['cores']} cores, {machine['python']}, SQLite {machine['sqlite']}, {machine['load_event_loop']}"
            + (f"; load average {load['before'][0]} before, {load['after'][0]} after" if load else "") + ".")
    return REPORT_HEADER + "\n" + "\n".join(rows) + "\n\n" + line + "\n"
