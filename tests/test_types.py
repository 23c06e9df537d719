"""mypy accepts the package: `src/kittiwake` and the benchmarks distribution beside it
(`benchmarks/src/kittiwake_benchmarks`) type-check with the settings of `[tool.mypy]` in pyproject.toml.

The package ships `py.typed`, so its users' type checkers take these annotations at their word.
mypy runs in a subprocess of this interpreter (the lock installs it, and the stub packages the
settings rely on) over the sources beside this test, and its incremental cache lives in pytest's
cache directory (a folder for this run only under `-p no:cacheprovider`): a run after a change
checks again only the modules that change reaches. On failure the test lists every error.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MYPY_TIMEOUT_SECS = 240  # a cold cache on a busy machine; warm runs take seconds


def _cache_dir(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    cache = getattr(request.config, "cache", None)
    return cache.mkdir("mypy") if cache is not None else tmp_path / "mypy"


def test_mypy_accepts_the_package(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    if importlib.util.find_spec("mypy") is None:
        pytest.fail("mypy is not installed in this environment: `make` installs it from requirements.lock")
    completed = subprocess.run(
        [
            sys.executable, "-m", "mypy",
            "--config-file", str(ROOT / "pyproject.toml"),  # files, strictness and stubs: [tool.mypy]
            "--cache-dir", str(_cache_dir(request, tmp_path)),
            "--no-color-output", "--no-pretty", "--show-error-codes",
        ],
        cwd=ROOT, capture_output=True, text=True, timeout=MYPY_TIMEOUT_SECS,
    )
    errors = [line for line in completed.stdout.splitlines() if ": error: " in line]
    if completed.returncode != 0 or errors:
        by_file: dict[str, int] = {}
        for line in errors:
            path = line.split(":", 1)[0]
            by_file[path] = by_file.get(path, 0) + 1
        summary = "\n".join(f"  {count:4d}  {path}" for path, count in sorted(by_file.items()))
        pytest.fail(
            f"mypy found {len(errors)} errors in {len(by_file)} files (exit {completed.returncode}):\n"
            f"{summary}\n\n" + "\n".join(errors) + ("\n" + completed.stderr if completed.stderr.strip() else ""),
            pytrace=False,
        )
