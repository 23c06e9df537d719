"""Where a flow's tokens, jobs and runs live: every queue, join and key name of a flow, declared once.

A flow named ``sales`` lives in the consistency group ``flow.sales``, so a
job's outputs, its end and the jobs its tokens start are one atomic update
(multi-queue §III: a queue family per data flow; here a queue per input port):

* ``flow.sales#in.<step>.<port>``: the tokens waiting at one input port of a step;
* ``flow.sales#steps.<engine>.<step>``: the jobs the step's join starts (pid = key), and
  ``….dead`` their dead letters. Workers of an engine (``python``, ``spark``) serve the job
  queues of its steps. A queue per step, not per engine: a join starts no job while a job
  with its key waits in its job queue, so two steps of one engine sharing a queue would stall
  each other at every key they share;
* ``flow.sales#runs``: one record per run, pid = run id (kept);
* ``flow.sales#runs.ended``: the end of a run (done or cancelled), pid = run id (kept);
* ``flow.sales#outputs.<run>``: the tokens of a run's outputs (steps nobody consumes), kept;
* ``flow.sales#done.<run>``: one marker per finished job of a run, deleted when the run ends.

The join of step ``clean`` is named ``flow.sales#clean``.

Keys (the joins' contract): a run's key is its id; each split appends
``/<index>`` with 8 digits, so pid order is numeric order and a merge's key
is the pid without its last segment.
"""

from __future__ import annotations

import re
import secrets
import time

from kittiwake import errors

SEQUENCE_DIGITS = 8
MAX_INDEX = 10**SEQUENCE_DIGITS - 1
ENGINES = ("python", "spark")

_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
_RUN_ID_RE = re.compile(r"[A-Za-z0-9_.:@-]{1,80}")


RESERVED_NAMES = ("dead", "delayed", "gang", "ticks-done")  # queue endings Kittiwake uses itself


def check_name(value: object, what: str) -> str:
    """A flow, step or port name: 1..64 of [A-Za-z0-9_-], not one of `RESERVED_NAMES`."""
    if not isinstance(value, str) or not _NAME_RE.fullmatch(value):
        raise errors.BadRequest(f"{what} must be 1..64 characters of [A-Za-z0-9_-], not {value!r}")
    if value in RESERVED_NAMES:
        raise errors.BadRequest(f"{what} cannot be {value!r}: Kittiwake ends queue names with it")
    return value


def check_run_id(value: object) -> str:
    """A run id: 1..80 of [A-Za-z0-9_.:@-] (it names a queue and a folder; no '/')."""
    if not isinstance(value, str) or not _RUN_ID_RE.fullmatch(value) or value in (".", ".."):
        raise errors.BadRequest(f"a run id must be 1..80 characters of [A-Za-z0-9_.:@-], not {value!r}")
    return value


def new_run_id(now: float | None = None) -> str:
    """A fresh run id that sorts by start time: ``20250101T120000-3fa2c1d9``."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(time.time() if now is None else now))
    return f"{stamp}-{secrets.token_hex(4)}"


class FlowNames:
    """The queue and join names of one flow."""

    def __init__(self, flow: str) -> None:
        self.flow = check_name(flow, "a flow name")
        self.group = f"flow.{flow}"

    def port_queue(self, step: str, port: str) -> str:
        return f"{self.group}#in.{step}.{port}"

    def job_queue(self, engine: str, step: str) -> str:
        return f"{self.group}#steps.{engine}.{step}"

    def join(self, step: str) -> str:
        return f"{self.group}#{step}"

    def step_of_join(self, join: str) -> str:
        prefix = f"{self.group}#"
        if not join.startswith(prefix):
            raise errors.BadRequest(f"join {join!r} is not one of flow {self.flow!r}")
        return join[len(prefix):]

    @property
    def runs_queue(self) -> str:
        return f"{self.group}#runs"

    @property
    def ended_queue(self) -> str:
        return f"{self.group}#runs.ended"

    def outputs_queue(self, run: str) -> str:
        return f"{self.group}#outputs.{run}"

    def done_queue(self, run: str) -> str:
        return f"{self.group}#done.{run}"


# ---------------------------------------------------------------- keys and sequence stacks


def key_of(run: str, indices: list[int] | tuple[int, ...]) -> str:
    """The key of a run's data at sequence `indices` (outermost first)."""
    return "/".join([run, *(format_index(index) for index in indices)])


def format_index(index: int) -> str:
    if not isinstance(index, int) or not 0 <= index <= MAX_INDEX:
        raise errors.BadRequest(f"a sequence index must be 0..{MAX_INDEX}, not {index!r}")
    return f"{index:0{SEQUENCE_DIGITS}d}"


def split_key(key: str) -> tuple[str, list[int]]:
    """(run id, sequence indices) of a key."""
    run, *rest = key.split("/")
    return run, [int(part) for part in rest]


def run_of_key(key: str) -> str:
    return key.split("/", 1)[0]


def belongs_to_run(pid: str, run: str) -> bool:
    """Whether a pid (a key, or a dead letter's ``<key>~<time>``) is of run `run`."""
    return pid == run or pid.startswith(run + "/") or pid.startswith(run + "~")
