"""The pipeline demo's check: the report recomputed in plain Python and compared exactly.

Spark's figures are checked three ways, each an exact comparison (counts are
integers, revenue a decimal):

1. shards: for a sample of shards — the shard of the top user by revenue, and
   more picked with a seed — the raw CSV is read with the `csv` module,
   cleaned by `rules.clean_row`, deduplicated, joined with the user table
   and summed in plain Python; the result must equal the figures Spark wrote
   for that shard (every row: per country and plan, event type, user, page);
2. merge: the figures of all shards, summed in Python, must equal the
   figures the report step wrote, and the report's rows (top users, pages, …)
   must be what those figures give;
3. totals: the number of clean events must be what the generator says it
   wrote (`Manifest.clean_rows`).

`check_run` returns a `CheckResult`: what was compared and every difference
found (at most a few per kind, for the message).
"""

from __future__ import annotations

import csv
import random
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from kittiwake.demo import rules
from kittiwake.demo.dataset import Manifest, Shard

MAX_DIFFERENCES_SHOWN = 5


@dataclass
class CheckResult:
    """What the check compared and the differences it found (empty: the report is right)."""

    shards_checked: list[int] = field(default_factory=list)
    rows_read: int = 0  # raw CSV rows read in plain Python
    figures_compared: int = 0
    differences: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.differences


def shard_figures(shard: Shard, users_path: str) -> tuple[rules.Figures, int]:
    """The figures of one shard, from its raw CSV, in plain Python; and the rows read."""
    import pyarrow.parquet as parquet

    table = parquet.read_table(users_path, columns=["user_id", "country", "plan"],
                               filters=[("user_id", ">=", shard.user_start), ("user_id", "<", shard.user_end)])
    segments = {user: (country, plan) for user, country, plan in
                zip(*(table.column(name).to_pylist() for name in ("user_id", "country", "plan")))}
    events: dict[int, rules.CleanRow] = {}
    rows = 0
    with open(shard.path, newline="") as lines:
        reader = csv.reader(lines)
        next(reader, None)  # the header
        for fields in reader:
            rows += 1
            event = rules.clean_row(fields)
            if event is not None:
                events.setdefault(event[0], event)
    figures: dict[tuple[str, str, str], list[Any]] = {}

    def add(key: tuple[str, str, str], purchase: int, cents: int) -> None:
        slot = figures.setdefault(key, [0, 0, 0])
        slot[0] += 1
        slot[1] += purchase
        slot[2] += cents

    for _event_id, user_id, kind, cents, page in events.values():
        segment = segments.get(user_id)
        if segment is None:  # the inner join drops events of unknown users
            continue
        country, plan = segment
        purchase = 1 if kind == "purchase" else 0
        add(("country_plan", country, plan), purchase, cents)
        add(("event_type", kind, ""), purchase, cents)
        add(("user", str(user_id), f"{country}/{plan}"), purchase, cents)
        add(("page", page, ""), purchase, cents)
    exact: rules.Figures = {key: [count, purchases, Decimal(cents).scaleb(-2)]
                            for key, (count, purchases, cents) in figures.items()}
    return exact, rows


def read_figures(path: str | Path) -> rules.Figures:
    """Figures Spark wrote as Parquet, as exact Python values."""
    import pyarrow.parquet as parquet

    return rules.add_figures({}, parquet.read_table(str(path)).to_pylist())


def compare(expected: rules.Figures, actual: rules.Figures, what: str, result: CheckResult) -> None:
    """Note every figure that differs (or is missing on one side) in `result`."""
    found = 0
    for key in sorted(set(expected) | set(actual)):
        result.figures_compared += 1
        want, got = expected.get(key), actual.get(key)
        if want is None or got is None or [int(want[0]), int(want[1]), Decimal(want[2])] != \
                [int(got[0]), int(got[1]), Decimal(got[2])]:
            found += 1
            if found <= MAX_DIFFERENCES_SHOWN:
                result.differences.append(f"{what}: {'/'.join(key)}: plain Python {want}, Spark {got}")
    if found > MAX_DIFFERENCES_SHOWN:
        result.differences.append(f"{what}: {found - MAX_DIFFERENCES_SHOWN} more differences")


def sample_shards(manifest: Manifest, summary: dict[str, Any], count: int, seed: int = 7) -> list[Shard]:
    """`count` shards: the top user's first, then others picked with `seed` (all when count >= shards)."""
    shards = manifest.shards
    if count >= len(shards):
        return list(shards)
    chosen: list[Shard] = []
    for user in summary.get("top_users", [])[:1]:
        chosen += [shard for shard in shards if shard.user_start <= user["user_id"] < shard.user_end]
    others = [shard for shard in shards if shard not in chosen]
    random.Random(seed).shuffle(others)
    return (chosen + others)[:max(1, count)]


def check_run(manifest: Manifest, summary: dict[str, Any], shard_figure_paths: dict[int, str],
              report_figures_path: str, sample: int, also: list[int] = []) -> CheckResult:
    """Check a run's report (see the module docstring); `shard_figure_paths` maps shard index to
    the Parquet of its figures, `sample` is how many shards to recompute in plain Python (`also`:
    these shards besides)."""
    result = CheckResult()
    chosen = sample_shards(manifest, summary, sample)
    chosen += [shard for shard in manifest.shards if shard.index in also and shard not in chosen]
    for shard in chosen:
        expected, rows = shard_figures(shard, manifest.users_path)
        result.rows_read += rows
        result.shards_checked.append(shard.index)
        compare(expected, read_figures(shard_figure_paths[shard.index]), f"shard {shard.index}", result)
    merged: rules.Figures = {}
    for index in sorted(shard_figure_paths):
        rules.add_figures(merged, rules.figure_rows(read_figures(shard_figure_paths[index])))
    report_figures = read_figures(report_figures_path)
    compare(merged, report_figures, "report figures vs the sum of the shards'", result)
    expected_summary = rules.report_from_rows(rules.figure_rows(report_figures))
    _compare_summary(expected_summary, summary, result)
    if summary.get("totals", {}).get("events") != manifest.clean_rows:
        result.differences.append(f"clean events: the generator wrote {manifest.clean_rows:,}, "
                                  f"the report counts {summary.get('totals', {}).get('events')}")
    return result


def _compare_summary(expected: dict[str, Any], actual: dict[str, Any], result: CheckResult) -> None:
    for section in expected:
        want, got = expected[section], actual.get(section)
        if _plain(want) != _plain(got):
            result.differences.append(f"report section {section}: Python gives {_head(want)}, Spark {_head(got)}")


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _head(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 300 else text[:300] + "…"
