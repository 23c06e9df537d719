"""`make fuzz`: each target under atheris for a bounded time, its corpus merged back, its figures printed.

    python tests/fuzz/campaign.py [--secs 60] [--targets frames,requests,...] [--keep-corpus] [--json PATH]

For each target, one after the other (libFuzzer takes a core):

1. fuzz for `--secs` seconds from the committed corpus; new inputs go to a
   scratch directory, a crash, hang (`-timeout`) or memory blow-up
   (`-rss_limit_mb`) stops the target and leaves its input in
   `tests/fuzz/crashers/<target>/`, which the suite replays from then on;
2. merge the committed corpus and the new inputs into a small set that keeps
   every feature reached (`-set_cover_merge=1`), at most `MAX_CORPUS_FILES` of
   the smallest files, and write it back to `tests/fuzz/corpus/<target>/`
   (`--keep-corpus` leaves the committed corpus alone);
3. replay that corpus under a line tracer for the lines it executes in the
   modules the target is about.

Prints one row per target: executions, executions per second, libFuzzer's
`cov` (instrumented edges reached) and `ft` (features), corpus files, lines
executed, and the verdict. Exits 1 if any target failed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, as conftest.py does

from fuzz.line_coverage import measure  # noqa: E402
from fuzz.targets import TARGETS, Target  # noqa: E402

RUN_TARGET = Path(__file__).resolve().parent / "run_target.py"
KITTIWAKE = Path(__file__).resolve().parents[2] / "src" / "kittiwake"
MAX_CORPUS_FILES = 400
TIMEOUT_SECS = 10  # one input running longer than this is a hang
RSS_LIMIT_MB = 1024
STATUS = re.compile(r"^#(\d+)\s+(\w+)\s+cov: (\d+) ft: (\d+)(?:.*?exec/s: (\d+))?")
STAT = re.compile(r"^stat::(\w+):\s+(\d+)")
WRITTEN = re.compile(r"Test unit written to (\S+)")


@dataclass
class Result:
    target: str
    secs: int
    executions: int = 0
    exec_per_sec: int = 0
    cov: int = 0
    ft: int = 0
    corpus_files: int = 0
    lines_executed: int = 0
    lines_total: int = 0
    lines_by_file: dict[str, str] = field(default_factory=dict)
    verdict: str = "ok"
    artifact: str | None = None


def fuzz_flags(target: Target, secs: int) -> list[str]:
    flags = [f"-max_len={target.max_len}", f"-timeout={TIMEOUT_SECS}", f"-rss_limit_mb={RSS_LIMIT_MB}"]
    return flags + [f"-max_total_time={secs}", "-print_final_stats=1"] + list(target.flags)


def read_line(target: Target, line: str, result: Result, failure: list[str]) -> None:
    """Take the figures from one line of libFuzzer's output; echo its status lines."""
    status = STATUS.match(line)
    if status:
        result.executions, result.cov, result.ft = int(status[1]), int(status[3]), int(status[4])
        if status[5]:
            result.exec_per_sec = int(status[5])
        if status[2] in ("INITED", "DONE", "pulse"):
            print(f"  {target.name}: {line.rstrip()}", flush=True)
    stat = STAT.match(line)
    if stat and stat[1] == "number_of_executed_units":
        result.executions = int(stat[2])
    elif stat and stat[1] == "average_exec_per_sec":
        result.exec_per_sec = int(stat[2])
    written = WRITTEN.search(line)
    if written:
        result.artifact = written[1]
    if "ERROR: libFuzzer" in line or "Uncaught Python exception" in line:
        failure.append(line.strip())


def fuzz(target: Target, secs: int, scratch: Path, log: Path) -> Result:
    """Fuzz one target for `secs` seconds; its status lines are echoed as they come."""
    result = Result(target.name, secs)
    target.crashers.mkdir(parents=True, exist_ok=True)
    target.corpus.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable, str(RUN_TARGET), target.name, str(scratch), str(target.corpus),
        *fuzz_flags(target, secs), f"-artifact_prefix={target.crashers}/",
    ]
    failure: list[str] = []
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
        assert process.stdout is not None
        for line in process.stdout:
            out.write(line)
            read_line(target, line, result, failure)
        returncode = process.wait()
    if returncode != 0 or failure:
        kind = "timeout" if any("timeout" in line for line in failure) else (
            "out-of-memory" if any("out-of-memory" in line for line in failure) else "crash")
        result.verdict = kind
        print(f"  {target.name}: {kind} (exit {returncode}); input {result.artifact}; log {log}", flush=True)
        print("\n".join("    " + line for line in log.read_text(errors="replace").splitlines()[-40:]), flush=True)
    return result


def merge(target: Target, scratch: Path, work: Path) -> None:
    """Replace the committed corpus by the minimal set covering it and the new inputs."""
    merged = work / f"{target.name}-merged"
    merged.mkdir()
    command = [sys.executable, str(RUN_TARGET), target.name, "-set_cover_merge=1", f"-max_len={target.max_len}",
               f"-timeout={TIMEOUT_SECS}", f"-rss_limit_mb={RSS_LIMIT_MB}", *target.flags,
               str(merged), str(target.corpus), str(scratch)]
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        print(f"  {target.name}: merge failed (exit {done.returncode}), corpus left as it was\n{done.stderr[-2000:]}")
        return
    files = sorted(merged.iterdir(), key=lambda path: (path.stat().st_size, path.name))
    if len(files) > MAX_CORPUS_FILES:
        print(f"  {target.name}: the merged corpus has {len(files)} files; keeping the {MAX_CORPUS_FILES} smallest")
        files = files[:MAX_CORPUS_FILES]
    print(f"  {target.name}: corpus of {len(files)} files, {sum(path.stat().st_size for path in files):,} bytes", flush=True)
    shutil.rmtree(target.corpus)
    target.corpus.mkdir(parents=True)
    for path in files:
        shutil.copy(path, target.corpus / path.name)


def count_lines(target: Target, directories: list[Path], result: Result) -> None:
    """Replay the inputs in `directories` and count the lines they execute in the target's modules."""
    inputs = [path.read_bytes() for directory in directories for path in sorted(directory.iterdir())]
    result.corpus_files = len(inputs)
    files = measure(target.load(), inputs, [KITTIWAKE / name for name in target.covers])
    for each in files:
        executed = len(each.executed & each.executable)
        result.lines_executed += executed
        result.lines_total += len(each.executable)
        result.lines_by_file[each.path.relative_to(KITTIWAKE).as_posix()] = (
            f"{executed}/{len(each.executable)} ({each.percent:.0f}%)"
        )


def report(results: list[Result]) -> None:
    print()
    print(f"{'target':<14}{'secs':>6}{'executions':>12}{'exec/s':>8}{'cov':>7}{'ft':>7}{'corpus':>8}  {'lines executed':<22}verdict")
    for each in results:
        share = f"{each.lines_executed}/{each.lines_total}"
        if each.lines_total:
            share += f" ({100 * each.lines_executed / each.lines_total:.0f}%)"
        print(f"{each.target:<14}{each.secs:>6}{each.executions:>12,}{each.exec_per_sec:>8}{each.cov:>7}{each.ft:>7}"
              f"{each.corpus_files:>8}  {share:<22}{each.verdict}")
    for each in results:
        for name, share in each.lines_by_file.items():
            print(f"  {each.target:<14}{name:<28}{share}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--secs", type=int, default=int(os.environ.get("FUZZ_SECS", "60")), help="seconds per target")
    parser.add_argument("--targets", default=",".join(TARGETS), help="comma-separated: " + ", ".join(TARGETS))
    parser.add_argument("--keep-corpus", action="store_true", help="do not write the merged corpus back")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    names = [name for name in args.targets.split(",") if name]
    unknown = [name for name in names if name not in TARGETS]
    if unknown:
        parser.error(f"unknown targets {unknown}; known: {', '.join(TARGETS)}")
    results = []
    with tempfile.TemporaryDirectory(prefix="kittiwake-fuzz-") as tmp:
        work = Path(tmp)
        for name in names:
            target = TARGETS[name]
            scratch = work / name
            scratch.mkdir()
            print(f"{name}: {target.summary}; {args.secs} s", flush=True)
            started = time.monotonic()
            result = fuzz(target, args.secs, scratch, work / f"{name}.log")
            if args.keep_corpus:
                inputs = [target.corpus, scratch]
            else:
                merge(target, scratch, work)
                inputs = [target.corpus]
            count_lines(target, inputs, result)
            print(f"  {name}: done in {time.monotonic() - started:.0f} s", flush=True)
            results.append(result)
    report(results)
    if args.json:
        args.json.write_text(json.dumps([asdict(each) for each in results], indent=2) + "\n")
    return 0 if all(each.verdict == "ok" for each in results) else 1


if __name__ == "__main__":
    sys.exit(main())
