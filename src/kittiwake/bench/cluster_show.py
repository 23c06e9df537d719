"""What `kittiwake bench cluster` shows: one table of its figures with their targets, and a chart.

The table has a row per figure (value, target, met); the chart (matplotlib, headless)
four panels: drain rates by node count (broker-bound and user path), hops per pop against Fabriq's
model, each node's share of the load-deviation run, and the push latency CDF of one broker, of
two nodes and of two plain brokers pushed to in turn.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console

from kittiwake.bench.cluster_settings import (
    FABRIQ_LOAD_DEVIATION,
    TARGET_CPU_PER_TASK_RATIO_MAX,
    TARGET_EXTRA_REQUESTS_PER_TASK_MAX,
    TARGET_HOPS_TOLERANCE,
    TARGET_LOAD_DEVIATION_MAX,
    TARGET_PUSH_P50_EXTRA_MS,
    TARGET_RATIO_2_VS_1_MIN,
    USER_PATH_CEILING,
)
from kittiwake.bench.report import headless_pyplot, numbers_table

Row = tuple[str, str, str, bool | None]


def _num(value: Any, spec: str, suffix: str = "") -> str:
    return "—" if value is None else f"{value:{spec}}{suffix}"


def _status(records: Mapping[str, Any], key: str) -> str:
    record = records.get(key) or {}
    if record.get("status") == "failed":
        return f" [red](failed: {str(record.get('reason') or '').splitlines()[0][:80]})"
    return ""


def rows(report: Mapping[str, Any]) -> list[Row]:
    records = report["cluster"]
    drain, user = report["drain_per_s"], report["user_path_drain_per_s"]
    cpu, push = report["broker_cpu_us_per_task"], report["push_p50_ms"]
    plain = records.get("push_2_plain") or {}

    def met(key: str) -> bool | None:
        value = (records.get(key) or {}).get("meets_target")
        return value if isinstance(value, bool) else None

    def busy(key: str) -> str:
        """How busy the brokers were: near 100% a broker (200% two nodes), the drain is broker-bound."""
        record = records.get(key) or {}
        if record.get("broker_cpu_percent") is None:
            return ""
        return (f" (brokers {record['broker_cpu_percent']:.0f}% of a core, consumers "
                f"{_num(record.get('consumer_cpu_us_per_task'), '.1f')} µs/task)")

    out: list[Row] = [
        ("drain, 1 broker (batches of "
         f"{report['settings']['batch']:,}, {report['settings']['consumers']} consumers)",
         _num(drain["1"], ",.0f", " tasks/s") + busy("drain_1") + _status(records, "drain_1"), "", None),
        ("drain, 2 nodes", _num(drain["2"], ",.0f", " tasks/s") + busy("drain_2") + _status(records, "drain_2"), "",
         None),
        ("ratio_2_vs_1 (broker-bound)", _num(report["ratio_2_vs_1"], ".2f", "×") + " (at most "
         f"{_num((records.get('drain_2') or {}).get('cpu_ratio_ceiling'), '.2f', '×')} on "
         f"{report['machine']['cores']} cores at these CPU costs per task)", f"≥ {TARGET_RATIO_2_VS_1_MIN}×",
         met("drain_2")),
        ("user path (App + kittiwake worker), 1 broker", _num(user["1"], ",.0f", " tasks/s")
         + _status(records, "user_path_1"), "", None),
        ("user path, 2 nodes", _num(user["2"], ",.0f", " tasks/s") + _status(records, "user_path_2"), "", None),
        ("user_path_ratio_2_vs_1", _num(report["user_path_ratio_2_vs_1"], ".2f", "×"),
         f"expected ≤ {USER_PATH_CEILING}× (workers share the cores)", None),
        ("broker CPU per task, 1 broker / 2 nodes",
         f"{_num(cpu['1'], '.1f')} / {_num(cpu['2'], '.1f')} µs", "", None),
        ("cpu_per_task_ratio", _num(report["cpu_per_task_ratio"], ".3f", "×"), f"≤ {TARGET_CPU_PER_TASK_RATIO_MAX}×",
         met("cpu_per_task")),
    ]
    for nodes, hops in report["hops_per_pop"].items():
        record = records.get(f"hops_{nodes}") or {}
        detail = (f" (router: {_num(record.get('router_hops_per_pop'), '.3f')} steps beyond the first, "
                  f"{_num(record.get('requests_per_pop'), '.3f')} lease requests per pop; "
                  f"{record.get('durability', '')})")
        out.append((f"hops per pop, {nodes} nodes × {record.get('tasks', 0):,} tasks, one consumer",
                    f"{_num(hops['measured'], '.4f')} vs model {_num(hops['model'], '.4f')}{detail}"
                    + _status(records, f"hops_{nodes}"),
                    f"within ±{TARGET_HOPS_TOLERANCE:.0%}", met(f"hops_{nodes}")))
    load = records.get("load_deviation") or {}
    out += [
        ("extra_requests_per_task (batched consumer)", _num(report["extra_requests_per_task"], ".5f"),
         f"≤ {TARGET_EXTRA_REQUESTS_PER_TASK_MAX}", met("extra_requests")),
        (f"load_deviation, {load.get('label', '')}", _num(report["load_deviation"], ".2%") + _status(records, "load_deviation"),
         f"≤ {TARGET_LOAD_DEVIATION_MAX:.0%} (Fabriq {FABRIQ_LOAD_DEVIATION:.1%})", met("load_deviation")),
        ("push p50, 1 broker / 2 nodes", f"{_num(push['1'], '.3f')} / {_num(push['2'], '.3f')} ms (median of "
         f"paired differences {_num((records.get('push_2') or {}).get('paired_median_extra_ms'), '+.3f')} ms)"
         + _status(records, "push_2"), f"≤ one broker's + {TARGET_PUSH_P50_EXTRA_MS} ms", met("push_2")),
        ("push p50, 2 plain brokers in turn (reference: no cluster)",
         f"{_num(push.get('2_plain'), '.3f')} ms (paired: {_num(plain.get('paired_median_extra_ms'), '+.3f')} ms "
         f"vs 1 broker; 2 nodes {_num((records.get('push_2') or {}).get('paired_median_extra_vs_plain_pair_ms'), '+.3f')}"
         " ms vs it)", "", None),
    ]
    return out


def show(console: Console, report: Mapping[str, Any]) -> None:
    settings = report["settings"]
    console.print(numbers_table(
        f"kittiwake bench cluster — {settings['durability']} (hop runs: "
        f"{settings['hop_durability'] or settings['durability']}), "
        f"1 KB tasks, nodes on loopback ports of this machine", rows(report)))
    for record in report["cluster"].values():
        if record.get("reason"):
            console.print(f"[{'red' if record.get('status') == 'failed' else 'yellow'}]{record['label']}: "
                          f"{record['reason']}")
    load = report["load_average"]
    console.print(f"[dim]load average (1, 5, 15 min) before {load['before']}, after {load['after']}: "
                  "other processes share these cores")


def write_chart(path: str | None, report: Mapping[str, Any]) -> bool:
    """The four panels (module docstring); False without matplotlib."""
    if not path:
        return False
    pyplot = headless_pyplot()
    if pyplot is None:
        return False
    figure, axes = pyplot.subplots(2, 2, figsize=(11, 8))
    drains, hops_panel, load_panel, push_panel = axes.flat

    labels, values, colors = [], [], []
    for name, rates, color in (("broker-bound", report["drain_per_s"], "tab:blue"),
                               ("user path", report["user_path_drain_per_s"], "tab:orange")):
        for nodes in ("1", "2"):
            labels.append(f"{name}\n{'1 broker' if nodes == '1' else '2 nodes'}")
            values.append(rates.get(nodes) or 0.0)
            colors.append(color)
    drains.bar(range(len(values)), values, color=colors)
    drains.set_xticks(range(len(values)), labels, fontsize=8)
    drains.set_ylabel("tasks/s")
    drains.set_title(f"drain: ×{report['ratio_2_vs_1'] or 0:.2f} broker-bound, "
                     f"×{report['user_path_ratio_2_vs_1'] or 0:.2f} user path")

    hops = report["hops_per_pop"]
    counts = sorted(hops, key=int)
    positions = range(len(counts))
    hops_panel.bar([p - 0.2 for p in positions], [hops[c]["measured"] or 0.0 for c in counts], 0.4, label="measured")
    hops_panel.bar([p + 0.2 for p in positions], [hops[c]["model"] or 0.0 for c in counts], 0.4,
                   label="Fabriq's model")
    hops_panel.set_xticks(list(positions), [f"{c} nodes" for c in counts])
    hops_panel.set_ylabel("hops per pop")
    hops_panel.set_title("one consumer, one task per pop")
    hops_panel.legend()

    loads = report.get("node_loads") or {}
    load_panel.bar(range(len(loads)), list(loads.values()), color="tab:green")
    load_panel.set_xticks(range(len(loads)), list(loads), fontsize=8)
    if loads:
        mean = sum(loads.values()) / len(loads)
        load_panel.axhline(mean, color="black", linewidth=0.8, linestyle="--", label="mean")
        load_panel.legend()
    deviation = report.get("load_deviation")
    load_panel.set_title(f"FIFO tasks per node (worst {deviation:.2%} off the mean)" if deviation is not None
                         else "FIFO tasks per node")

    drawn = False
    for key, label in (("push_1", "1 broker"), ("push_2", "2 nodes"), ("push_2_plain", "2 plain brokers in turn")):
        record = report["cluster"].get(key) or {}
        latency = record.get("latency_ms")
        if latency:
            marks = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999), ("max", 1.0)]
            push_panel.plot([latency[name] for name, _ in marks], [q for _, q in marks], marker="o", label=label)
            drawn = True
    push_panel.set_xscale("log")
    push_panel.set_xlabel("push round trip (ms)")
    push_panel.set_ylabel("fraction")
    push_panel.set_title("single enqueue latency")
    if drawn:
        push_panel.legend()
    figure.suptitle("kittiwake bench cluster")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    pyplot.close(figure)
    return True
