"""The main job (`kittiwake demo`): a data pipeline on Spark, run through the broker and checked.

1. A broker on the embedded store starts (unless a URL is given), then a
   `kittiwake spark-worker` (one long-lived SparkSession, `local[2]`) and a
   `kittiwake worker` for the python steps, all for `kittiwake.demo.shop_flow`;
2. while their JVM and interpreters start, the dataset is generated
   (`dataset.generate`: event logs sharded by user and a user table, a few
   hundred MB by default, with a progress bar);
3. one run of the flow: split into shards, clean each on Spark, cut the user
   table per shard, join both by shard (the broker's join), merge the
   sequence into the report — with a live table of every step's tokens and
   jobs read from the broker;
4. the report is printed (revenue per country and plan, events per type, top
   users and pages), with the run's figures (rows, MB, seconds, rows/s),
   where the time went per step, the broker's queue statistics, and the
   check (`check`): the figures of sampled shards recomputed in plain Python
   from the generated files, the merge re-added, compared exactly —
   "report checked: OK", or the differences and exit code 1.
5. with `--rerun`: one of the shards changes (`dataset.change_shard`: drawn
   again) and the flow runs again on the same broker. Every step of the flow
   declares itself deterministic, so each job whose inputs kept their
   fingerprint reuses the first run's outputs (`kittiwake.flow.reuse`): only
   the changed shard's clean, users and enrich and the report run. The second
   report is checked the same way, and the jobs run and reused per step and
   the time against the first run's are printed.

The first run is started fresh (`flow.run(fresh=True)`): it computes
everything even on a broker that ran the demo before.
"""

from __future__ import annotations

import copy
import json
import shutil
import tempfile
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn, TransferSpeedColumn
from rich.table import Table

from kittiwake.demo import check as report_check
from kittiwake.demo import live, step_times
from kittiwake.demo.dataset import Manifest, default_shards, generate
from kittiwake.demo.services import Services
from kittiwake.demo.transforms import SESSION_SETTINGS

FLOW_REFERENCE = "kittiwake.demo.shop_flow:flow"
DEFAULT_SIZE = "300MB"
SPARK_MASTER = "local[2]"
SPARK_READY_TIMEOUT_SECS = 300.0
RUN_TIMEOUT_SECS = 3600.0
DEFAULT_CHECK_SHARDS = 2
TOP_ROWS = 10


@dataclass
class DemoSettings:
    size_bytes: int
    shards: int | None = None
    check_shards: int = DEFAULT_CHECK_SHARDS
    url: str | None = None  # a running broker; None starts one
    keep: Path | None = None  # keep everything here instead of a throwaway folder
    seed: int = 2025
    spark_master: str = SPARK_MASTER
    spark_concurrency: int = 2
    python_processes: int = 1
    python_concurrency: int = 2
    rerun: bool = False  # change one shard and run again: the second run reuses the rest


@dataclass
class DemoResult:
    manifest: Manifest
    run: str
    state: str
    reason: str | None
    seconds: dict[str, float]
    summary: dict[str, Any]
    check: report_check.CheckResult
    times: step_times.RunTimes
    steps: list[dict[str, Any]]
    joins: list[dict[str, Any]]  # per step: its join and its job queue
    broker_cpu_secs: float | None
    folder: str | None = None
    notes: list[str] = field(default_factory=list)
    rerun: dict[str, Any] | None = None  # --rerun: the second run's figures and its check

    @property
    def ok(self) -> bool:
        return self.state == "done" and self.check.ok and (self.rerun is None or bool(self.rerun.get("ok")))

    def as_dict(self) -> dict[str, Any]:
        manifest = self.manifest
        run_secs = self.seconds.get("run", 0.0)
        return {
            "ok": self.ok, "run": self.run, "state": self.state, "reason": self.reason,
            "dataset": {"bytes": manifest.bytes, "lines": manifest.lines, "shards": len(manifest.shards),
                        "users": manifest.users, "clean_rows": manifest.clean_rows},
            "seconds": {key: round(value, 3) for key, value in self.seconds.items()},
            "rows_per_s": round(manifest.lines / run_secs, 1) if run_secs else None,
            "mb_per_s": round(manifest.bytes / 1e6 / run_secs, 2) if run_secs else None,
            "report": self.summary,
            "check": {"ok": self.check.ok, "shards_checked": self.check.shards_checked,
                      "rows_read": self.check.rows_read, "figures_compared": self.check.figures_compared,
                      "differences": self.check.differences},
            "times": self.times.as_dict(), "steps": self.steps, "joins": self.joins,
            "broker_cpu_secs": self.broker_cpu_secs, "folder": self.folder, "rerun": self.rerun,
        }


def run_demo(settings: DemoSettings, console: Console, *, show: bool = True) -> DemoResult:
    """Everything the module docstring says; the services are stopped and the folder removed
    (unless `settings.keep`) before it returns."""
    from kittiwake.client import Client
    from kittiwake.demo.shop_flow import flow, jobs_per_step, read_timings
    from kittiwake.flow import Dataset

    root = settings.keep or Path(tempfile.mkdtemp(prefix="kittiwake-demo-"))
    root.mkdir(parents=True, exist_ok=True)
    services = Services(root, settings.url)
    seconds: dict[str, float] = {}
    try:
        with console.status("starting the broker", spinner="dots") if show else nullcontext():
            url = services.start_broker()
        if show and services.dashboard_url is not None:
            console.print(f"the broker's dashboard, while the demo runs: [link]{services.dashboard_url}[/]")
        spark = services.start_spark_worker(FLOW_REFERENCE, settings.spark_master, settings.spark_concurrency,
                                            SESSION_SETTINGS)
        services.start_python_workers(FLOW_REFERENCE, settings.python_processes, settings.python_concurrency)
        began = time.perf_counter()
        manifest = _generate(root / "dataset", settings, console, show)
        seconds["generate"] = time.perf_counter() - began
        began = time.perf_counter()
        with console.status("waiting for the spark-worker's SparkSession", spinner="dots") if show else nullcontext():
            spark.wait_for(" ready", SPARK_READY_TIMEOUT_SECS)
        seconds["spark_ready_wait"] = time.perf_counter() - began
        with Client(url) as client:
            cpu_before = services.broker_cpu_secs()
            started = time.time()
            handle = flow.run(client, {"dataset": Dataset.path(str(root / "dataset"))}, data_dir=str(root / "runs"),
                              fresh=True)
            status = live.follow(handle, jobs_per_step(len(manifest.shards)), console, started=started, show=show,
                                 timeout_secs=RUN_TIMEOUT_SECS, check=services.check_alive)
            ended = time.time()
            seconds["run"] = ended - started
            cpu_after = services.broker_cpu_secs()
            steps = _step_stats(client, flow)
            outputs = handle.outputs() if status.state == "done" else {}
        summary_output = outputs.get("report.summary")
        assert not isinstance(summary_output, list)  # each port of the report step holds one dataset
        summary: dict[str, Any] = summary_output.value if summary_output is not None else {}
        times = step_times.run_times(flow, read_timings(root / "runs", handle.id), started, ended)
        result = DemoResult(
            manifest=manifest, run=handle.id, state=status.state, reason=status.reason, seconds=seconds,
            summary=summary, check=report_check.CheckResult(), times=times,
            steps=[{"step": step.step, "engine": step.engine, "done": step.done, "dead": step.dead}
                   for step in status.steps],
            joins=steps,
            broker_cpu_secs=None if cpu_before is None or cpu_after is None else round(cpu_after - cpu_before, 3),
            folder=str(root) if settings.keep else None,
        )
        if status.state != "done":
            result.check.differences.append(f"the run ended {status.state}: {status.reason}")
            for dead in status.dead[:5]:
                result.notes.append(f"dead job {dead.step} {dead.key}: {dead.reason}")
            return result
        figures = outputs["report.figures"]
        assert not isinstance(figures, list)  # as the summary
        began = time.perf_counter()
        with console.status("checking the report in plain Python", spinner="dots") if show else nullcontext():
            result.check = report_check.check_run(
                manifest, summary, _shard_figure_paths(root / "runs", [handle.id], manifest),
                figures.uri or "", settings.check_shards)
        seconds["check"] = time.perf_counter() - began
        if settings.rerun:
            result.rerun = rerun(url, root, manifest, handle.id, seconds["run"], settings, console, show,
                                 services.check_alive)
        return result
    finally:
        services.stop()
        if settings.keep is None:
            shutil.rmtree(root, ignore_errors=True)


def _generate(folder: Path, settings: DemoSettings, console: Console, show: bool) -> Manifest:
    shards = settings.shards or default_shards(settings.size_bytes)
    columns = (TextColumn("[bold]generating {task.fields[what]}"), BarColumn(), DownloadColumn(),
               TransferSpeedColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, disable=not show) as progress:
        task = progress.add_task("generate", total=settings.size_bytes,
                                 what=f"event logs ({shards} shards) and users")
        manifest = generate(folder, settings.size_bytes, shards, settings.seed,
                            progress=lambda written: progress.update(task, completed=written))
        progress.update(task, completed=manifest.bytes, total=manifest.bytes)
    return manifest


def rerun(url: str, root: Path, manifest: Manifest, first_run: str, first_secs: float, settings: DemoSettings,
          console: Console, show: bool, check_alive: Any) -> dict[str, Any]:
    """Change one shard, run the flow again (reusing what did not change) and check its report."""
    from kittiwake.client import Client
    from kittiwake.demo.dataset import change_shard
    from kittiwake.demo.shop_flow import flow, jobs_per_step
    from kittiwake.flow import Dataset

    manifest = copy.deepcopy(manifest)  # the first run's result keeps the dataset it ran on
    changed = change_shard(manifest, len(manifest.shards) // 2).index
    with Client(url) as client:
        started = time.time()
        handle = flow.run(client, {"dataset": Dataset.path(str(root / "dataset"))}, data_dir=str(root / "runs"))
        status = live.follow(handle, jobs_per_step(len(manifest.shards)), console, started=started, show=show,
                             timeout_secs=RUN_TIMEOUT_SECS, check=check_alive)
        outputs = handle.outputs() if status.state == "done" else {}
    seconds = (status.ended_at or time.time()) - started
    record: dict[str, Any] = {
        "run": handle.id, "state": status.state, "changed_shard": changed, "seconds": round(seconds, 3),
        "ratio": round(seconds / first_secs, 3) if first_secs else None,
        "steps": [{"step": step.step, "done": step.done, "reused": step.reused} for step in status.steps],
    }
    if status.state != "done":
        record.update(ok=False, differences=[f"the re-run ended {status.state}: {status.reason}"])
        return record
    summary, figures = outputs["report.summary"], outputs["report.figures"]
    assert not isinstance(summary, list) and not isinstance(figures, list)
    with console.status("checking the re-run's report in plain Python", spinner="dots") if show else nullcontext():
        check = report_check.check_run(manifest, summary.value, _shard_figure_paths(root / "runs", [handle.id, first_run],
                                                                                    manifest),
                                       figures.uri or "", max(settings.check_shards, 1), also=[changed])
    record.update(ok=check.ok, differences=check.differences, shards_checked=check.shards_checked)
    return record


def _shard_figure_paths(runs: Path, run_ids: list[str], manifest: Manifest) -> dict[int, str]:
    """Shard -> its figures' Parquet: in the first of `run_ids` whose folder has it (a re-run's
    reused jobs left theirs in the run they reused), the newest attempt's (the one that finished
    the job: `tokens.output_path`)."""
    from kittiwake.flow.tokens import LEASE_FOLDER_PREFIX, output_path

    found: dict[int, str] = {}
    for shard in manifest.shards:
        jobs = [Path(output_path(str(runs), run, "enrich", "out", [shard.index])) for run in run_ids]
        attempts = [sorted((folder for folder in job.glob(f"{LEASE_FOLDER_PREFIX}*")),
                           key=lambda folder: int(folder.name[len(LEASE_FOLDER_PREFIX):])) for job in jobs]
        found[shard.index] = str(next((folders[-1] for folders in attempts if folders), jobs[0]))
    return found


def _step_stats(client: Any, flow: Any) -> list[dict[str, Any]]:
    """Per step: its join's ports and tokens still waiting, and its job queue's statistics."""
    joins = {join.name: join for join in client.list_joins(f"^{flow.names.group}#")}
    stats = {row.queue: row for row in client.stats([step.job_queue for step in flow])}
    rows = []
    for step in flow:
        join, row = joins.get(step.join), stats[step.job_queue]
        ports = ", ".join(f"{port} ({mode})" for port, _queue, mode in join.ports) if join else "—"
        rows.append({"step": step.name, "join": step.join, "ports": ports,
                     "tokens_waiting": join.tokens_waiting if join else 0, "job_queue": step.job_queue,
                     "size": row.size, "dead": row.dead, "enqueue_rate_1m": round(row.enqueue_rate_1m, 2),
                     "dequeue_rate_1m": round(row.dequeue_rate_1m, 2),
                     "avg_lease_secs": None if row.avg_lease_secs is None else round(row.avg_lease_secs, 3)})
    return rows


# ------------------------------------------------------------------ printing


def show_result(console: Console, result: DemoResult) -> None:
    summary = result.summary
    console.print()
    for table in _report_tables(summary) if summary else []:
        console.print(table)
    manifest = result.manifest
    run_secs = result.seconds.get("run", 0.0)
    console.print(_times_table(result))
    console.print(_queues_table(result))
    if run_secs:
        console.print(
            f"[bold]{manifest.lines:,} rows ({manifest.bytes / 1e6:,.1f} MB in {len(manifest.shards)} shards, "
            f"{manifest.users:,} users) → {summary.get('totals', {}).get('events', 0):,} clean events "
            f"in {run_secs:.1f} s: {manifest.lines / run_secs:,.0f} rows/s, {manifest.bytes / 1e6 / run_secs:.1f} MB/s"
        )
    console.print(
        f"[dim]generated in {result.seconds.get('generate', 0):.1f} s; spark-worker ready "
        f"{result.seconds.get('spark_ready_wait', 0):.1f} s after that; broker CPU "
        + (f"{result.broker_cpu_secs:.2f} s over the run" if result.broker_cpu_secs is not None else "not measured")
        + (f"; everything kept in {result.folder}" if result.folder else "")
    )
    for note in result.notes:
        console.print(f"[red]{note}")
    check = result.check
    if check.ok:
        console.print(f"[bold green]report checked: OK[/] — shards {', '.join(map(str, check.shards_checked))} "
                      f"recomputed in plain Python from {check.rows_read:,} raw rows; "
                      f"{check.figures_compared:,} figures compared exactly")
    else:
        console.print("[bold red]report checked: FAILED")
        for difference in check.differences:
            console.print(f"[red]  {difference}")
    if result.rerun is not None:
        _show_rerun(console, result.rerun)


def _show_rerun(console: Console, rerun: dict[str, Any]) -> None:
    table = Table(title=f"re-run {rerun['run']} after shard {rerun['changed_shard']} changed: {rerun['state']} in "
                        f"{rerun['seconds']:.1f} s ({rerun['ratio']:.2f}× the first run)" if rerun.get("ratio") else
                        f"re-run {rerun['run']}: {rerun['state']}", title_justify="left")
    for column in ("step", "jobs run", "jobs reused"):
        table.add_column(column, justify="left" if column == "step" else "right")
    for step in rerun["steps"]:
        table.add_row(step["step"], str(step["done"] - step["reused"]), str(step["reused"]))
    console.print(table)
    if rerun.get("ok"):
        console.print(f"[bold green]re-run's report checked: OK[/] — shards "
                      f"{', '.join(map(str, rerun.get('shards_checked', [])))} recomputed in plain Python")
    else:
        console.print("[bold red]re-run's report checked: FAILED")
        for difference in rerun.get("differences", []):
            console.print(f"[red]  {difference}")


def _money(text: str) -> str:
    """A revenue string ("1234567.80") with thousands separators for the tables."""
    return f"{Decimal(text):,.2f}"


def _report_tables(summary: dict[str, Any]) -> list[Table]:
    totals = summary["totals"]
    revenue = Table(title=f"revenue per country and plan (top {TOP_ROWS} of "
                          f"{len(summary['revenue_by_country_plan'])}; in all {_money(totals['revenue'])})",
                    title_justify="left")
    for column, justify in (("country", "left"), ("plan", "left"), ("events", "right"), ("purchases", "right"),
                            ("revenue", "right")):
        revenue.add_column(column, justify=justify)  # type: ignore[arg-type]
    for row in summary["revenue_by_country_plan"][:TOP_ROWS]:
        revenue.add_row(row["country"], row["plan"], f"{row['events']:,}", f"{row['purchases']:,}",
                        _money(row["revenue"]))
    types = Table(title="events per type", title_justify="left")
    for column in ("event type", "events", "purchases", "revenue"):
        types.add_column(column, justify="left" if column == "event type" else "right")
    for row in summary["events_by_type"]:
        types.add_row(row["event_type"], f"{row['events']:,}", f"{row['purchases']:,}", _money(row["revenue"]))
    users = Table(title=f"top {len(summary['top_users'])} users by revenue", title_justify="left")
    for column in ("user", "country/plan", "events", "purchases", "revenue"):
        users.add_column(column, justify="right" if column in ("events", "purchases", "revenue") else "left")
    for row in summary["top_users"]:
        users.add_row(str(row["user_id"]), row["segment"], f"{row['events']:,}", f"{row['purchases']:,}",
                      _money(row["revenue"]))
    pages = Table(title=f"top {len(summary['top_pages'])} pages by events", title_justify="left")
    for column in ("page", "events", "purchases", "revenue"):
        pages.add_column(column, justify="left" if column == "page" else "right")
    for row in summary["top_pages"]:
        pages.add_row(row["url"], f"{row['events']:,}", f"{row['purchases']:,}", _money(row["revenue"]))
    return [revenue, types, users, pages]


def _times_table(result: DemoResult) -> Table:
    times = result.times
    table = Table(title=f"where the time went: {times.wall_secs:.1f} s of run, {times.idle_secs:.2f} s with no step "
                        f"running (token hand-offs on the critical path)", title_justify="left")
    for column in ("step", "engine", "jobs", "busy s", "wait ms mean", "wait ms max"):
        table.add_column(column, justify="left" if column in ("step", "engine") else "right")
    for step in times.steps:
        row = step.as_dict()
        table.add_row(step.step, step.engine, str(step.jobs), f"{step.busy_secs:.2f}",
                      _ms(row["wait_ms_mean"]), _ms(row["wait_ms_max"]))
    return table


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def _queues_table(result: DemoResult) -> Table:
    table = Table(title="broker: each step is a join — its ports' tokens meet by key and start one job "
                        "(figures of the step's job queue)", title_justify="left")
    for column in ("step", "join ports", "jobs run", "tokens left waiting", "jobs left", "dead", "avg lease ms"):
        table.add_column(column, justify="left" if column in ("step", "join ports") else "right")
    done = {step["step"]: step["done"] for step in result.steps}
    for row in result.joins:
        lease = "—" if row["avg_lease_secs"] is None else f"{row['avg_lease_secs'] * 1000:,.0f}"
        table.add_row(row["step"], row["ports"], str(done.get(row["step"], "—")), str(row["tokens_waiting"]),
                      str(row["size"]), str(row["dead"]), lease)
    return table


def main(settings: DemoSettings, as_json: bool) -> int:
    console = Console(stderr=as_json)
    if not console.is_terminal:  # a log file or a pipe: room for the tables
        console = Console(stderr=as_json, width=max(console.width, 120))
    result = run_demo(settings, console, show=not as_json)
    if as_json:
        print(json.dumps(result.as_dict()))
    else:
        show_result(console, result)
    return 0 if result.ok else 1
