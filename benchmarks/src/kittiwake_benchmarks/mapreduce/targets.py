"""The targets of `kittiwake bench mapreduce`, judged from its result rows (met or not, never asserted).

Per app: Kittiwake's MB/s ÷ Spark's at least `references.TARGET_MAPREDUCE_RATIO`
at each partition size named there (10 at 100 KB, 4 at 1 MB, 0.8 at 100 MB),
and Kittiwake's MB/s across the partition sizes from 1 MB to 100 MB varying by
at most `TARGET_MAPREDUCE_SPREAD` of its highest ((max − min) ÷ max). A target
whose rows were not run (or failed) is `met: None`.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from kittiwake.bench.references import MAPREDUCE_SPREAD_RANGE, TARGET_MAPREDUCE_RATIO, TARGET_MAPREDUCE_SPREAD


def native_spread(rates: Iterable[float | None]) -> float | None:
    """(max − min) ÷ max of the rates; None with fewer than two known rates."""
    known = [rate for rate in rates if rate]
    if len(known) < 2:
        return None
    return (max(known) - min(known)) / max(known)


def evaluate_targets(results: Sequence[Mapping[str, Any]], apps: Iterable[str]) -> dict[str, Any]:
    """`{"ratio_min": {bytes: bound}, "native_spread_max": bound, "checks": [{app, target, value, met}]}`."""
    checks: list[dict[str, Any]] = []
    for app in apps:
        rows = {row["partition_size_bytes"]: row for row in results if row["app"] == app}
        for size, bound in TARGET_MAPREDUCE_RATIO.items():
            ratio = rows[size].get("ratio") if size in rows else None
            checks.append({"app": app, "target": "ratio_min", "partition_size_bytes": size, "bound": bound,
                           "value": ratio, "met": None if ratio is None else ratio >= bound})
        low, high = MAPREDUCE_SPREAD_RANGE
        spread = native_spread(row.get("native_mb_s") for size, row in rows.items() if low <= size <= high)
        checks.append({"app": app, "target": "native_spread_max", "partition_size_bytes": None,
                       "bound": TARGET_MAPREDUCE_SPREAD, "value": None if spread is None else round(spread, 4),
                       "met": None if spread is None else spread <= TARGET_MAPREDUCE_SPREAD})
    return {"ratio_min": {str(size): bound for size, bound in TARGET_MAPREDUCE_RATIO.items()},
            "native_spread_max": TARGET_MAPREDUCE_SPREAD,
            "native_spread_range_bytes": list(MAPREDUCE_SPREAD_RANGE),
            "checks": checks}
