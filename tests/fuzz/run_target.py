"""Run one fuzz target under atheris (libFuzzer), with kittiwake instrumented for coverage.

    python tests/fuzz/run_target.py TARGET [CORPUS_DIR...] [-libFuzzer_flag=value...]

Everything after the target name goes to libFuzzer as it is (`-max_total_time=60`,
`-runs=N`, `-merge=1`, corpus directories). kittiwake and the targets' own
input generators are instrumented (so the fuzzer also learns which shapes of
request it has made); Hypothesis and msgspec internals are not, as their
coverage would lead the fuzzer astray.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, as conftest.py does

import atheris  # noqa: E402

from fuzz.allocation import keep_tracing  # noqa: E402
from fuzz.targets import TARGETS  # noqa: E402


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(TARGETS)}}} [libFuzzer arguments]")
    target = TARGETS[sys.argv[1]]
    keep_tracing()  # a fuzzing process runs millions of inputs
    with atheris.instrument_imports(include=["kittiwake", "fuzz"]):
        check = target.load()
    # libFuzzer's -merge and -fork run argv[0] again through the shell: make it the whole command
    again = " ".join(shlex.quote(part) for part in (sys.executable, str(Path(__file__).resolve()), target.name))
    atheris.Setup([again, *sys.argv[2:]], check)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
