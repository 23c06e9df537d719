"""Every system `kittiwake bench peers` runs, as the benchmark sees it from outside.

One `System` per row: the packages it needs, the service it runs on, the
module its workers load (which also holds its submitting side, see
`submitter`), its worker command(s), and every setting that differs from
the tool's default, with the reason. The benchmark process reads only this
table; the peers' packages are imported in the worker and submitter
processes, never here, so one peer's import-time set-up (Dramatiq's global
broker, Celery's app) cannot touch another's.

Worker commands, `P` = `--processes` (2 by default):

| system | command | per process |
| --- | --- | --- |
| Kittiwake | `kittiwake worker kittiwake_benchmarks.peers.kittiwake_peer:app --processes P` | 1 slot (default) |
| Celery | `celery -A kittiwake_benchmarks.peers.celery_peer worker --concurrency P` | prefork pool: P child processes |
| RQ | `rq worker-pool -n P -q -w kittiwake_benchmarks.peers.rq_peer.Worker bench` | forks one work horse per job |
| Dramatiq | `dramatiq kittiwake_benchmarks.peers.dramatiq_peer --processes P` | 8 threads (default) |
| Huey | `huey_consumer kittiwake_benchmarks.peers.huey_peer.huey -w P -k process -q` | P worker processes |
| pgqueuer | P × `pgq run kittiwake_benchmarks.peers.pgqueuer_peer:create` | one asyncio loop, batches of 10 |
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass, field

from kittiwake_benchmarks.settings import KITTIWAKE_SYSTEM, PEERS_QUEUE

PEER_MODULES = "kittiwake_benchmarks.peers"
INSTALL_HINT = "pip install kittiwake[peers]"


@dataclass(frozen=True)
class System:
    """One row of the benchmark."""

    name: str  # as --peers spells it
    label: str  # the tool, for the table
    distribution: str  # whose version the row shows
    modules: tuple[str, ...]  # importable names it needs
    service: str  # "kittiwake", "redis" or "postgres"
    module: str  # the module its workers load and its submitter imports
    changed: tuple[str, ...] = ()  # settings that differ from the tool's defaults, and why
    submitter_options: dict[str, object] = field(default_factory=dict)  # keyword arguments of its Submitter
    keeps_results: bool = False  # the drain ends when the submitter has every result

    @property
    def module_path(self) -> str:
        return f"{PEER_MODULES}.{self.module}"

    def missing(self) -> str | None:
        """Why this system cannot run here for want of a package, or None."""
        for name in self.modules:
            if importlib.util.find_spec(name) is None:
                return f"{name} is not installed ({INSTALL_HINT})"
        return None

    def version(self) -> str | None:
        try:
            return importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            return None

    def worker_commands(self, python: str, processes: int, redis_url: str) -> list[list[str]]:
        """The command line(s) that start this system's workers."""
        module = self.module_path
        if self.service == "kittiwake":
            return [[python, "-m", "kittiwake", "worker", f"{module}:app", "--processes", str(processes)]]
        if self.name == "celery":
            return [[python, "-m", "celery", "-A", module, "worker", "--concurrency", str(processes)]]
        if self.name == "rq":
            return [[python, "-m", "rq.cli", "worker-pool", "-n", str(processes), "-q", "-w", f"{module}.Worker",
                     "-u", redis_url, PEERS_QUEUE]]
        if self.name == "dramatiq":
            return [[python, "-m", "dramatiq", module, "--processes", str(processes)]]
        if self.name == "huey":
            return [[python, "-m", "huey.bin.huey_consumer", f"{module}.huey", "-w", str(processes), "-k", "process",
                     "-q"]]
        if self.name == "pgqueuer":
            return [[python, "-m", "pgqueuer", "run", f"{module}:create"] for _ in range(processes)]
        raise ValueError(f"no worker command for {self.name}")

    def workers_text(self, processes: int) -> str:
        return WORKERS_TEXT[self.name].format(processes=processes)


QUIET = "per-task log lines off, as the other systems log none by default"

SYSTEMS: dict[str, System] = {
    system.name: system
    for system in (
        System(KITTIWAKE_SYSTEM, "Kittiwake", "kittiwake", ("kittiwake",), "kittiwake", "kittiwake_peer"),
        System("kittiwake-results", "Kittiwake, results kept", "kittiwake", ("kittiwake",), "kittiwake",
               "kittiwake_peer", submitter_options={"keep_results": True}, keeps_results=True),
        System("celery", "Celery", "celery", ("celery", "redis"), "redis", "celery_peer",
               changed=("broker_connection_retry_on_startup=True: Celery's default behaviour, set only to silence "
                        "its warning",)),
        System("rq", "RQ", "rq", ("rq", "redis"), "redis", "rq_peer",
               changed=("result_ttl=0 on every job: keep no result, like the other fire-and-forget rows",
                        "-w kittiwake_benchmarks.peers.rq_peer.Worker: RQ's default worker class, named through the task "
                        "module so it is imported once before the forks (RQ's performance notes)",
                        "-q: " + QUIET)),
        System("dramatiq", "Dramatiq", "dramatiq", ("dramatiq", "redis"), "redis", "dramatiq_peer"),
        System("huey", "Huey", "huey", ("huey", "redis"), "redis", "huey_peer",
               changed=("-k process -w N: worker processes instead of the default one thread", "-q: " + QUIET)),
        System("pgqueuer", "pgqueuer", "pgqueuer", ("pgqueuer", "asyncpg"), "postgres", "pgqueuer_peer",
               changed=("two `pgq run` commands: pgqueuer has no option for worker processes",)),
    )
}

WORKERS_TEXT = {
    KITTIWAKE_SYSTEM: "kittiwake worker --processes {processes} (1 slot each)",
    "kittiwake-results": "kittiwake worker --processes {processes} (1 slot each)",
    "celery": "celery worker --concurrency {processes} (prefork, prefetch 4)",
    "rq": "rq worker-pool -n {processes} (a forked horse per job)",
    "dramatiq": "dramatiq --processes {processes} (8 threads each)",
    "huey": "huey_consumer -w {processes} -k process",
    "pgqueuer": "{processes} × pgq run (asyncio, batches of 10)",
}
