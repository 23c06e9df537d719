"""Tokens and jobs on the wire, what a finished job enqueues and where it writes — pure functions, no I/O.

A token (multi-queue §III, "TokenMessage") is a task in a port queue:

* pid: the key of its data (``<run>/<index>/…``, `names.key_of`);
* data (msgpack): ``{"dataset": Dataset wire, "stack": [[index, final], …], "from": "step.port"}``
  — the whole sequence stack, every level's final flag kept, so a plain step
  can hand the flags on and a merge further down still knows its last item;
* header ``kittiwake-seq-final: 1`` on the last item of a sequence when it
  goes to a merge (sequence) port, as the joins' contract asks.

A job is what a join enqueues when its ports complete a key: data
``{"join", "key", "tokens": {port: [token, …]}}`` (`JobInput` decodes it).

`job_outputs` builds everything a finished job enqueues, to be sent in the
same atomic update that dequeues the job: a token per item, output port
and consumer port (a split pushes a level: item i of n at ``<key>/<i>``,
the last one final; a plain step keeps the key and the stack); a result
in ``outputs.<run>`` for ports nobody consumes; and the job's marker in
``done.<run>``. Tokens for optional ports go first: the broker applies an
update's enqueues in order and a join takes an optional token along only
if it stands there when the required ones complete, so a job's own
optional output is never a moment too late for its consumer.

Where a job's outputs go (`output_path`): a folder per attempt, named by the
lease the attempt holds (``lease-<id>``; the broker never gives two leases
one id). The update that finishes a job — the only one that sends its
tokens — is refused to anyone but the holder of the job's current lease, so
a token names the folder of the attempt that finished the job, and an
attempt that lost its lease (stalled, then went on) writes only its own
folder, which nothing reads. There is no commit of files to get wrong: the
finishing update is the commit.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import msgspec

from kittiwake import errors
from kittiwake.constants import SEQ_FINAL_HEADER
from kittiwake.flow.dataset import Dataset
from kittiwake.flow.definition import OPTIONAL, SEQUENCE, FlowDefinition, Step
from kittiwake.flow.names import format_index, key_of, split_key

Stack = list[list[Any]]  # [[index, final], ...], outermost first

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder()


@dataclass(slots=True)
class Token:
    """One token as a job receives it."""

    pid: str
    dataset: Dataset
    stack: Stack
    source: str | None = None

    @property
    def final(self) -> bool:
        return bool(self.stack and self.stack[-1][1])


def encode_token(dataset: Dataset, stack: Stack, source: str) -> bytes:
    return _encoder.encode({"dataset": dataset.to_wire(), "stack": stack, "from": source})


def decode_token(pid: str, data: bytes) -> Token:
    try:
        raw = _decoder.decode(data)
        return Token(pid, Dataset.from_wire(raw["dataset"]), [list(level) for level in raw.get("stack", [])],
                     raw.get("from"))
    except (msgspec.DecodeError, KeyError, TypeError) as error:
        raise errors.BadRequest(f"token {pid!r} is not a flow token: {error}") from None


@dataclass(slots=True)
class JobInput:
    """A job: its join, its key and the tokens of each port (a list per port)."""

    join: str
    key: str
    tokens: dict[str, list[Token]]

    @property
    def run(self) -> str:
        return split_key(self.key)[0]

    @property
    def indices(self) -> list[int]:
        return split_key(self.key)[1]

    def stack(self, step: Step) -> Stack:
        """The job's own sequence stack (its inputs' tokens', a merged port's one level less)."""
        for port, spec in step.inputs.items():
            tokens = self.tokens.get(port) or []
            if tokens and spec.mode != SEQUENCE:
                return [list(level) for level in tokens[0].stack]
        for port, spec in step.inputs.items():
            tokens = self.tokens.get(port) or []
            if tokens:
                return [list(level) for level in tokens[-1].stack[:-1]]
        return [[index, False] for index in self.indices]


def decode_job(data: bytes) -> JobInput:
    try:
        raw = _decoder.decode(data)
        tokens = {
            port: [decode_token(item["pid"], item["data"]) for item in items]
            for port, items in (raw.get("tokens") or {}).items()
        }
        return JobInput(raw["join"], raw["key"], tokens)
    except (msgspec.DecodeError, KeyError, TypeError, AttributeError) as error:
        raise errors.BadRequest(f"not a flow job: {error}") from None


def encode_job(join: str, key: str, tokens: Mapping[str, list[tuple[str, bytes, dict[str, str] | None]]]) -> bytes:
    """A job as the broker's join writes it (for tests and tools)."""
    return _encoder.encode({
        "join": join, "key": key,
        "tokens": {port: [{"pid": pid, "data": data, "headers": headers, "sender": None}
                          for pid, data, headers in items] for port, items in tokens.items()},
    })


# ------------------------------------------------------------------- outputs


LEASE_FOLDER_PREFIX = "lease-"


def output_path(data_dir: str, run: str, step: str, port: str, indices: list[int], item: int | None = None,
                lease: int | None = None) -> str:
    """``<data_dir>/<run>/<step>/<port>[/<index>…]/lease-<lease>``: where the attempt holding lease
    `lease` writes a job's output (indices of the output token: a split's item index included);
    without a lease, the job's folder that holds its attempts' folders (see the module docstring).
    Lease ids only grow, and no lease of a job comes after the one that finished it: the newest
    attempt's folder under a finished job's folder is the one its token names."""
    parts = [format_index(index) for index in indices]
    if item is not None:
        parts.append(format_index(item))
    if lease is not None:
        parts.append(f"{LEASE_FOLDER_PREFIX}{lease}")
    return posixpath.join(str(data_dir), run, step, port, *parts)



def output_pid(step: str, port: str, indices: list[int]) -> str:
    """A result's pid in ``outputs.<run>``: ``<step>.<port>[/<index>…]``."""
    return "/".join([f"{step}.{port}", *(format_index(index) for index in indices)])


def parse_output_pid(pid: str) -> tuple[str, list[int]]:
    """(``step.port``, indices) of a result's pid."""
    name, *rest = pid.split("/")
    return name, [int(part) for part in rest]


def done_pid(step: str, indices: list[int]) -> str:
    return "/".join([step, *(format_index(index) for index in indices)])


def item_keys(step: Step, job: JobInput, count: int) -> list[tuple[list[int], Stack]]:
    """(indices, stack) of each of a job's `count` output items."""
    stack = job.stack(step)
    indices = job.indices
    if not step.split:
        if count != 1:
            raise errors.BadRequest(f"step {step.name!r} is not a split: it has one output item per job")
        return [(indices, stack)]
    if count < 1:
        raise errors.BadRequest(f"split step {step.name!r} produced no item (a split must yield at least one)")
    return [(indices + [i], stack + [[i, i == count - 1]]) for i in range(count)]


def job_outputs(
    flow: FlowDefinition,
    step: Step,
    job: JobInput,
    items: Sequence[Mapping[str, Dataset]],
    *,
    done: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Every task a finished job enqueues (see the module docstring); `items` holds, per output
    item, the datasets by output port (a port missing from an item emits no token)."""
    names = flow.names
    run = job.run
    tasks: list[tuple[int, dict[str, Any]]] = []  # (order, task): tokens to optional ports first
    for (indices, stack), item in zip(item_keys(step, job, len(items)), items):
        for port, dataset in item.items():
            if port not in step.outputs:
                raise errors.BadRequest(f"step {step.name!r} has no output port {port!r}")
            source = step.output(port)
            data = encode_token(dataset, stack, f"{step.name}.{port}")
            consumers = flow.consumers(source)
            for consumer in consumers:
                headers = {SEQ_FINAL_HEADER: "1"} if consumer.mode == SEQUENCE and stack and stack[-1][1] else None
                task: dict[str, Any] = {"queue": consumer.step.port_queue(consumer.port),
                                        "pid": key_of(run, indices), "data": data}
                if headers:
                    task["headers"] = headers
                tasks.append((0 if consumer.mode == OPTIONAL else 1, task))
            if not consumers:
                tasks.append((1, {"queue": names.outputs_queue(run), "pid": output_pid(step.name, port, indices),
                                  "data": data}))
    tasks.sort(key=lambda pair: pair[0])  # stable: item and port order kept within each class
    ordered = [task for _order, task in tasks]
    ordered.append({"queue": names.done_queue(run), "pid": done_pid(step.name, job.indices),
                    "data": _encoder.encode(dict(done or {}))})
    return ordered


def input_tokens(flow: FlowDefinition, run: str, inputs: Mapping[str, Dataset]) -> list[dict[str, Any]]:
    """The tokens that start a run: one per flow input and consumer port, at key = run id."""
    tasks: list[dict[str, Any]] = []
    for name, dataset in inputs.items():
        data = encode_token(dataset, [], f"input.{name}")
        for consumer in flow.consumers(flow.inputs[name]):
            tasks.append({"queue": consumer.step.port_queue(consumer.port), "pid": run, "data": data})
    return tasks


def encode(value: Any) -> bytes:
    return _encoder.encode(value)


def decode(data: bytes) -> Any:
    return _decoder.decode(data)
