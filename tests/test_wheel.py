"""The `kittiwake` wheel holds the broker's own benchmarks and none of another system's, and works
without the benchmarks distribution (`benchmarks/`, kittiwake-benchmarks).

The wheel is built from a copy of this checkout's sources (pyproject.toml, README.md, src/: no
`build/` left over from an older tree, none left behind) as a user's pip builds it (`pip wheel
--no-deps --no-build-isolation`), then installed into a fresh virtual environment of its own, with its
dependencies and nothing else (pip resolves them from the index this environment was installed
from): there `kittiwake bench ops` runs (a short measured run), `kittiwake bench --help` lists only the broker's
own benchmarks, and `kittiwake bench peers` says how to install the distribution.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD_TIMEOUT_SECS = 240
# Modules of the benchmarks of other systems: none of them may ship in the wheel.
FORBIDDEN = ("kittiwake/bench/peers/", "kittiwake/bench/workers/", "kittiwake/bench/mapreduce/",
             "kittiwake/bench/spark_peer.py", "kittiwake/bench/tasks.py", "kittiwake/bench/task_processes.py",
             "kittiwake/bench/celery_transport", "kittiwake/bench/sqs.py", "kittiwake/bench/dashboard.py",
             "kittiwake/bench/flows.py", "kittiwake/bench/flow_probe.py", "kittiwake/bench/join_load.py",
             "kittiwake_benchmarks/")
# What `kittiwake bench ops` and the group need: they must ship.
REQUIRED = ("kittiwake/cli/bench_command.py", "kittiwake/bench/commands.py", "kittiwake/bench/distribution.py",
            "kittiwake/bench/ops.py", "kittiwake/bench/harness.py", "kittiwake/bench/cluster.py",
            "kittiwake/bench/user_app.py", "kittiwake/testing/spark_session.py")


def _run(command: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_SECS, cwd=cwd)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    source = out / "source"
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                  "--wheel-dir", str(out), str(source)])
    assert built.returncode == 0, built.stdout + built.stderr
    [path] = out.glob("kittiwake-*.whl")
    return path


@pytest.mark.timeout(BUILD_TIMEOUT_SECS)
def test_the_wheel_ships_no_benchmark_of_another_system(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    shipped = [name for name in names if name.startswith(FORBIDDEN)]
    assert not shipped, f"benchmarks of other systems in the wheel: {shipped}"
    assert not [name for name in REQUIRED if name not in names]


@pytest.mark.timeout(2 * BUILD_TIMEOUT_SECS)
def test_the_installed_wheel_runs_its_benchmarks_without_the_distribution(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    created = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    assert created.returncode == 0, created.stderr
    python = str(venv / "bin" / "python")
    installed = _run([sys.executable, "-m", "pip", "--python", python, "install", "--quiet", str(wheel)])
    assert installed.returncode == 0, installed.stdout + installed.stderr
    outside = tmp_path  # not this checkout

    listed = _run([python, "-c", "import importlib.metadata as m; print([d.metadata['Name'] for d in m.distributions()])"],
                  outside)
    assert "kittiwake-benchmarks" not in listed.stdout and "kittiwake" in listed.stdout

    ops = _run([python, "-m", "kittiwake", "bench", "ops", "--help"], outside)
    assert ops.returncode == 0, ops.stdout + ops.stderr
    assert "--clients" in ops.stdout and "--durability" in ops.stdout
    # and it runs: a broker of the wheel's own, a load process, a record in the JSON
    report = tmp_path / "ops.json"
    ran = _run([python, "-m", "kittiwake", "bench", "ops", "--only", "enqueue", "--seconds", "0.3", "--warmup", "0",
                "--clients", "2", "--processes", "1", "--json", str(report)], outside)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    record = json.loads(report.read_text())["ops"]["enqueue"]
    assert record["tasks_per_s"] > 0 and record["errors"] == 0

    group = _run([python, "-m", "kittiwake", "bench", "--help"], outside)
    assert group.returncode == 0, group.stdout + group.stderr
    commands = {line.split()[0] for line in group.stdout.split("Commands:")[1].splitlines() if line.strip()}
    assert commands == {"ops", "latency", "scale", "producer", "udp", "cluster"}

    peers = _run([python, "-m", "kittiwake", "bench", "peers", "--tasks", "10"], outside)
    assert peers.returncode == 1
    assert "pip install -e ./benchmarks" in peers.stderr and "Traceback" not in peers.stderr
