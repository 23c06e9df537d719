"""What `kittiwake bench workers` shows: one table row per figure, and a chart.

The table: tasks, tasks/s (the drains), efficiency and the longest
idle-while-waiting (the slot figures), the reference and Kittiwake's ratio
to it, the target and whether it was met, and the row's notes (why it
failed). The chart (`--plot`, matplotlib's headless Agg backend) has a panel
for the drains beside the lean ceiling, and one per slot figure: each slot's
tasks over time (long tasks dark, short ones light) and, in red, where the
slot was idle while a task waited for at least `DRAWN_IDLE_MS` (shorter
stretches, the gaps between two short tasks, would paint whole rows red at
this scale; the table's figures count them all).
"""

from __future__ import annotations

from typing import Any, Mapping

from rich.console import Console
from rich.table import Table

from kittiwake.bench import references
from kittiwake.bench.report import describe_target, headless_pyplot
from kittiwake_benchmarks.workers.run import Timeline
from kittiwake_benchmarks.workers.slots import slot_timelines

DRAWN_IDLE_MS = 2.0


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def _rate(value: float | None) -> str:
    return f"{value:,.0f}" if value else "—"


def _target(record: Mapping[str, Any]) -> str:
    target = record.get("target") or {}
    parts = []
    for key, bound in target.items():
        if key == "efficiency_min":
            parts.append(f"efficiency ≥ {bound:.0%}")
        elif key == "idle_while_waiting_ms_max":
            parts.append(f"idle while waiting ≤ {bound:g} ms")
        else:
            parts.append(describe_target({key: bound}))
    return ", ".join(parts)


def _reference(record: Mapping[str, Any]) -> str:
    reference = record.get("reference")
    if not reference:
        return "—"
    if reference.get("tasks_per_s"):
        return f"lean ceiling {reference['tasks_per_s']:,.0f}/s"
    if reference.get("makespan_s") is not None:
        return f"ideal {reference['makespan_s']:.2f} s, took {record['from_submit_s']:.2f} s"
    return "—"


def _notes(record: Mapping[str, Any]) -> str:
    """Only what needs a reader's attention: a failure, tasks left behind, slots that ran nothing."""
    if record["status"] != "ok":
        return f"[red]{record['status']}: {(record.get('reason') or '').splitlines()[0][:160]}"
    notes = []
    if record.get("left_in_queue"):
        notes.append(f"[yellow]{record['left_in_queue']:,} left in the queue")
    if record.get("slots_seen") is not None and record["slots_seen"] < record["slots"]:
        notes.append(f"[yellow]{record['slots_seen']} of {record['slots']} slots ran a task")
    return "; ".join(notes)


def _details(record: Mapping[str, Any]) -> str | None:
    """One line of where the time went, under the table."""
    if record["status"] != "ok":
        return None
    parts = [f"app.map took {record['submit_s']:.2f} s ({record['submit_tasks_per_s'] or 0:,.0f} tasks/s), "
             f"first task started {record['first_start_after_submit_ms']:,.0f} ms after the first submit"]
    if record.get("after_submit_s") is not None:
        parts.append(f"the end came {record['after_submit_s']:.2f} s after app.map returned")
    if record.get("makespan_s") is not None:
        parts.append(f"first start → last end {record['makespan_s']:.2f} s; "
                     f"{record['idle_while_waiting_over_limit']} stretches idle while waiting over "
                     f"{references.TARGET_WORKERS_IDLE_WHILE_WAITING_MS:g} ms, "
                     f"{record['idle_while_waiting_total_s']:.2f} slot-s in all, the longest on slot "
                     f"{record['idle_while_waiting_slot'] or '—'}")
    cpu = [f"{what} {record[key]:.0f}%" for what, key in (("broker", "broker_cpu_percent"),
                                                          ("workers", "workers_cpu_percent"))
           if record.get(key) is not None]
    if cpu:
        parts.append("CPU " + ", ".join(cpu) + " of one core")
    return f"{record['label']}: " + "; ".join(parts)


def workers_table(report: Mapping[str, Any]) -> Table:
    settings = report["settings"]
    extra = " ".join(settings["worker_args"])
    title = (f"kittiwake bench workers — `kittiwake worker --processes {settings['processes']}"
             f"{' ' + extra if extra else ''}`, {'other' if extra else 'default'} flags "
             f"{'at their defaults' if extra else 'otherwise'}; {settings['durability']} broker; "
             f"app.map chunk {settings['chunk']:,}")
    table = Table(title=title, title_justify="left")
    table.add_column("figure", no_wrap=True)
    table.add_column("slots", no_wrap=True)
    table.add_column("tasks", justify="right")
    table.add_column("tasks/s", justify="right")
    table.add_column("efficiency", justify="right")
    table.add_column("idle while waiting, longest", justify="right")
    table.add_column("reference", no_wrap=True)
    table.add_column("× ref", justify="right")
    table.add_column("target", no_wrap=True)
    table.add_column("met", justify="center")
    notes = [_notes(record) for record in report["workers"].values()]
    if any(notes):
        table.add_column("notes")
    for record, note in zip(report["workers"].values(), notes):
        met = record.get("meets_target")
        idle = record.get("idle_while_waiting_ms")
        table.add_row(
            record["label"],
            (f"{settings['processes']} × {record['slots'] // settings['processes']}"
             if record.get("slots") else "—"),
            f"{record['tasks']:,}" if record.get("tasks") else "—",
            _rate(record.get("tasks_per_s")),
            _percent(record.get("efficiency")),
            "—" if idle is None else f"{idle:,.1f} ms",
            _reference(record),
            f"{record['ratio']:.2f}" if record.get("ratio") else "—",
            _target(record),
            "" if met is None else ("[green]yes" if met else "[red]no"),
            *([note] if any(notes) else []),
        )
    return table


def show(console: Console, report: Mapping[str, Any]) -> None:
    console.print(workers_table(report))
    for record in report["workers"].values():
        line = _details(record)
        if line:
            console.print(f"[dim]{line}")
    lean = report.get("lean_ceiling")
    if lean:
        text = f"{lean['tasks_per_s']:,.0f} tasks/s" if lean.get("tasks_per_s") else f"failed: {lean.get('error')}"
        console.print(f"[dim]lean ceiling: {text} — {lean['source']}")
    load = report["load_average"]
    console.print("[dim]drains: tasks ÷ (first submit → last task's end, or last result collected); efficiency: "
                  "run time ÷ (slots × first start → last end); idle while waiting: the longest stretch one slot "
                  "ran nothing while a submitted task had not started; × ref above 1 is better. Load average "
                  f"before and after: {load['before'][0]:.2f}, {load['after'][0]:.2f} "
                  "(other processes on this machine)")


def _drain_panel(axes: Any, report: Mapping[str, Any]) -> None:
    records = report["workers"]
    bars: list[tuple[str, float, float | None]] = []
    for name in ("map_drain", "map_results"):
        record = records.get(name)
        if record is not None:
            bars.append((record["label"].replace(", ", ",\n"), record.get("tasks_per_s") or 0.0,
                         (record.get("target") or {}).get("tasks_per_s_min")))
    lean = report.get("lean_ceiling") or {}
    if lean.get("tasks_per_s"):
        bars.append(("lean ceiling", lean["tasks_per_s"], None))
    positions = list(range(len(bars)))
    drawn = axes.bar(positions, [value for _, value, _ in bars],
                     color=["tab:gray" if label == "lean ceiling" else "tab:blue" for label, _, _ in bars])
    axes.bar_label(drawn, labels=[f"{value:,.0f}" if value else "—" for _, value, _ in bars], fontsize=8)
    for position, (_, _, target) in zip(positions, bars):
        if target:
            axes.hlines(target, position - 0.4, position + 0.4, colors="tab:red", linestyles="dashed")
    axes.set_xticks(positions, [label for label, _, _ in bars], fontsize=8)
    axes.set_ylabel("tasks/s (dashed: target)")
    axes.set_title(f"app.map drain, {report['settings']['tasks']:,} null tasks", fontsize=9)
    axes.grid(True, axis="y", alpha=0.3)


def _slot_panel(axes: Any, title: str, timeline: Timeline) -> None:
    begin = timeline.submitted_at
    timelines = slot_timelines(timeline.runs, timeline.acknowledged, timeline.slots)
    for row, slot in enumerate(timelines):
        for long in (True, False):
            spans = [(run.started - begin, run.ended - run.started) for run in slot.runs
                     if (run.ended - run.started >= timeline.long_secs / 2) == long]
            if spans:
                axes.broken_barh(spans, (row - 0.35, 0.7), color="tab:blue" if long else "tab:cyan")
        idle = [(start - begin, stop - start) for start, stop in slot.idle_while_waiting
                if stop - start >= DRAWN_IDLE_MS / 1000]
        if idle:
            axes.broken_barh(idle, (row - 0.15, 0.3), color="tab:red")
    axes.set_yticks(range(len(timelines)), [slot.name for slot in timelines], fontsize=7)
    axes.set_xlabel("seconds from the first submit")
    axes.set_title(title, fontsize=9)
    axes.grid(True, axis="x", alpha=0.3)


def write_chart(path: str | None, report: Mapping[str, Any], timelines: Mapping[str, Timeline]) -> bool:
    """The drains and each slot figure's timeline as a PNG; False without matplotlib or anything to draw."""
    if not path:
        return False
    pyplot = headless_pyplot()
    if pyplot is None:
        return False
    drains = any(name in report["workers"] for name in ("map_drain", "map_results"))
    panels = int(drains) + len(timelines)
    if panels == 0:
        return False
    figure, axes_list = pyplot.subplots(1, panels, figsize=(6 * panels, 5), squeeze=False)
    axes_iter = iter(axes_list[0])
    if drains:
        _drain_panel(next(axes_iter), report)
    for name, timeline in timelines.items():
        record = report["workers"][name]
        title = (f"{record['label']}: efficiency {_percent(record.get('efficiency'))}, "
                 f"longest idle while waiting {record.get('idle_while_waiting_ms', 0):,.0f} ms\n"
                 f"(red: a slot idle while a task waited, stretches ≥ {DRAWN_IDLE_MS:g} ms)")
        _slot_panel(next(axes_iter), title, timeline)
    figure.suptitle(f"kittiwake bench workers — {report['machine']['cpu_model']}, {report['machine']['cores']} cores",
                    fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    pyplot.close(figure)
    return True
