"""Declaring flows and what a finished job enqueues — pure, no broker: wiring checks, sequence
stacks through splits, plain steps and merges, the final flag, optional tokens first."""

from __future__ import annotations

import pytest

from kittiwake import errors
from kittiwake.flow import Dataset, Flow, merge, optional
from kittiwake.flow.jobs import items_of
from kittiwake.flow.tokens import SEQ_FINAL_HEADER, decode_token, encode_job, encode_token, decode_job, job_outputs


def shaped() -> Flow:
    flow = Flow("shape")

    @flow.step(inputs={"x": flow.input("x")}, split=True)
    def parts(ctx, x): ...

    @flow.step(inputs={"p": parts}, outputs=("main", "extra"))
    def work(ctx, p): ...

    @flow.step(inputs={"m": work["main"], "e": optional(work["extra"])})
    def pair(ctx, m, e=None): ...

    @flow.step(inputs={"all": merge(pair)})
    def gather(ctx, all): ...

    return flow


def test_depths_follow_splits_and_merges() -> None:
    flow = shaped()
    assert {step.name: step.depth for step in flow} == {"parts": 1, "work": 1, "pair": 1, "gather": 0}
    assert [f"{o.step.name}.{o.port}" for o in flow.sinks()] == ["gather.out"]
    assert flow.steps["pair"].job_queue == "flow.shape#steps.python.pair"
    assert flow.steps["pair"].join == "flow.shape#pair"


def test_wiring_that_could_never_meet_is_refused() -> None:
    flow = shaped()
    with pytest.raises(errors.BadRequest, match="different sequence depths"):
        flow.step(inputs={"a": flow.steps["work"]["main"], "b": flow.input("x")}, name="ab")(lambda ctx, a, b: None)
    with pytest.raises(errors.BadRequest, match="not a sequence"):
        flow.step(inputs={"a": merge(flow.input("x"))}, name="m")(lambda ctx, a: None)
    with pytest.raises(errors.BadRequest, match="missing: b"):
        flow.step(inputs={"a": flow.input("x"), "b": flow.input("x")}, name="s")(lambda ctx, a: None)
    with pytest.raises(errors.BadRequest, match="not optional"):
        flow.step(inputs={"a": optional(flow.input("x"))}, name="o")(lambda ctx, a: None)
    with pytest.raises(errors.BadRequest, match="dead"):
        flow.step(inputs={"a": flow.input("x")}, name="dead")(lambda ctx, a: None)
    with pytest.raises(errors.BadRequest, match="already has a step"):
        flow.step(inputs={"a": flow.input("x")}, name="pair")(lambda ctx, a: None)
    with pytest.raises(errors.BadRequest, match="no output"):
        flow.steps["work"]["nope"]
    with pytest.raises(errors.BadRequest, match="engine"):
        flow.step(inputs={"a": flow.input("x")}, engine="dask", name="d")(lambda ctx, a: None)


def test_which_steps_are_fused_into_their_consumers_plans() -> None:
    from kittiwake.flow.plan_fusion import defers

    flow = Flow("planned", fuse="plan")  # a flow-wide default: applies where it can

    @flow.step(inputs={"x": flow.input("x")}, split=True)
    def parts(ctx, x): ...

    @flow.step(engine="spark", inputs={"p": parts}, outputs=("rows", "notes"))
    def tidy(spark, p): ...

    @flow.step(engine="spark", inputs={"r": tidy["rows"]})
    def sums(spark, r): ...

    @flow.step(engine="spark", inputs={"all": merge(sums)})
    def report(spark, all): ...

    # tidy's "notes" go nowhere (a run's result, written): tidy runs; sums feeds a Spark merge
    assert {step.name: defers(flow, step) for step in flow} == {"parts": False, "tidy": False, "sums": True,
                                                                 "report": False}
    with pytest.raises(errors.BadRequest, match="plan"):
        flow.step(inputs={"x": flow.input("x")}, name="py", fuse="plan")(lambda ctx, x: None)
    with pytest.raises(errors.BadRequest, match="plan"):
        flow.step(engine="spark", inputs={"x": flow.input("x")}, split=True, name="sp", fuse="plan")(lambda s, x: None)
    with pytest.raises(errors.BadRequest, match="fuse must be"):
        flow.step(engine="spark", inputs={"x": flow.input("x")}, name="bad", fuse="yes")(lambda s, x: None)
    assert "py" not in flow.steps and "sp" not in flow.steps
    assert Flow("old", fuse=True).fuse == "cache" and Flow("none").fuse is None


def job_at(flow: Flow, step: str, key: str, stack: list, port: str) -> object:
    data = encode_token(Dataset.inline(1), stack, "test")
    return decode_job(encode_job(flow.steps[step].join, key, {port: [(key, data, None)]}))


def test_a_split_pushes_a_level_and_flags_its_last_item() -> None:
    flow = shaped()
    job = job_at(flow, "parts", "r1", [], "x")
    tasks = job_outputs(flow, flow.steps["parts"], job, [{"out": Dataset.inline(i)} for i in range(3)])
    tokens = [t for t in tasks if "#in." in t["queue"]]
    assert [t["pid"] for t in tokens] == ["r1/00000000", "r1/00000001", "r1/00000002"]
    assert [decode_token(t["pid"], t["data"]).stack for t in tokens] == [[[0, False]], [[1, False]], [[2, True]]]
    assert tasks[-1]["queue"] == "flow.shape#done.r1" and tasks[-1]["pid"] == "parts"


def test_a_plain_step_keeps_the_stack_and_optional_tokens_go_first() -> None:
    flow = shaped()
    job = job_at(flow, "work", "r1/00000002", [[2, True]], "p")
    tasks = job_outputs(flow, flow.steps["work"], job, [{"main": Dataset.inline("m"), "extra": Dataset.inline("e")}])
    assert [t["queue"] for t in tasks] == ["flow.shape#in.pair.e", "flow.shape#in.pair.m", "flow.shape#done.r1"]
    assert all(decode_token(t["pid"], t["data"]).stack == [[2, True]] for t in tasks[:2])
    assert all(SEQ_FINAL_HEADER not in (t.get("headers") or {}) for t in tasks)  # not bound for a merge


def test_tokens_bound_for_a_merge_carry_the_final_header_on_the_last_index() -> None:
    flow = shaped()
    last = job_outputs(flow, flow.steps["pair"], job_at(flow, "pair", "r1/00000002", [[2, True]], "m"),
                       [{"out": Dataset.inline(1)}])
    other = job_outputs(flow, flow.steps["pair"], job_at(flow, "pair", "r1/00000001", [[1, False]], "m"),
                        [{"out": Dataset.inline(1)}])
    assert last[0]["queue"] == "flow.shape#in.gather.all" and last[0]["headers"] == {SEQ_FINAL_HEADER: "1"}
    assert "headers" not in other[0]
    merged = job_outputs(flow, flow.steps["gather"], job_at(flow, "gather", "r1", [[2, True]], "all"),
                         [{"out": Dataset.inline(3)}])
    assert merged[0] == {**merged[0], "queue": "flow.shape#outputs.r1", "pid": "gather.out"}
    assert decode_token("gather.out", merged[0]["data"]).stack == []  # the merge popped the level


def test_what_a_step_returns_is_checked_against_its_outputs() -> None:
    flow = shaped()
    assert items_of(flow.steps["pair"], {"a": 1}) == [{"out": {"a": 1}}]  # one port: a dict is data
    assert items_of(flow.steps["parts"], iter([1, 2])) == [{"out": 1}, {"out": 2}]
    with pytest.raises(errors.BadRequest, match="return a dict"):
        items_of(flow.steps["work"], 5)
    with pytest.raises(errors.BadRequest, match="no output port"):
        items_of(flow.steps["work"], {"main": 1, "other": 2})
    with pytest.raises(errors.BadRequest, match="must return or yield"):
        items_of(flow.steps["parts"], Dataset.inline(1))
    with pytest.raises(errors.BadRequest, match="at least one"):
        job_outputs(flow, flow.steps["parts"], job_at(flow, "parts", "r1", [], "x"), [])


def test_a_recipe_too_large_to_travel_is_not_deferred() -> None:
    """A recipe goes in its consumers' tokens and jobs (1 MiB each): past `MAX_RECIPE_BYTES` the job
    runs and writes its output instead (`plan_fusion.deferred_items` says None)."""
    from kittiwake.flow.jobs import PreparedJob
    from kittiwake.flow.names import key_of
    from kittiwake.flow.plan_fusion import MAX_RECIPE_BYTES, deferred_items
    from kittiwake.flow.tokens import JobInput, Token

    flow = Flow("big")

    @flow.step(inputs={"x": flow.input("x")}, split=True)
    def parts(ctx, x): ...

    @flow.step(engine="spark", inputs={"p": parts}, fuse="plan")
    def tidy(spark, p): ...

    @flow.step(engine="spark", inputs={"r": tidy})
    def sums(spark, r): ...

    def prepared(value: str) -> PreparedJob:
        key = key_of("run", [0])
        job = JobInput(tidy.join, key, {"p": [Token(key, Dataset.inline(value), [[0, True]])]})
        return PreparedJob(None, flow, tidy, job, None, None)

    [item] = deferred_items(prepared("a small value"))
    assert item["out"].kind == "fused" and item["out"].value["inputs"]["p"][0]["value"] == "a small value"
    assert deferred_items(prepared("x" * MAX_RECIPE_BYTES)) is None
