"""The tests of the benchmarks of other systems need their distribution (`benchmarks/`, kittiwake-benchmarks),
which `make setup` installs beside the package; without it they stop the run with that hint, not an
import error per file."""

from __future__ import annotations

import importlib.util

import pytest

if importlib.util.find_spec("kittiwake_benchmarks") is None:
    raise pytest.UsageError("tests/benchmarks needs the kittiwake-benchmarks distribution: "
                            "make setup, or pip install -e ./benchmarks")
