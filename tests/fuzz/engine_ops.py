"""Fuzz target `engine-ops`: engine operations decoded from bytes, held to the reference model after every step.

The step logic is the engine's model-based test, `EngineMachine` in
`tests/engine/test_reference_model.py`, used as it is: enqueues with and
without pids (colliding, FIFO, at the clock), leases from one or two queues
with max_tasks / max_pid / receivers, renewals, dequeues and releases with
current and stale lease ids, atomic updates (some refused whole), queue
deletions, inspection, clock steps, commits, clean restarts and crashes (a
new engine recovered from the store). After every step `check_engine` holds
the engine, its head cache and the store's rows to `ModelQueues`.

Hypothesis's `fuzz_one_input` turns the fuzzer's bytes into that sequence of
steps (the same bytes always make the same steps under the pinned Hypothesis),
so the coverage-guided fuzzer searches the same space as the pytest
test, for as long as it is given. `explain` replays an input and prints its
steps as Hypothesis would, ready to become a regression test.
"""

from __future__ import annotations

from hypothesis import HealthCheck, Verbosity, settings
from hypothesis.stateful import get_state_machine_test

from engine.test_reference_model import EngineMachine

STEPS = 50

_settings = dict(database=None, deadline=None, stateful_step_count=STEPS, suppress_health_check=list(HealthCheck))
_run = get_state_machine_test(EngineMachine, settings=settings(**_settings))


def check(data: bytes) -> None:
    _run.hypothesis.fuzz_one_input(data)


def explain(data: bytes) -> None:
    """Replay an input, printing every step it makes."""
    verbose = get_state_machine_test(EngineMachine, settings=settings(verbosity=Verbosity.debug, **_settings))
    verbose.hypothesis.fuzz_one_input(data)
