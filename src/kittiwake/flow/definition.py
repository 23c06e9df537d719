"""Declaring a flow: steps with named input and output ports, wired into a DAG.

    flow = Flow("sales")          # kittiwake.flow.Flow: this definition and the calls that run it

    @flow.step(inputs={"folder": flow.input("raw")}, split=True)
    def files(ctx, folder): ...                       # yields one Dataset per item

    @flow.step(engine="spark", inputs={"part": files})
    def clean(spark, part): ...                       # a DataFrame in, a DataFrame out

    @flow.step(engine="spark", inputs={"parts": merge(clean)})
    def report(spark, parts): ...                     # the whole sequence in

A source is a flow input (`Flow.input`), a step (its ``out`` port) or one
port of a step (``step["name"]``); `merge(source)` makes an input consume a
whole sequence, `optional(source)` one that a job takes along when present
but does not wait for.

Sequence depth (multi-queue §III, the stack of sequence numbers): flow
inputs are at depth 0; a split step's outputs are one deeper than its
inputs; a merge input is one deeper than its step. Every input of a step must
be at the step's depth (a merge input at one more), else the joins could
never match keys: `Flow.step` refuses such wiring with BadRequest.

Each step is one join of the broker (`declare_join`): its inputs are the
join's ports (required, optional or sequence), its job queue the step's
own under its engine's (`names`).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence

from kittiwake import errors
from kittiwake.flow.names import ENGINES, FlowNames, check_name

DEFAULT_OUTPUT = "out"
DEFAULT_MAX_ATTEMPTS = 3
FUSE_PLAN = "plan"  # the step's DataFrame is built into each consumer's plan, never written (`plan_fusion`)
FUSE_CACHE = "cache"  # the step's DataFrame is cached for a consumer on the same worker and written (`fusion`)
FUSE_MODES = (FUSE_PLAN, FUSE_CACHE)
DEFAULT_LEASE_SECS = 60.0
DEFAULT_RETRY_BACKOFF_SECS = 1.0

REQUIRED, OPTIONAL, SEQUENCE = "required", "optional", "sequence"


@dataclass(frozen=True, slots=True)
class FlowInput:
    """A named input of the flow, given to `Flow.run` as a Dataset."""

    flow: str
    name: str

    @property
    def depth(self) -> int:
        return 0

    def __repr__(self) -> str:
        return f"<flow input {self.name}>"


@dataclass(frozen=True, slots=True)
class Output:
    """One output port of a step, as a source for other steps' inputs."""

    step: Step
    port: str

    @property
    def depth(self) -> int:
        return self.step.depth

    def __repr__(self) -> str:
        return f"<output {self.step.name}.{self.port}>"


Source = FlowInput | Output


@dataclass(frozen=True, slots=True)
class Input:
    """A source as a step's input: `mode` is required, optional or sequence (a merge)."""

    source: Source
    mode: str = REQUIRED


def merge(source: Any) -> Input:
    """An input that consumes a whole sequence of `source` (every item of one split), popping a level.

    A python step gets a list of Datasets in index order; a Spark step gets one DataFrame, the
    union (by column name) of the parts."""
    return Input(_source(source), SEQUENCE)


def optional(source: Any) -> Input:
    """An input the job takes along when its token is there when the others complete, and does
    without (the argument is None) when it is not: the job never waits for it."""
    return Input(_source(source), OPTIONAL)


def _source(value: Any) -> Source:
    if isinstance(value, Step):
        return value.output(DEFAULT_OUTPUT)
    if isinstance(value, (FlowInput, Output)):
        return value
    if isinstance(value, Input):
        raise errors.BadRequest("merge() and optional() take a step, a step's port or a flow input, not another input")
    raise errors.BadRequest(f"an input source must be a step, step['port'] or flow.input(name), not {value!r:.80}")


@dataclass(eq=False)
class Step:
    """A step of a flow: a function, its engine, its input ports (port -> Input) and output ports.

    Calling a step calls its function (for tests)."""

    flow: FlowDefinition
    name: str
    function: Callable[..., Any]
    engine: str
    inputs: dict[str, Input]
    outputs: tuple[str, ...]
    split: bool
    max_attempts: int
    retry_backoff_secs: float
    depth: int = 0
    reuse: bool = False
    version: str | None = None
    fuse: str | None = None  # FUSE_PLAN, FUSE_CACHE or None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)

    def output(self, port: str = DEFAULT_OUTPUT) -> Output:
        if port not in self.outputs:
            raise errors.BadRequest(f"step {self.name!r} has no output {port!r} (it has {', '.join(self.outputs)})")
        return Output(self, port)

    def __getitem__(self, port: str) -> Output:
        return self.output(port)

    @property
    def join(self) -> str:
        return self.flow.names.join(self.name)

    @property
    def job_queue(self) -> str:
        return self.flow.names.job_queue(self.engine, self.name)

    def port_queue(self, port: str) -> str:
        return self.flow.names.port_queue(self.name, port)

    def ports(self, mode: str) -> dict[str, str]:
        """Port -> queue of this step's inputs in `mode` (the join's spec)."""
        return {port: self.port_queue(port) for port, spec in self.inputs.items() if spec.mode == mode}

    def __repr__(self) -> str:
        return f"<step {self.flow.name}.{self.name} engine={self.engine}>"


@dataclass(frozen=True, slots=True)
class Consumer:
    """Where an output's tokens go: a step's input port."""

    step: Step
    port: str
    mode: str


class FlowDefinition:
    """A DAG of steps, by name; see the module docstring. `name` names its queues (`names`).

    `kittiwake.flow.Flow` adds the calls that run it."""

    def __init__(
        self,
        name: str,
        *,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        lease_secs: float = DEFAULT_LEASE_SECS,
        reuse: bool = False,
        fuse: bool | str | None = None,
    ) -> None:
        self.names = FlowNames(name)
        self.reuse = bool(reuse)
        self.fuse = fuse_mode(fuse)
        self.name = name
        self.max_attempts = _positive_int(max_attempts, "max_attempts")
        if not isinstance(lease_secs, (int, float)) or not 1 <= lease_secs <= 43_200:
            raise errors.BadRequest(f"lease_secs must be 1..43200, not {lease_secs!r}")
        self.lease_secs = float(lease_secs)
        self.inputs: dict[str, FlowInput] = {}
        self.steps: dict[str, Step] = {}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} steps={len(self.steps)}>"

    # ---------------------------------------------------------- declaring

    def input(self, name: str) -> FlowInput:
        """The flow input `name` (declared on first use); `Flow.run` must be given each one."""
        check_name(name, "a flow input name")
        return self.inputs.setdefault(name, FlowInput(self.name, name))

    def step(
        self,
        function: Callable[..., Any] | None = None,
        /,
        *,
        engine: str = "python",
        inputs: Mapping[str, Any] | None = None,
        outputs: Sequence[str] = (DEFAULT_OUTPUT,),
        split: bool = False,
        name: str | None = None,
        max_attempts: int | None = None,
        retry_backoff: float = DEFAULT_RETRY_BACKOFF_SECS,
        reuse: bool | None = None,
        version: str | None = None,
        fuse: bool | str | None = None,
    ) -> Any:
        """Declare a step: ``@flow.step(engine="spark", inputs={"port": source, ...})``.

        * `engine`: ``python`` (run by ``kittiwake worker MODULE:FLOW``; the function gets a
          `StepContext` then one argument per input port: a Dataset, a list of Datasets for a
          merge input, None for a missing optional one) or ``spark`` (run by ``kittiwake
          spark-worker MODULE:FLOW``; the function gets the SparkSession then one DataFrame
          per input port, None for a missing optional one).
        * `inputs`: port name -> a step (its ``out`` port), ``step["port"]``,
          ``flow.input(name)``, ``merge(source)`` or ``optional(source)``; ports are passed as
          keyword arguments.
        * `outputs`: the step's output ports. With one port the function returns its data
          (python: a Dataset, or any msgpack-able value sent inline; spark: a DataFrame);
          with several, a dict port -> data (a port left out emits no token).
        * `split`: the function returns (or yields) many items, each one as above; each item
          becomes a token one sequence level deeper (index 0, 1, ...; the last one flagged
          final). A split must yield at least one item.
        * `name`: the step's name (default: the function's); `max_attempts`: runs allowed in
          all before its job is dead-lettered and the run fails (default: the flow's);
          `retry_backoff`: seconds before retry n, doubled each time.
        * `reuse`: the step is deterministic — the same inputs give the same outputs — so a job
          whose inputs have the fingerprint of a job a previous run finished with the same step
          version takes that job's outputs instead of running (`kittiwake.flow.reuse`; default:
          the flow's `reuse`). `version`: the step's version for reuse (default: a hash of the
          function's source code); declare one when the function's result depends on code
          outside it that changes.
        * `fuse` (Spark steps; default: the flow's `fuse`, none): ``"plan"`` — the DataFrame this
          step returns is never written: its job only hands its consumers a recipe (this step
          and its inputs), and each consumer job calls this function and builds the DataFrame
          into its own query (`kittiwake.flow.plan_fusion`; for deterministic steps whose every
          consumer is a Spark step, else the job runs and writes as usual). ``"cache"`` (or
          True) — the DataFrame is written and also kept cached in the worker's session for a
          Spark consumer that also fuses and runs there next (`kittiwake.flow.fusion`).
        """

        if version is not None and (not isinstance(version, str) or not version or len(version) > 200):
            raise errors.BadRequest(f"version must be a non-empty string of at most 200 characters, not {version!r}")

        declared_fuse = fuse_mode(fuse)
        if declared_fuse == FUSE_PLAN and (engine != "spark" or split):
            raise errors.BadRequest("fuse='plan' is for Spark steps that do not split")

        def register(function: Callable[..., Any]) -> Step:
            step = self._add_step(function, engine, inputs, outputs, split, name, max_attempts, retry_backoff)
            step.reuse = self.reuse if reuse is None else bool(reuse)
            step.fuse = self.fuse if fuse is None else declared_fuse
            step.version = version
            return step

        return register(function) if function is not None else register

    def _add_step(
        self,
        function: Callable[..., Any],
        engine: str,
        inputs: Mapping[str, Any] | None,
        outputs: Sequence[str],
        split: bool,
        name: str | None,
        max_attempts: int | None,
        retry_backoff: float,
    ) -> Step:
        if not callable(function):
            raise errors.BadRequest(f"a step is a function, not {function!r:.80}")
        step_name = check_name(name if name is not None else function.__name__, "a step name")
        if step_name in self.steps:
            raise errors.BadRequest(f"flow {self.name!r} already has a step named {step_name!r}")
        if engine not in ENGINES:
            raise errors.BadRequest(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
        if not inputs:
            raise errors.BadRequest(f"step {step_name!r} needs at least one input")
        ports: dict[str, Input] = {}
        for port, value in inputs.items():
            check_name(port, "an input port name")
            spec = value if isinstance(value, Input) else Input(_source(value))
            if isinstance(spec.source, FlowInput):
                if spec.source.flow != self.name:
                    raise errors.BadRequest(f"input {port!r} is an input of flow {spec.source.flow!r}")
                self.inputs.setdefault(spec.source.name, spec.source)
            elif spec.source.step.flow is not self:
                raise errors.BadRequest(f"input {port!r} comes from a step of another flow")
            ports[port] = spec
        if all(spec.mode == OPTIONAL for spec in ports.values()):
            raise errors.BadRequest(f"step {step_name!r} needs an input that is not optional")
        if isinstance(outputs, str) or not outputs:
            raise errors.BadRequest("outputs must be a non-empty sequence of port names")
        out = tuple(check_name(port, "an output port name") for port in outputs)
        if len(set(out)) != len(out):
            raise errors.BadRequest(f"step {step_name!r} names an output port twice")
        if not isinstance(retry_backoff, (int, float)) or retry_backoff < 0:
            raise errors.BadRequest(f"retry_backoff must be a number of seconds >= 0, not {retry_backoff!r}")
        step = Step(
            flow=self, name=step_name, function=function, engine=engine, inputs=ports, outputs=out,
            split=bool(split), max_attempts=_positive_int(max_attempts or self.max_attempts, "max_attempts"),
            retry_backoff_secs=float(retry_backoff),
        )
        step.depth = _depth_of(step)
        _check_signature(step)
        self.steps[step_name] = step
        return step

    # ------------------------------------------------------------ wiring

    def consumers(self, source: Source) -> list[Consumer]:
        """The input ports fed by `source`, in step declaration order."""
        found: list[Consumer] = []
        for step in self.steps.values():
            for port, spec in step.inputs.items():
                if spec.source == source:
                    found.append(Consumer(step, port, spec.mode))
        return found

    def sinks(self) -> list[Output]:
        """Outputs no step consumes: a run's results."""
        return [step.output(port) for step in self.steps.values() for port in step.outputs
                if not self.consumers(step.output(port))]

    def job_queues(self, engine: str | None = None) -> list[str]:
        """The job queues of the steps of `engine` (of every step for None)."""
        return [step.job_queue for step in self.steps.values() if engine is None or step.engine == engine]

    def engines(self) -> list[str]:
        return sorted({step.engine for step in self.steps.values()})

    def steps_of(self, engine: str) -> list[Step]:
        return [step for step in self.steps.values() if step.engine == engine]

    def step_of_join(self, join: str) -> Step:
        name = self.names.step_of_join(join)
        step = self.steps.get(name)
        if step is None:
            raise errors.BadRequest(f"flow {self.name!r} has no step {name!r}")
        return step

    def __iter__(self) -> Iterator[Step]:
        return iter(self.steps.values())


def _positive_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1_000_000:
        raise errors.BadRequest(f"{what} must be an integer 1..1000000, not {value!r}")
    return value


def _depth_of(step: Step) -> int:
    """The step's sequence depth; BadRequest when its inputs cannot meet on one key."""
    depths: set[int] = set()
    for port, spec in step.inputs.items():
        depth = spec.source.depth - (1 if spec.mode == SEQUENCE else 0)
        if depth < 0:
            raise errors.BadRequest(
                f"step {step.name!r}: input {port!r} merges {spec.source!r}, which is not a sequence (depth 0)"
            )
        depths.add(depth)
    if len(depths) > 1:
        detail = ", ".join(f"{port}: {spec.source.depth}{' (merged)' if spec.mode == SEQUENCE else ''}"
                           for port, spec in step.inputs.items())
        raise errors.BadRequest(
            f"step {step.name!r}: its inputs are at different sequence depths ({detail}); "
            "split or merge them to one depth"
        )
    return depths.pop() + (1 if step.split else 0)


def _check_signature(step: Step) -> None:
    """The function must accept the context (or session) and every input port by name."""
    try:
        signature = inspect.signature(step.function)
    except (TypeError, ValueError):
        return
    params = list(signature.parameters.values())
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    names = {p.name for p in params[1:] if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    missing = [port for port in step.inputs if port not in names]
    if not params or missing:
        first = "a StepContext" if step.engine == "python" else "the SparkSession"
        raise errors.BadRequest(
            f"step {step.name!r}: the function must take {first} first, then each input port by name"
            + (f" (missing: {', '.join(missing)})" if missing else "")
        )


def fuse_mode(value: bool | str | None) -> str | None:
    """A `fuse=` argument as a step keeps it: "plan", "cache" (True) or None (False, None)."""
    if value is None or value is False:
        return None
    if value is True:
        return FUSE_CACHE
    if value in FUSE_MODES:
        return str(value)
    raise errors.BadRequest(f"fuse must be 'plan', 'cache', True or False, not {value!r:.40}")
