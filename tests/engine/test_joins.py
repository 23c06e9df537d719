"""Joins (engine/joins.py, BalticLSC's multi-queue): one job per key once every required port holds
its token, taken in the same pass; sequences for merges; optional ports; restarts; purge; and a
property test of random arrival orders against a plain model of the rule."""

from __future__ import annotations

import contextlib

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kittiwake import errors
from kittiwake.constants import JOIN_HEADER, SEQ_FINAL_HEADER
from kittiwake.engine import Engine
from kittiwake.join_spec import JoinPort, JoinSpec
from kittiwake.model import LeaseRequest, NewTask
from kittiwake.store.memory import MemoryStore
from kittiwake.store.sqlite import SqliteStore

from .harness import lease_all

NOW = 1_000_000.0
JOB = "f#steps"


def spec(*ports: tuple[str, str], name: str = "f#join.c", max_attempts: int | None = None) -> JoinSpec:
    return JoinSpec(
        name=name,
        job_queue=JOB,
        ports=[JoinPort(port, f"f#in.{port}", mode) for port, mode in ports],
        max_attempts=max_attempts,
    )


THREE = spec(("a", "required"), ("b", "required"), ("c", "required"))


@pytest.fixture(params=["memory", "sqlite"])
def engine(request, tmp_path) -> Engine:
    store = MemoryStore() if request.param == "memory" else SqliteStore(tmp_path / "data", durability="os")
    engine = Engine(store, head_tasks=4)
    yield engine
    with contextlib.suppress(errors.StorageFailure):  # a restart test closed it already
        engine.store.close()


def token(port: str, pid: str, data: bytes = b"", final: bool = False) -> NewTask:
    return NewTask(f"f#in.{port}", data or pid.encode(), pid=pid, headers={SEQ_FINAL_HEADER: "1"} if final else None)


def jobs(engine: Engine) -> list[dict]:
    found = []
    for task in lease_all(engine, NOW, JOB):
        assert task.headers == {JOIN_HEADER: "f#join.c"}
        found.append(msgspec.msgpack.decode(task.data))
    return found


def test_a_job_starts_when_the_last_required_token_arrives(engine: Engine) -> None:
    assert engine.declare_join(THREE, NOW) == "created"
    engine.enqueue([token("a", "r1"), token("b", "r1")], NOW)
    engine.enqueue([token("a", "r2")], NOW)
    assert engine.peek(JOB, 10, None, NOW) == []
    engine.enqueue([token("c", "r1")], NOW)
    (job,) = jobs(engine)
    assert job["key"] == "r1" and job["join"] == "f#join.c"
    assert {port: [t["data"] for t in items] for port, items in job["tokens"].items()} == {
        "a": [b"r1"], "b": [b"r1"], "c": [b"r1"]
    }
    # r1's tokens are gone, r2's still waits
    assert [t["pid"] for t in engine.peek("f#in.a", 10, None, NOW)] == ["r2"]
    assert engine.peek("f#in.b", 10, None, NOW) == []


def test_tokens_arriving_in_one_update_start_the_job_in_that_update(engine: Engine) -> None:
    engine.declare_join(THREE, NOW)
    engine.update(enqueue=[token("a", "k"), token("b", "k"), token("c", "k")], now=NOW)
    assert [job["key"] for job in jobs(engine)] == ["k"]


def test_optional_tokens_are_taken_along_when_there(engine: Engine) -> None:
    engine.declare_join(spec(("a", "required"), ("hint", "optional")), NOW)
    engine.enqueue([token("hint", "r1"), token("a", "r1"), token("a", "r2")], NOW)
    by_key = {job["key"]: job["tokens"] for job in jobs(engine)}
    assert by_key["r1"]["hint"][0]["data"] == b"r1"
    assert by_key["r2"]["hint"] == []


def test_a_sequence_port_waits_for_every_index_up_to_the_final_one(engine: Engine) -> None:
    engine.declare_join(spec(("parts", "sequence"), ("users", "required")), NOW)
    engine.enqueue([token("users", "r1")], NOW)
    engine.enqueue([token("parts", "r1/00000002", final=True), token("parts", "r1/00000000")], NOW)
    assert engine.peek(JOB, 10, None, NOW) == []
    engine.enqueue([token("parts", "r1/00000001")], NOW)
    (job,) = jobs(engine)
    assert job["key"] == "r1"
    assert [t["pid"] for t in job["tokens"]["parts"]] == ["r1/00000000", "r1/00000001", "r1/00000002"]


def test_sequences_of_two_keys_do_not_mix(engine: Engine) -> None:
    engine.declare_join(spec(("parts", "sequence")), NOW)
    engine.enqueue([token("parts", "r1/0/00000000"), token("parts", "r1/1/00000000", final=True)], NOW)
    assert [job["key"] for job in jobs(engine)] == ["r1/1"]
    engine.enqueue([token("parts", "r1/0/00000001", final=True)], NOW)
    assert [job["key"] for job in jobs(engine)] == ["r1/0"]


def test_a_job_survives_a_restart_and_counts_are_rebuilt(engine: Engine, tmp_path) -> None:
    if isinstance(engine.store, MemoryStore):
        pytest.skip("restart is the SQLite store's")
    engine.declare_join(spec(("parts", "sequence"), ("users", "required")), NOW)
    engine.enqueue([token("parts", "r1/00000000"), token("parts", "r1/00000001", final=True)], NOW)
    engine.enqueue([token("users", "r2")], NOW)  # a required token waiting across the restart
    engine.store.commit()
    engine.store.close()
    engine = Engine(SqliteStore(tmp_path / "data", durability="os"), head_tasks=4)
    engine.recover(NOW)
    assert [j["name"] for j in engine.list_joins()] == ["f#join.c"]
    engine.enqueue([token("users", "r1")], NOW)
    assert [job["key"] for job in jobs(engine)] == ["r1"]
    engine.enqueue([token("users", "r2")], NOW)  # still waiting: collapses
    assert [t["pid"] for t in engine.peek("f#in.users", 10, None, NOW)] == ["r2"]
    engine.enqueue([token("parts", "r2/00000000", final=True)], NOW)
    assert [job["key"] for job in jobs(engine)] == ["r2"]
    engine.store.close()


def test_no_second_job_while_one_runs_under_the_key(engine: Engine) -> None:
    engine.declare_join(spec(("a", "required")), NOW)
    engine.enqueue([token("a", "k")], NOW)
    engine.enqueue([token("a", "k")], NOW)  # the first token was taken: a new one waits
    assert len(engine.peek(JOB, 10, None, NOW)) == 1
    assert [t["pid"] for t in engine.peek("f#in.a", 10, None, NOW)] == ["k"]


def test_ports_cannot_be_leased_and_tokens_need_a_key(engine: Engine) -> None:
    engine.declare_join(spec(("a", "required"), ("s", "sequence")), NOW)
    with pytest.raises(errors.BadRequest, match="port of join"):
        engine.lease(LeaseRequest(queues=["f#in.a"]), NOW)
    with pytest.raises(errors.BadRequest, match="needs a pid"):
        engine.enqueue([NewTask("f#in.a", b"")], NOW)
    with pytest.raises(errors.BadRequest, match="<key>/<index>"):
        engine.enqueue([NewTask("f#in.s", b"", pid="r1")], NOW)
    with pytest.raises(errors.BadRequest, match="parents"):
        engine.enqueue([NewTask("f#in.a", b"", pid="k", after=[("x", "y")])], NOW)
    with pytest.raises(errors.BadRequest, match="broker's own"):
        engine.enqueue([NewTask("_joins", b"", pid="k")], NOW)
    with pytest.raises(errors.BadRequest):
        engine.delete_queue("_joins")
    assert engine.peek("f#in.a", 10, None, NOW) == []


@pytest.mark.parametrize(
    "bad, match",
    [
        (JoinSpec("j", "g#jobs", [JoinPort("a", "h#a")]), "group"),
        (JoinSpec("j", "jobs", [JoinPort("a", "x"), JoinPort("a", "y")]), "twice"),
        (JoinSpec("j", "jobs", [JoinPort("a", "jobs")]), "twice"),
        (JoinSpec("j", "jobs", [JoinPort("a", "x", "maybe")]), "mode"),
        (JoinSpec("j", "jobs", [JoinPort("a", "x", "optional")]), "at least one"),
        (JoinSpec("j", "jobs", []), "ports"),
        (JoinSpec("j", "jobs", [JoinPort("a b", "x")]), "port name"),
        (JoinSpec("j", "jobs", [JoinPort("a", "x.dead")]), "cannot take part"),
    ],
)
def test_bad_declarations_are_refused(engine: Engine, bad: JoinSpec, match: str) -> None:
    with pytest.raises(errors.BadRequest, match=match):
        engine.declare_join(bad, NOW)


def test_redeclaring_is_idempotent_and_a_queue_serves_one_join(engine: Engine) -> None:
    assert engine.declare_join(THREE, NOW) == "created"
    assert engine.declare_join(THREE, NOW) == "unchanged"
    assert engine.declare_join(spec(("a", "required"), ("b", "required")), NOW) == "replaced"
    with pytest.raises(errors.BadRequest, match="already a port"):
        engine.declare_join(spec(("a", "required"), name="f#other"), NOW)
    assert engine.drop_join("f#join.c") is True
    assert engine.drop_join("f#join.c") is False
    engine.enqueue([NewTask("f#in.a", b"", pid="free")], NOW)  # an ordinary queue again
    assert [t.pid for t in lease_all(engine, NOW, "f#in.a")] == ["free"]


def test_purge_removes_a_runs_tokens_and_nothing_else(engine: Engine) -> None:
    engine.declare_join(spec(("a", "required"), ("b", "required"), ("s", "sequence")), NOW)
    engine.enqueue(
        [token("a", "r1"), token("a", "r10"), token("b", "r1/00000003"), token("s", "r1/00000000"),
         token("s", "r2/00000000")],
        NOW,
    )
    assert engine.purge_join("f#join.c", "r1") == 3
    left = {q: [t["pid"] for t in engine.peek(q, 10, None, NOW)] for q in ("f#in.a", "f#in.b", "f#in.s")}
    assert left == {"f#in.a": ["r10"], "f#in.b": [], "f#in.s": ["r2/00000000"]}
    # the purged sequence starts again from nothing
    engine.enqueue([token("s", "r1/00000000", final=True), token("a", "r1"), token("b", "r1")], NOW)
    assert [job["key"] for job in jobs(engine)] == ["r1"]
    with pytest.raises(errors.TaskNotFound):
        engine.purge_join("nope", "r1")


def test_reject_gives_a_task_back_without_counting_an_attempt(engine: Engine) -> None:
    from kittiwake.model import LeaseRef

    engine.enqueue([NewTask("q", b"x", pid="t", max_attempts=1)], NOW)
    for _ in range(3):
        (task,) = lease_all(engine, NOW, "q")
        (outcome,) = engine.release([LeaseRef("q", "t", task.lease_id)], None, NOW, reject=True)
        assert outcome.ok and not outcome.dead
    assert engine.get("q", "t", NOW)["attempts"] == 0
    (task,) = lease_all(engine, NOW, "q")
    (outcome,) = engine.release([LeaseRef("q", "t", task.lease_id)], None, NOW)
    assert outcome.dead  # max_attempts=1: the first counted failure buries it
    with pytest.raises(errors.BadRequest):
        engine.release([LeaseRef("q", "x", 1)], None, NOW, bury=True, reject=True)


def test_cancelling_a_sequence_token_uncounts_it(engine: Engine) -> None:
    engine.declare_join(spec(("s", "sequence")), NOW)
    engine.enqueue([token("s", "r/00000000"), token("s", "r/00000001", final=True)], NOW)
    assert len(jobs(engine)) == 1
    engine.enqueue([token("s", "q/00000000")], NOW)
    engine.cancel([("f#in.s", "q/00000000")], None, NOW)
    engine.enqueue([token("s", "q/00000001", final=True)], NOW)
    assert jobs(engine) == []  # index 0 was withdrawn: the sequence is not whole


# ---------------------------------------------------------------- property

ARRIVALS = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c", "o"]), st.sampled_from(["k1", "k2", "k3"])), max_size=40
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arrivals=ARRIVALS, batch=st.integers(min_value=1, max_value=5))
def test_random_arrivals_match_the_model(arrivals: list[tuple[str, str]], batch: int) -> None:
    """Model: each port holds a set of keys; after each arrival, a key held by a, b and c leaves
    every port (o too) and becomes one job carrying what was there. Re-arriving keys collapse."""
    engine = Engine(MemoryStore(), head_tasks=2)
    engine.declare_join(spec(("a", "required"), ("b", "required"), ("c", "required"), ("o", "optional")), NOW)
    held: dict[str, set[str]] = {p: set() for p in "abco"}
    expected_jobs: list[tuple[str, bool]] = []
    for start in range(0, len(arrivals), batch):
        chunk = arrivals[start : start + batch]
        engine.enqueue([token(port, key) for port, key in chunk], NOW)
        for port, key in chunk:
            held[port].add(key)
            if all(key in held[p] for p in "abc"):
                with_optional = key in held["o"]
                for p in "abco":
                    held[p].discard(key)
                expected_jobs.append((key, with_optional))
        # finish every job at once so a later arrival of the key may start another
        got = [(job["key"], bool(job["tokens"]["o"])) for job in _drain(engine)]
        assert sorted(got) == sorted(expected_jobs)
        expected_jobs.clear()
    for port in "abco":
        assert {t["pid"] for t in engine.peek(f"f#in.{port}", 100, None, NOW)} == held[port]


def _drain(engine: Engine) -> list[dict]:
    from kittiwake.model import LeaseRef

    tasks = lease_all(engine, NOW, JOB)
    if tasks:
        engine.dequeue([LeaseRef(t.queue, t.pid, t.lease_id) for t in tasks], NOW)
    return [msgspec.msgpack.decode(t.data) for t in tasks]
