"""The headline figures, from the benchmark records committed in docs/figures/headline.json.

That file has the shape every benchmark writes (`kittiwake.bench.report`): `{"machine", "settings",
"<benchmark>": {figure: record}}`, a record holding `tasks_per_s`, `latency_ms`, `ratio`,
`reference`, `target` and `meets_target`; `headline` lists the (benchmark, figure) pairs shown, in
order. The README's table of headline figures is these rows (a test compares them).
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
