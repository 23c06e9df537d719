"""Plan fusion: a Spark step's DataFrame built into each consumer's own query instead of written.

A Spark step declared ``fuse="plan"`` (``@flow.step(engine="spark", ..., fuse="plan")``, or
``Flow(..., fuse="plan")`` for every Spark step) whose every output port feeds Spark steps only
is *deferred*: the job leased for it does not call its function. It finishes at once with one
token per port whose dataset, of kind ``fused``, is a `recipe`: the step, its version, the job's
key and indices, and its input datasets. A consumer job that meets such a token calls the step's
function with those inputs (`PlanBuilder`; recursively, so a chain of deferred steps becomes one
plan) in a `StepContext` of the producer's job, and takes the port's DataFrame. Spark then plans
and runs producer and consumer as one query: nothing written or read back between them, and one
query's fixed cost (planning, code generation, scheduling, the file commit: about 0.4 s of the
JVM's CPU each on two cores) instead of two.

The two rules of fusion, kept:

* durability: a run killed anywhere resumes from what its tokens name, and a fused token names
  its producer's inputs — written outputs or inline values, durable — so whichever job builds
  it (on this worker, on another machine, after a restart) builds the same DataFrame, as long
  as the step is deterministic: declare it only on steps that are (the same test as `reuse`);
* locality: there is no Parquet of a fused output anywhere to be near, so a consumer on
  another worker builds it from the producer's inputs as this one would; those inputs must
  be readable there, as they were by the producer.

Where it does not apply — the job runs and writes its Parquet, as without fusion: a step that
splits (refused when declared on the step), a port read by a python step or by no step (a
run's results), a worker started with ``--no-fuse``, a recipe over `MAX_RECIPE_BYTES` (inputs
of a merge of hundreds of parts). A reuse record holding recipes is taken only by a job that
would defer now (`FlowJobs.complete`). The step must return a DataFrame on every output port:
its consumers build every port. What it changes: the producer's failures
happen in its consumer's job (and count against that job's attempts); a fused output read by
two consumer jobs is computed twice; its function runs in the consumer's job, after the
consumer's job started (`StepContext.extra["fused_into"]` names that step).

Reuse: a fused output's fingerprint is the fingerprint of the job that made the recipe
(`fingerprints.dataset_fingerprint`), so a consumer's fingerprint changes exactly when the
producer's inputs or code do. A recipe names the step's version where it was made; a consumer
whose code of that step has another version (workers of two releases, during a rolling
upgrade) builds it all the same — the run goes on — but its job's outputs are not recorded in
the reuse index (`PlanBuilder.stale`, `PreparedJob.unrecorded`), since they were not made by the
code their fingerprint names; a warning says which step.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping

import msgspec

from kittiwake import errors
from kittiwake.flow.context import StepContext
from kittiwake.flow.dataset import FUSED_KIND, Dataset
from kittiwake.flow.definition import FUSE_PLAN, FlowDefinition, Step
from kittiwake.flow.fingerprints import step_version
from kittiwake.flow.jobs import PreparedJob, call_step, items_of, step_arguments

# a recipe travels in its consumers' tokens and jobs (1 MiB each at most): one whose inputs are many
# (a merge of hundreds of parts) or large inline values is not worth deferring
MAX_RECIPE_BYTES = 64 * 1024

log = logging.getLogger("kittiwake.flow")

_encoder = msgspec.msgpack.Encoder()


def defers(flow: FlowDefinition, step: Step) -> bool:
    """Whether `step`'s jobs are deferred into their consumers (see the module docstring)."""
    if step.engine != "spark" or step.fuse != FUSE_PLAN or step.split:
        return False
    for port in step.outputs:
        consumers = flow.consumers(step.output(port))
        if not consumers or any(consumer.step.engine != "spark" for consumer in consumers):
            return False
    return True


def recipe(prepared: PreparedJob, port: str) -> dict[str, Any]:
    """What a fused token of `prepared`'s output `port` carries: enough to build the DataFrame
    anywhere, and to fingerprint it (`fingerprints`)."""
    step = prepared.step
    return {
        "step": step.name,
        "port": port,
        "version": step_version(step.function, step.version),
        "key": prepared.job.key,
        "indices": list(prepared.job.indices),
        "modes": {name: spec.mode for name, spec in step.inputs.items()},
        "inputs": {name: [token.dataset.to_wire() for token in prepared.job.tokens.get(name) or []]
                   for name in step.inputs},
    }


def deferred_items(prepared: PreparedJob) -> list[dict[str, Dataset]] | None:
    """The output item of a deferred job: a fused dataset per port; None when its recipes would
    take more than `MAX_RECIPE_BYTES` (the job then runs and writes its outputs)."""
    item = {port: Dataset(FUSED_KIND, None, recipe(prepared, port)) for port in prepared.step.outputs}
    if sum(len(_encoder.encode(dataset.value)) for dataset in item.values()) > MAX_RECIPE_BYTES:
        return None
    return [item]


class PlanBuilder:
    """Builds the fused inputs of one consumer job (`build`) and, once that job's outputs are
    written, tells the producers' contexts (`written`: their `when_written` callbacks run)."""

    def __init__(self, flow: FlowDefinition, consumer: StepContext) -> None:
        self.flow = flow
        self.consumer = consumer
        self.contexts: list[StepContext] = []
        self.stale: list[str] = []  # steps built with other code than their recipe names (module docstring)

    def build(self, spark: Any, dataset: Dataset, convert: Callable[[Dataset], Any],
              merge: Callable[[list[Dataset]], Any]) -> Any:
        """The DataFrame of a fused dataset: its step's function called on its inputs, each
        through `convert` (which comes back here for a fused input), a merge's through `merge`."""
        raw = dataset.value
        if not isinstance(raw, Mapping) or not isinstance(raw.get("step"), str):
            raise errors.BadRequest(f"a fused dataset without a recipe: {raw!r:.200}")
        step = self.flow.steps.get(raw["step"])
        if step is None:
            raise errors.BadRequest(f"flow {self.flow.name!r} has no step {raw['step']!r} to build a fused input from")
        key = str(raw.get("key", ""))
        version = step_version(step.function, step.version)
        if raw.get("version") != version and step.name not in self.stale:
            self.stale.append(step.name)
            log.warning("step %r of flow %r, fused into %r, is built with version %s, not the recipe's %s: "
                        "its consumer's outputs are not recorded for reuse", step.name, self.flow.name,
                        self.consumer.step, version, str(raw.get("version"))[:80])
        datasets = {port: [Dataset.from_wire(item) for item in items]
                    for port, items in (raw.get("inputs") or {}).items()}
        context = StepContext(flow=self.flow.name, step=step.name, run=self.consumer.run, key=key,
                              indices=list(raw.get("indices") or []), data_dir=self.consumer.data_dir,
                              attempt=self.consumer.attempt, extra={"fused_into": self.consumer.step},
                              lease=self.consumer.lease)
        value = call_step(step, context, spark, step_arguments(step, key, datasets, convert, merge))
        [item] = items_of(step, value)
        frame = item.get(str(raw.get("port")))
        if not (hasattr(frame, "schema") and hasattr(frame, "write")):
            raise errors.BadRequest(f"step {step.name!r}, fused into {self.consumer.step!r}, returned no DataFrame "
                                    f"on port {raw.get('port')!r}")
        self.contexts.append(context)
        return frame

    def written(self) -> None:
        contexts, self.contexts = self.contexts, []
        for context in contexts:
            context.outputs_written()
