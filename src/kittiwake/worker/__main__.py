"""`python -m kittiwake.worker CONFIG_JSON`: one worker process, as the supervisor starts it.

Prints ``kittiwake worker <id> pid <pid> ready`` once serving. SIGTERM or
SIGINT stop it gracefully (`WorkerLoop.stop`); it exits 0 when stopped or
recycled, so the supervisor can tell a crash (any other status) apart. It
tells the supervisor what it holds and runs through the descriptors named
in `ledger.LEDGER_FDS_VARIABLE`, when there are some (`ledger`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import signal
import sys

from kittiwake.worker.config import WORKER_URL_ENV, WorkerConfig, load_app
from kittiwake.worker.ledger import LedgerWriter
from kittiwake.worker.loop import WorkerLoop
from kittiwake.worker.supervisor import SUPERVISOR_PID_VARIABLE

PR_SET_PDEATHSIG = 1


def ask_for_signal_on_parent_death(signum: int) -> None:
    """Linux: have the kernel send `signum` when the supervisor dies (elsewhere: no-op)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)
    except OSError:
        pass


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m kittiwake.worker CONFIG_JSON (started by `kittiwake worker`)", file=sys.stderr)
        return 2
    config = WorkerConfig.from_json(argv[1])
    url = os.environ.pop(WORKER_URL_ENV, None)  # not passed on to the tasks' child processes
    if url:
        config.url = url
    # the supervisor's pid, not our parent's now: if it died while this interpreter started,
    # our parent is already someone else and the kernel will never send the signal
    supervisor = os.environ.pop(SUPERVISOR_PID_VARIABLE, None)
    parent = int(supervisor) if supervisor else os.getppid()
    ask_for_signal_on_parent_death(signal.SIGTERM)
    if os.getppid() != parent:  # the supervisor died before we asked
        return 0
    logging.basicConfig(
        level=os.environ.get("KITTIWAKE_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s",
    )
    ledger = LedgerWriter.from_environment()  # before the app loads: its child processes must not inherit it
    app = load_app(config.app, config.sys_path)
    loop = WorkerLoop(app, config, app_reference=config.app, ledger=ledger)
    signal.signal(signal.SIGTERM, lambda signum, frame: loop.stop())
    signal.signal(signal.SIGINT, lambda signum, frame: loop.stop())
    print(f"kittiwake worker {loop.id} pid {os.getpid()} ready", flush=True)
    loop.run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
