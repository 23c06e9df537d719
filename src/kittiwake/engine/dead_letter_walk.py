"""Which dead letters one requeue or purge request reaches, and where the next request goes on.

A request names its dead letters by pid (a dead letter's own pid, or an original pid meaning all
its dead letters) or walks the whole dead-letter queue; either way it reaches them in dead-letter
pid order, only those after its cursor `after_pid`, and reads at most `limit` rows of the queue.
When it stops short, `next_pid` is the last pid it read: the same request with that cursor goes on
where it stopped. So a pid with a million dead letters costs many bounded requests, not one that
holds the broker's loop, and the two forms page alike.

Named pids (`select_named`). The dead letters of an original pid `p` are the rows of the queue
whose pid starts with `p~` and whose `kittiwake-dead-pid` header is `p` (`failures.bury`); the
ranges of the pids named either nest (`p~` holds `p~x~`) or do not meet, so the walk reads the
outermost ranges in order and each row once, keeping those a named pid claims. A pid that is a dead
letter's own pid names that letter (one point read each, at most `max_batch` of them: the request's
own size). A named pid that names nothing is reported (TASK_NOT_FOUND) by the request whose walk
covered all of where its dead letters would be; a page that would stop inside such a range before
knowing stops before the range instead, when it has read anything before it (when it has not —
the range holds `limit` rows of other pids' dead letters before any of its own — that pid gets no
outcome: a missing outcome, never a wrong one).

Pure reads: nothing here changes the queue, so a request can check every dead letter it reaches
before it moves any (`dead_letters`).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

from kittiwake.engine.failures import AFTER, SCAN_PAGE
from kittiwake.engine.state import EngineState
from kittiwake.model import DEAD_PID_HEADER, Task, dead_letter_prefix


@dataclass(slots=True)
class Reached:
    """What a request reaches: (asked-for pid, dead letter or None: names nothing), in pid order,
    each dead letter once; `next_pid` is the cursor of the next request (None: nothing left)."""

    chosen: list[tuple[str, Task | None]] = field(default_factory=list)
    next_pid: str | None = None


def select_page(state: EngineState, dead: str, after_pid: str | None, limit: int) -> Reached:
    """A page of the whole dead-letter queue: `limit` rows after the cursor."""
    if dead not in state.queues:
        return Reached()
    rows = state.store.scan(dead, after_pid + AFTER if after_pid is not None else None, limit)
    return Reached([(task.pid, task) for task in rows], rows[-1].pid if len(rows) == limit else None)


def select_named(state: EngineState, dead: str, pids: list[str], after_pid: str | None, limit: int) -> Reached:
    """The dead letters `pids` name with pids after `after_pid`, reading at most `limit` rows."""
    named = list(dict.fromkeys(pids))
    if dead not in state.queues:
        return Reached([(pid, None) for pid in sorted(named)] if after_pid is None else [])
    exact: dict[str, Task] = {}  # pids that are a dead letter's own
    for pid in named:
        task = state.store.load_task(dead, pid)
        if task is not None:
            exact[pid] = task
    originals = {dead_letter_prefix(pid): pid for pid in named if pid not in exact}
    read, letters, cut = _walk(state, dead, originals, after_pid, limit)
    first: dict[str, str] = {}  # original pid → the pid of its first letter read
    for original, task in letters:
        first.setdefault(original, task.pid)

    def entered(prefix: str) -> bool:  # the range starts after the cursor: this request walked its start
        return after_pid is None or after_pid < prefix

    # a range entered and cut before its pid's first letter: whether it has any is not known yet, so
    # stop before it (and before any range this moves the cut into), when anything was read before it
    while cut is not None:
        unsure = [prefix for prefix, pid in originals.items()
                  if entered(prefix) and cut.startswith(prefix) and not (pid in first and first[pid] <= cut)]
        if not unsure:
            break
        index = bisect_left(read, min(unsure))
        if index == 0 or (after_pid is not None and read[index - 1] <= after_pid):
            break  # nothing before it: such a pid gets no outcome (its range holds `limit` rows of others first)
        cut = read[index - 1]
    reached: dict[str, tuple[str, Task]] = {}
    for original, task in letters:
        if cut is None or task.pid <= cut:
            reached.setdefault(task.pid, (original, task))
    for pid, task in exact.items():
        if (after_pid is None or task.pid > after_pid) and (cut is None or task.pid <= cut):
            reached.setdefault(task.pid, (pid, task))
    ordered = sorted(reached.items())
    if len(ordered) > limit:  # exact names add letters the walk did not read: a request acts on `limit`
        ordered = ordered[:limit]
        cut = ordered[-1][0]
    chosen: list[tuple[str, Task | None]] = [entry for _, entry in ordered]
    for prefix, pid in originals.items():
        # named nothing: its whole range was walked by this request (cut past it), and held no letter of it
        walked = entered(prefix) and (cut is None or (cut > prefix and not cut.startswith(prefix)))
        if walked and not (pid in first and (cut is None or first[pid] <= cut)):
            chosen.append((pid, None))
    chosen.sort(key=lambda entry: entry[1].pid if entry[1] is not None else entry[0])
    return Reached(chosen, cut)


def _walk(
    state: EngineState, dead: str, originals: dict[str, str], after_pid: str | None, limit: int
) -> tuple[list[str], list[tuple[str, Task]], str | None]:
    """Read the ranges of `originals` (prefix → original pid) in order from the cursor, each row
    once and at most `limit` rows: (every pid read, (original, its letter) for each letter read,
    the last pid read when the budget ran out, else None)."""
    outermost: list[str] = []
    for prefix in sorted(originals):
        if not outermost or not prefix.startswith(outermost[-1]):
            outermost.append(prefix)
    read: list[str] = []
    letters: list[tuple[str, Task]] = []
    budget = limit
    for outer in outermost:
        if after_pid is not None and not after_pid < outer and not after_pid.startswith(outer):
            continue  # the whole range sorts before the cursor
        start = outer if after_pid is None or after_pid < outer else after_pid + AFTER
        while True:
            if budget == 0:
                return read, letters, read[-1] if read else after_pid
            page = min(SCAN_PAGE, budget)
            rows = state.store.scan(dead, start, page)
            for task in rows:
                if not task.pid.startswith(outer):
                    break
                budget -= 1
                read.append(task.pid)
                original = (task.headers or {}).get(DEAD_PID_HEADER)
                if original is not None and originals.get(dead_letter_prefix(original)) == original \
                        and task.pid.startswith(dead_letter_prefix(original)):
                    letters.append((original, task))
            else:
                if len(rows) == page:
                    start = rows[-1].pid + AFTER
                    continue
            break
    return read, letters, None
