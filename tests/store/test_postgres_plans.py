"""The PostgreSQL store's hot reads use the indexes they were written for, as PostgreSQL plans them.

With a few thousand tasks over several queues (some leased, some blocked, a share of them with a
sender) and fresh statistics (ANALYZE), `EXPLAIN` of the lease-side read (`load_available`) must
walk the primary key (queue, gen, pid) in pid order, and of `find_by_sender` (across queues and in
one queue) the partial index on (sender, queue, pid); with several brokers, a queue's reload reads
its leases through a partial index of leased rows, and the sweep finds queues with leases
run out through the partial index on lease expiry: an Index Scan or Index Only Scan (or a bitmap
scan of that index) on the index, never a Seq Scan of `tasks`. The planner picks them by itself (enable_seqscan stays on): a
plan that falls back to reading the whole table would make every lease cost O(tasks).

Each queue holds several times the head the engine loads at once: when the limit nears the whole
queue, PostgreSQL rightly prefers a bitmap scan of the same index and a sort, which is cheaper there
(the test would then be asserting a plan the planner is right not to pick)."""

from __future__ import annotations

import json
from typing import Any, Iterator

import psycopg
import pytest

from kittiwake.engine import PutTask
from kittiwake.model import Task
from kittiwake.store import postgres_statements as sql
from kittiwake.store.postgres import PostgresStore
from support.postgres import fresh_schema

NOW = 1_000.0
QUEUES = 4
PER_QUEUE = 5000
HEAD_TASKS = 1000  # the broker's default --head-tasks: what one load_available asks for


@pytest.fixture(scope="module")
def filled() -> Iterator[tuple[str, str]]:
    with fresh_schema() as (dsn, schema):
        store = PostgresStore(dsn, schema=schema)
        try:
            for q in range(QUEUES):
                tasks = []
                for n in range(PER_QUEUE):
                    leased = n % 7 == 0
                    tasks.append(PutTask(Task(
                        queue=f"q{q}", pid=f"{n:017}", data=b"x" * 64, enqueued_at=NOW,
                        sender=f"sender{n % 40}" if n % 4 == 0 else None,
                        lease_id=n if leased else 0, lease_owner="w" if leased else None,
                        leased_at=NOW if leased else None, lease_expires_at=NOW + 60 if leased else None,
                        waiting_on=1 if n % 11 == 0 else 0,
                    )))
                store.write(tasks)
                store.commit()
        finally:
            store.close()
        with psycopg.connect(dsn, autocommit=True) as db:
            db.execute(f"ANALYZE {schema}.tasks")
            db.execute(f"ANALYZE {schema}.generations")
        yield dsn, schema


def _plan(place: tuple[str, str], statement: str, params: Any) -> dict[str, Any]:
    dsn, schema = place
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute(f"SET search_path = {schema}")
        rows = db.execute("EXPLAIN (FORMAT JSON) " + statement, params).fetchall()
    plan = rows[0][0]
    return (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _reads_of_tasks(plan: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(node type, index name) of every node that reads the tasks table."""
    return [(node["Node Type"], node.get("Index Name")) for node in _nodes(plan)
            if node.get("Relation Name") == "tasks"]


def _assert_index(plan: dict[str, Any], index: str) -> None:
    reads = _reads_of_tasks(plan)
    assert reads, json.dumps(plan, indent=1)
    assert all(kind in ("Index Scan", "Index Only Scan") and name == index for kind, name in reads), reads


@pytest.mark.parametrize("limit", [10, HEAD_TASKS])
@pytest.mark.parametrize("after", ["", "00000000000000100"])
def test_the_lease_side_read_walks_the_primary_key(filled, after, limit):
    params = {"queue": "q3", "gen": 0, "after": after, "now": NOW, "limit": limit}
    _assert_index(_plan(filled, sql.LOAD_AVAILABLE, params), "tasks_pkey")


def test_find_by_sender_uses_its_partial_index(filled):
    _assert_index(_plan(filled, sql.FIND_BY_SENDER, ("sender7", 100)), "tasks_by_sender")
    params = {"sender": "sender7", "queue": "q2", "gen": 0, "limit": 100}
    _assert_index(_plan(filled, sql.FIND_BY_SENDER_IN_QUEUE, params), "tasks_by_sender")


def _assert_reads_index(plan: dict[str, Any], index: str) -> None:
    """Like `_assert_index`, a bitmap scan of the index allowed (a set of queues, not a range)."""
    nodes = list(_nodes(plan))
    assert not any(n.get("Relation Name") == "tasks" and n["Node Type"] == "Seq Scan" for n in nodes), plan
    used = {n.get("Index Name") for n in nodes if n["Node Type"] in ("Index Scan", "Index Only Scan", "Bitmap Index Scan")}
    assert index in used, json.dumps(plan, indent=1)


def test_a_queue_reload_reads_its_leases_by_their_partial_index(filled):
    # either partial index of leased rows: with a queue holding a quarter of them, as here, the planner
    # may rightly prefer the smaller one and filter; both read leased rows only, never the table
    plan = _plan(filled, sql.HELD_LEASES_OF, (["q1"],))
    nodes = list(_nodes(plan))
    assert not any(n.get("Relation Name") == "tasks" and n["Node Type"] == "Seq Scan" for n in nodes), plan
    used = {n.get("Index Name") for n in nodes}
    assert used & {"tasks_leased_by_queue", "tasks_leased"}, json.dumps(plan, indent=1)


def test_the_sweep_finds_expired_leases_by_the_expiry_index(filled):
    _assert_reads_index(_plan(filled, sql.EXPIRED_LEASE_QUEUES, (NOW + 30, 1000)), "tasks_leased")
