"""The fuzz targets in the suite: every committed input replayed, then a moment of fresh fuzzing.

Each target's corpus (`tests/fuzz/corpus/<target>/`) and every input that ever failed
(`tests/fuzz/crashers/<target>/`) run in this process first: a crasher committed there is a
regression test from then on. Then each target runs under atheris for about a second's worth of
fresh inputs (`Target.suite_runs`), mutated from a sample of its corpus (the whole corpus was
just replayed), with kittiwake instrumented, and must end without a crash, hang or memory
blow-up. `make fuzz` is the long run.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .targets import TARGETS, Target

RUN_TARGET = Path(__file__).resolve().parent / "run_target.py"
SEEDS = 32  # corpus inputs the fresh run starts from


def committed_inputs(target: Target) -> list[Path]:
    return [path for directory in (target.corpus, target.crashers) if directory.is_dir() for path in sorted(directory.iterdir())]


@pytest.mark.parametrize("name", list(TARGETS))
def test_committed_inputs_replay_clean(name: str) -> None:
    target = TARGETS[name]
    check = target.load()
    inputs = committed_inputs(target)
    assert inputs, f"no corpus for {name}: run make fuzz"
    for path in inputs:
        try:
            check(path.read_bytes())
        except Exception as exc:
            raise AssertionError(f"{path.relative_to(RUN_TARGET.parents[2])} fails: {exc!r}") from exc


@pytest.mark.parametrize("name", list(TARGETS))
def test_fresh_inputs_find_no_failure(name: str, tmp_path: Path) -> None:
    if importlib.util.find_spec("atheris") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("atheris is not installed (make setup installs it from requirements.lock on Linux x86_64)")
        pytest.skip("atheris is not installed: it has wheels for Linux x86_64 only")
    target = TARGETS[name]
    seeds, new = tmp_path / "seeds", tmp_path / "new"
    seeds.mkdir()
    new.mkdir()
    corpus = sorted(target.corpus.iterdir())
    for path in corpus[:: max(1, len(corpus) // SEEDS)]:
        shutil.copy(path, seeds / path.name)
    command = [
        sys.executable, str(RUN_TARGET), name, str(new), str(seeds),
        f"-runs={len(list(seeds.iterdir())) + target.suite_runs}", f"-max_len={target.max_len}", "-timeout=10",
        "-rss_limit_mb=1024", f"-artifact_prefix={tmp_path}/", *target.flags,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    output = "\n".join(line for line in done.stderr.splitlines() if not line.startswith("INFO: Instrumenting"))
    assert done.returncode == 0, f"{name} failed; the input is in {tmp_path}:\n{output[-6000:]}"
