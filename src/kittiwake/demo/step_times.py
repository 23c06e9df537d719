"""Where a run of the shop flow spent its time, from the entries and exits its steps noted.

Each job of the flow notes when its step function was entered and left
(`shop_flow.StepClock`); a Spark step's whole Spark work (reading, the job,
writing Parquet) is inside that interval. From those and the run's start and
end this module derives, per step:

* `busy_secs`: the time inside the step's functions, summed over its jobs
  (0 for a step fused into its consumer's plan: its function only builds a
  plan, and its Spark work is inside the consumer's interval);
* `wait_ms`: for each job, from the moment its inputs were ready (the last
  producing job left its function; the run's start for the first step) to
  the moment its function was entered: the token hand-off through the broker
  (the producer's atomic update, the join, the lease, decoding the job) plus
  any wait for a free slot;

and, for the run: `wall_secs`, `covered_secs` (some step function running)
and `idle_secs` = wall − covered: time in which no step ran at all — the
cost of moving tokens and jobs through the broker on the critical path,
with the run's start and end (the first job's lease, the last job's update,
the run's end) included.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence


@dataclass(frozen=True)
class Feed:
    """A step's producer: the step, whether it splits (its job's key is one level up) and whether
    this input merges (all the producer's jobs under this job's key)."""

    step: str
    split: bool
    merge: bool


def feeds(flow: Any) -> dict[str, tuple[str, list[Feed]]]:
    """Step -> (engine, the steps that feed it) of a `kittiwake.flow.Flow`."""
    from kittiwake.flow import Output
    from kittiwake.flow.definition import SEQUENCE

    return {step.name: (step.engine, [Feed(spec.source.step.name, spec.source.step.split, spec.mode == SEQUENCE)
                                      for spec in step.inputs.values() if isinstance(spec.source, Output)])
            for step in flow}


@dataclass
class StepTime:
    step: str
    engine: str
    jobs: int = 0
    busy_secs: float = 0.0
    waits_ms: list[float] = field(default_factory=list)
    first_entered: float | None = None
    last_left: float | None = None

    def as_dict(self) -> dict[str, Any]:
        waits = sorted(self.waits_ms)
        return {"step": self.step, "engine": self.engine, "jobs": self.jobs, "busy_secs": round(self.busy_secs, 3),
                "wait_ms_mean": round(sum(waits) / len(waits), 1) if waits else None,
                "wait_ms_max": round(waits[-1], 1) if waits else None}


@dataclass
class RunTimes:
    wall_secs: float
    covered_secs: float
    steps: list[StepTime]

    @property
    def idle_secs(self) -> float:
        return max(0.0, self.wall_secs - self.covered_secs)

    def busy_secs(self, engine: str) -> float:
        return sum(step.busy_secs for step in self.steps if step.engine == engine)

    def as_dict(self) -> dict[str, Any]:
        return {"wall_secs": round(self.wall_secs, 3), "covered_secs": round(self.covered_secs, 3),
                "idle_secs": round(self.idle_secs, 3), "spark_busy_secs": round(self.busy_secs("spark"), 3),
                "python_busy_secs": round(self.busy_secs("python"), 3),
                "steps": [step.as_dict() for step in self.steps]}


def run_times(flow: Any, timings: Sequence[Mapping[str, Any]], started: float, ended: float) -> RunTimes:
    """Per-step figures of a run of `flow` and its covered and idle time (see the module docstring);
    times are wall-clock seconds (`time.time()`), `started` when the run was started, `ended` when
    it was seen done."""
    shape = feeds(flow)
    fused = [record for record in timings if record.get("fused_into")]
    timings = [record for record in timings if not record.get("fused_into")]
    left: dict[tuple[str, str], float] = {(record["step"], record["key"]): record["left"] for record in timings}
    steps = {name: StepTime(name, engine) for name, (engine, _) in shape.items()}
    for record in fused:
        steps.setdefault(record["step"], StepTime(record["step"], "?")).jobs += 1
    for record in sorted(timings, key=lambda item: item["entered"]):
        step = steps.setdefault(record["step"], StepTime(record["step"], "?"))
        step.jobs += 1
        step.busy_secs += record["left"] - record["entered"]
        step.first_entered = min(step.first_entered or record["entered"], record["entered"])
        step.last_left = max(step.last_left or record["left"], record["left"])
        ready = _ready_at(record, shape.get(record["step"], ("?", []))[1], left, started)
        if ready is not None:
            step.waits_ms.append(max(0.0, record["entered"] - ready) * 1000)
    intervals = sorted((record["entered"], record["left"]) for record in timings)
    covered = 0.0
    span: tuple[float, float] | None = None  # the run of overlapping intervals so far: (start, end)
    for start, end in intervals:
        if span is None or start > span[1]:
            if span is not None:
                covered += span[1] - span[0]
            span = (start, end)
        else:
            span = (span[0], max(span[1], end))
    if span is not None:
        covered += span[1] - span[0]
    return RunTimes(wall_secs=ended - started, covered_secs=covered, steps=list(steps.values()))


def _ready_at(record: Mapping[str, Any], parents: list[Feed], left: Mapping[tuple[str, str], float],
              started: float) -> float | None:
    """When the job's last input was ready: its producers' jobs left (the run's start without any)."""
    if not parents:
        return started
    key = record["key"]
    times: list[float] = []
    for feed in parents:
        if feed.merge:
            times += [when for (step, other), when in left.items() if step == feed.step and other.startswith(key + "/")]
        else:
            producer = key.rsplit("/", 1)[0] if feed.split else key
            if (feed.step, producer) in left:
                times.append(left[(feed.step, producer)])
    return max(times) if times else None
