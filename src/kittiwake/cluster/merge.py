"""Merging what several nodes answered into what one broker would have answered: pure functions.

A call the client splits over nodes (a batch enqueue, renew, dequeue, release, cancel) gets its
outcomes back in the order of its items (`in_order`). A call it fans out to every node merges:

* `list_queues`: the queues of the same name are one queue (sizes and leases summed), in name
  order. Paging stays exact: each node is asked for `limit` names after the cursor with no
  `min_tasks` (a queue may hold few tasks on each node and many in all); every name up to the
  smallest last name among the nodes that filled their page (`queue_pages`' bound) is then known
  on every node, so those rows are final, and the client asks again after the bound when the
  page is not yet full. `min_tasks` is applied to the sums.
* `stats`: per queue, counts and rates summed, the oldest task age the largest, the average
  lease time the mean over the nodes that have one, lease samples concatenated up to `sample`.
* `peek`: the smallest pids first, `n` of them; `find_by_sender`: oldest first, `limit` of them;
  `queues_for_receiver`: the union, sorted; `list_joins`: one row per join name, tokens summed.
* dead-letter pages (`requeue_dead`, `purge_dead` without pids): outcomes in pid order, and the
  smallest of the nodes' cursors as the next cursor (None when every node is done). Each node
  acts on up to `limit` dead letters, so a page may hold up to `limit` per node.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeVar

from kittiwake.model import QueueInfo, QueueStats
from kittiwake.protocol.replies import DeadLetterPage, JoinInfo, TaskView

T = TypeVar("T")


def in_order(total: int, parts: Iterable[tuple[Sequence[int], Sequence[T]]]) -> list[T]:
    """The outcomes of `total` items split into parts, each part's item indexes with its outcomes,
    back in item order; every index must be covered exactly once."""
    slots: list[T | None] = [None] * total
    seen = 0
    for indexes, outcomes in parts:
        if len(indexes) != len(outcomes):
            raise ValueError(f"a part of {len(indexes)} items came back with {len(outcomes)} outcomes")
        for index, outcome in zip(indexes, outcomes):
            if slots[index] is not None:
                raise ValueError(f"item {index} came back twice")
            slots[index] = outcome
            seen += 1
    if seen != total:
        raise ValueError(f"{total - seen} of {total} items came back with no outcome")
    return [outcome for outcome in slots if outcome is not None]


def queue_pages(pages: Sequence[Sequence[QueueInfo]], limit: int) -> tuple[list[QueueInfo], str | None]:
    """The merged rows every node has fully answered for, in name order, and the bound: the last
    name they cover when some node may have more after it (ask again after it), else None."""
    full = [page[-1].queue for page in pages if len(page) >= limit and page]
    bound = min(full) if full else None
    summed: dict[str, QueueInfo] = {}
    for page in pages:
        for row in page:
            if bound is not None and row.queue > bound:
                continue
            known = summed.get(row.queue)
            if known is None:
                summed[row.queue] = QueueInfo(row.queue, row.size, row.leased)
            else:
                known.size += row.size
                known.leased += row.leased
    return [summed[name] for name in sorted(summed)], bound


def sum_stats(per_node: Iterable[Sequence[QueueStats]], order: Sequence[str] | None, sample: int) -> list[QueueStats]:
    """One record per queue, summed over the nodes; in `order` (the queues asked for) when
    given, else by name."""
    merged: dict[str, QueueStats] = {}
    lease_times: dict[str, list[float]] = {}
    for rows in per_node:
        for row in rows:
            if row.avg_lease_secs is not None:
                lease_times.setdefault(row.queue, []).append(row.avg_lease_secs)
            known = merged.get(row.queue)
            if known is None:
                merged[row.queue] = QueueStats(
                    row.queue, row.size, row.available, row.leased, row.dead,
                    row.enqueue_rate_1m, row.enqueue_rate_5m, row.lease_rate_1m, row.lease_rate_5m,
                    row.dequeue_rate_1m, row.dequeue_rate_5m, None, row.oldest_task_age_secs,
                    list(row.leased_sample[:sample]), row.blocked,
                )
                continue
            known.size += row.size
            known.available += row.available
            known.leased += row.leased
            known.dead += row.dead
            known.blocked += row.blocked
            known.enqueue_rate_1m += row.enqueue_rate_1m
            known.enqueue_rate_5m += row.enqueue_rate_5m
            known.lease_rate_1m += row.lease_rate_1m
            known.lease_rate_5m += row.lease_rate_5m
            known.dequeue_rate_1m += row.dequeue_rate_1m
            known.dequeue_rate_5m += row.dequeue_rate_5m
            ages = [age for age in (known.oldest_task_age_secs, row.oldest_task_age_secs) if age is not None]
            known.oldest_task_age_secs = max(ages) if ages else None
            known.leased_sample = (known.leased_sample + list(row.leased_sample))[:sample]
    for queue, times in lease_times.items():
        merged[queue].avg_lease_secs = sum(times) / len(times)
    names = [name for name in order if name in merged] if order is not None else sorted(merged)
    return [merged[name] for name in dict.fromkeys(names)]


def peeked(per_node: Iterable[Sequence[TaskView]], n: int) -> list[TaskView]:
    """The `n` smallest pids of the nodes' peeks."""
    return sorted((view for views in per_node for view in views), key=lambda view: view.pid)[:n]


def found_by_sender(per_node: Iterable[Sequence[TaskView]], limit: int) -> list[TaskView]:
    """The `limit` oldest of the nodes' finds."""
    views = (view for found in per_node for view in found)
    return sorted(views, key=lambda view: (view.enqueued_at, view.queue, view.pid))[:limit]


def queue_names(per_node: Iterable[Sequence[str]]) -> list[str]:
    """The union of the nodes' queue names, sorted."""
    return sorted({name for names in per_node for name in names})


def joins(per_node: Iterable[Sequence[JoinInfo]]) -> list[JoinInfo]:
    """One row per join name (the first node's declaration), tokens waiting summed, by name."""
    merged: dict[str, JoinInfo] = {}
    for rows in per_node:
        for row in rows:
            known = merged.get(row.name)
            if known is None:
                merged[row.name] = JoinInfo(
                    name=row.name, job_queue=row.job_queue, ports=list(row.ports),
                    max_attempts=row.max_attempts, tokens_waiting=row.tokens_waiting,
                )
            else:
                known.tokens_waiting += row.tokens_waiting
    return [merged[name] for name in sorted(merged)]


def dead_letter_pages(pages: Iterable[DeadLetterPage]) -> DeadLetterPage:
    """The nodes' pages as one: outcomes by pid, the smallest cursor next."""
    pages = list(pages)
    outcomes = sorted((outcome for page in pages for outcome in page.outcomes), key=lambda outcome: outcome.pid)
    cursors = [page.next_pid for page in pages if page.next_pid is not None]
    return DeadLetterPage(outcomes=outcomes, next_pid=min(cursors) if cursors else None)
