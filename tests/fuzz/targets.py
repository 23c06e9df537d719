"""The fuzz targets, where their corpora live, and how long their inputs may be.

Each target is a module with `check(data: bytes) -> None` that raises on a
violated property; `run_target.py` runs one under atheris, `campaign.py`
(`make fuzz`) runs them all, and `test_fuzz_targets.py` replays the corpora
and fuzzes each for a moment in the suite. Imports nothing from kittiwake, so
the atheris entry point can instrument kittiwake as it is first imported.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
CORPUS_DIR = HERE / "corpus"  # per target: a small, merged set of inputs that reach its coverage
CRASHERS_DIR = HERE / "crashers"  # per target: inputs that once failed; replayed by the suite for good


@dataclass(frozen=True)
class Target:
    name: str
    module: str
    max_len: int  # bytes per input
    covers: tuple[str, ...]  # kittiwake modules whose executed lines `make fuzz` reports
    summary: str
    suite_runs: int  # fresh inputs the suite's short run tries: about a second's worth
    flags: tuple[str, ...] = ()  # libFuzzer flags of its own

    @property
    def corpus(self) -> Path:
        return CORPUS_DIR / self.name

    @property
    def crashers(self) -> Path:
        return CRASHERS_DIR / self.name

    def load(self) -> Callable[[bytes], None]:
        return importlib.import_module(self.module).check


TARGETS: dict[str, Target] = {
    target.name: target
    for target in (
        Target(
            name="frames",
            module="fuzz.frame_decoder",
            max_len=4096,
            covers=("protocol/frames.py",),
            summary="FrameReader fed any stream cut anywhere, against a one-shot reading",
            suite_runs=3000,
        ),
        Target(
            name="requests",
            module="fuzz.request_decoder",
            max_len=4096,
            covers=("protocol/messages.py",),
            summary="decode_request on any body and on typed bodies with wrong fields",
            suite_runs=400,
        ),
        Target(
            name="request-path",
            module="fuzz.request_path",
            max_len=8192,
            covers=(
                "broker/connection.py",
                "broker/group_commit.py",
                "broker/dispatch.py",
                "engine/engine.py",
                "engine/dependencies.py",
                "engine/inspection.py",
                "model.py",
            ),
            summary="client sessions through connection, group commit, dispatch and engine on the memory store",
            suite_runs=300,
        ),
        Target(
            name="engine-ops",
            module="fuzz.engine_ops",
            max_len=2048,
            covers=("engine/engine.py", "engine/queue_state.py", "store/memory.py"),
            summary="engine operations, restarts and crashes held to the reference model after every step",
            suite_runs=80,
            # a step takes several bytes: long inputs from the start, or runs stay a few steps long
            flags=("-len_control=0",),
        ),
    )
}
