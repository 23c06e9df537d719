"""`kittiwake worker`'s main process: start N worker processes, keep them running, stop them gracefully.

The supervisor does no task work. It starts `processes` worker processes
(``python -m kittiwake.worker CONFIG``: fresh interpreters, no fork of a
process holding threads and sockets), and

* respawns one that exits while the supervisor is not stopping — after a
  crash, and after recycling (`--max-tasks-per-child`, `--max-memory`: the
  process stopped leasing, ran what it held and exited 0, so nothing is lost);
  a process that keeps crashing right after start is respawned with a backoff;
* says when one dies (any exit but 0: a signal, a status), with the tasks it
  held, and hands those back at once instead of leaving them to their leases:
  each process tells it what it holds and runs (`ledger`), and `lost`
  releases the running ones with an attempt counted and the reason
  ``WORKER_LOST: process <pid> died of <SIGNAL>``, and returns the others
  unstarted (in a thread, so a broker that is away delays nothing else);
* on SIGTERM or SIGINT passes SIGTERM to every worker process, waits for
  them (each finishes or hands back its tasks within `shutdown_secs`, or at
  once when its broker is gone: `stopping`), and exits 0; its own calls to
  the broker (the scheduler's, autoscaling's) are cut short by closing their
  clients, so nothing waits to reconnect; a second signal kills them at once;
* runs the periodic scheduler (`Beat`) when started with ``--beat``;
* with ``--autoscale MIN:MAX`` starts MIN processes and adds or retires
  processes as the queues' backlog asks (`kittiwake.worker.autoscale`); a
  retired process gets SIGTERM and is not respawned.

Worker processes ask the kernel for SIGTERM when the supervisor dies
(Linux ``PR_SET_PDEATHSIG``), so a killed supervisor leaves no orphan
worker behind: each stops gracefully on its own. The kernel only signals
children that asked before the parent died, so each is also told its
supervisor's pid (`SUPERVISOR_PID_VARIABLE`) and exits at once if, once it
asked, its parent is another process.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from types import FrameType

import msgspec

from kittiwake import errors
from kittiwake.client import Client
from kittiwake.worker import autoscale
from kittiwake.worker.beat import Beat
from kittiwake.worker.config import WORKER_URL_ENV, WorkerConfig, load_app
from kittiwake.worker.ledger import LEDGER_FDS_VARIABLE, Entry, Ledger
from kittiwake.worker.lost import exit_description, hand_back, lost_reason

log = logging.getLogger("kittiwake.worker.supervisor")

SUPERVISOR_PID_VARIABLE = "KITTIWAKE_SUPERVISOR_PID"
POLL_SECS = 0.1
QUICK_CRASH_SECS = 2.0
MAX_RESPAWN_DELAY_SECS = 10.0
LEDGER_EOF_SECS = 1.0  # a dead process's pipe ends at once, unless a grandchild inherited it
HAND_BACK_JOIN_SECS = 2.0  # on exit: how long hand-backs on their way may still take, in all
NAMED_TASKS = 5  # a death's log line names this many running tasks, then counts the rest


@dataclass(slots=True)
class Child:
    slot: int
    process: subprocess.Popen[bytes]
    started_at: float
    crashes: int = 0
    ledger: Ledger | None = None


class Supervisor:
    """Runs and watches the worker processes of one `kittiwake worker` command."""

    def __init__(self, config: WorkerConfig, *, environment: dict[str, str] | None = None) -> None:
        self.config = config
        self.environment = environment
        self.children: dict[int, Child] = {}
        self.respawns = 0
        self._stopping = threading.Event()
        self._signals = 0
        self._beat: Beat | None = None
        self._pending: dict[int, tuple[float, int]] = {}  # slot → (respawn at, crashes so far)
        self._retiring: set[int] = set()  # slots stopped by autoscaling: not respawned
        self._policy: autoscale.ScalePolicy | None = None
        self._url: str | None = config.url
        self._client: Client | None = None  # autoscaling's
        self._beat_client: Client | None = None
        self._hand_back_client: Client | None = None
        self._hand_backs: list[threading.Thread] = []
        self.deaths = 0
        self._queues: list[str] = []
        self._wanted = 0
        self._scale_at = 0.0

    def _command(self) -> list[str]:
        return [sys.executable, "-m", "kittiwake.worker", msgspec.structs.replace(self.config, url=None).to_json()]

    def _child_environment(self) -> dict[str, str]:
        """The URL (it may hold a token: not on the command line) and this supervisor's pid."""
        environment = dict(os.environ if self.environment is None else self.environment)
        if self.config.url is not None:
            environment[WORKER_URL_ENV] = self.config.url
        environment[SUPERVISOR_PID_VARIABLE] = str(os.getpid())
        return environment

    def _spawn(self, slot: int, crashes: int = 0) -> None:
        ledger, child_fds = Ledger.for_child(self.config.concurrency)
        environment = self._child_environment()
        environment[LEDGER_FDS_VARIABLE] = ",".join(str(fd) for fd in child_fds)
        try:
            process = subprocess.Popen(self._command(), env=environment, stdin=subprocess.DEVNULL, pass_fds=child_fds)
        except BaseException:
            ledger.close_unstarted()
            raise
        finally:
            for fd in child_fds:  # the child's now: the pipe ends when the child does
                os.close(fd)
        ledger.start()
        self.children[slot] = Child(slot, process, time.monotonic(), crashes, ledger)
        log.info("worker process %d started (pid %d)", slot, process.pid)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        if self._signals == 1:
            log.info("stopping: waiting for worker processes to finish their tasks")
            self._stopping.set()  # also has `_close_on_stop` close this process's own clients
            self._forward(signal.SIGTERM)
        else:
            log.warning("second signal: killing worker processes")
            self._forward(signal.SIGKILL)

    def _forward(self, signum: int) -> None:
        for child in list(self.children.values()):
            if child.process.poll() is None:
                try:
                    child.process.send_signal(signum)
                except ProcessLookupError:
                    pass

    def stop(self) -> None:
        self._on_signal(signal.SIGTERM, None)

    def _close_on_stop(self) -> None:
        """A call of the scheduler's or autoscaling's may be waiting to reconnect when the stop comes:
        closing their clients ends it at once. A thread of its own waits for the stop, because a
        signal handler must not wait for a client's lock (or start a thread)."""
        self._stopping.wait()
        if self._beat is not None:
            self._beat.stop(wait=False)
        self._close_own_clients()

    def _close_own_clients(self) -> None:
        for client in (self._client, self._beat_client):
            if client is not None:
                client.close()

    def run(self) -> int:
        """Run until stopped and every worker process exited; returns the exit status."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        app = load_app(self.config.app, self.config.sys_path)  # fail here, once, if it does not import
        self._url = self.config.url or app.url
        if self.config.beat:
            self._beat_client = Client(self._url)
            self._beat = Beat(app, self._beat_client)
            self._beat.start()
        processes = self.config.processes
        if self.config.autoscale is not None:
            low, high = self.config.autoscale
            processes = low
            self._policy = autoscale.ScalePolicy(
                low, high, slots_per_process=self.config.concurrency, window_secs=self.config.scale_window_secs,
                idle_secs=self.config.scale_idle_secs,
            )
            self._client = Client(self.config.url or app.url)
            self._queues = list(self.config.queues or app.queues())
            self._wanted = processes
        threading.Thread(target=self._close_on_stop, name="kittiwake-close-on-stop", daemon=True).start()
        for slot in range(processes):
            self._spawn(slot)
        print(f"kittiwake worker supervisor pid {os.getpid()} running {processes} processes", flush=True)
        while True:
            self._reap()
            if self._policy is not None and not self._stopping.is_set() and time.monotonic() >= self._scale_at:
                self._scale_at = time.monotonic() + autoscale.DEFAULT_EVERY_SECS
                self._autoscale()
            if self._stopping.is_set() and not self.children:
                break
            time.sleep(POLL_SECS)
        self._close_own_clients()
        if self._beat is not None:
            self._beat.stop()
        deadline = time.monotonic() + HAND_BACK_JOIN_SECS
        for thread in self._hand_backs:
            thread.join(max(0.0, deadline - time.monotonic()))
        if self._hand_back_client is not None:
            self._hand_back_client.close()  # a hand-back still waiting to reconnect gives up
        return 0

    def _active_slots(self) -> list[int]:
        return sorted((set(self.children) | set(self._pending)) - self._retiring)

    def _autoscale(self) -> None:
        """One autoscaling step: sample the backlog, then add a process or retire an idle one."""
        assert self._policy is not None and self._client is not None
        active = self._active_slots()
        try:
            waiting = autoscale.backlog(self._client, self._queues)
        except errors.KittiwakeError as error:
            if not self._stopping.is_set():  # stopping: its client was closed under it
                log.warning("autoscaling: %s", error)
            return
        decision = self._policy.decide(time.monotonic(), waiting, len(active))
        if decision.wanted != self._wanted:
            if decision.wanted > self._policy.maximum and self.config.scale_cmd:
                autoscale.run_scale_command(self.config.scale_cmd, decision.wanted)
            self._wanted = decision.wanted
        if decision.processes > len(active):
            slot = next(n for n in range(len(self.children) + len(self._pending) + 1)
                        if n not in self.children and n not in self._pending)
            log.info("autoscaling up to %d processes (%d tasks waiting)", decision.processes, waiting)
            self._spawn(slot)
        elif decision.processes < len(active):
            self._retire_idle()

    def _retire_idle(self) -> None:
        """SIGTERM one worker process whose registry record shows it holds no task."""
        from kittiwake.worker.registry import live_workers

        assert self._client is not None
        try:
            idle = {record.info.get("pid") for record in live_workers(self._client, queue=self.config.registry_queue)
                    if not record.status.get("held") and not record.running}
        except errors.KittiwakeError as error:
            log.warning("autoscaling: %s", error)
            return
        for slot in reversed(self._active_slots()):
            child = self.children.get(slot)
            if child is not None and child.process.pid in idle:
                log.info("autoscaling down: retiring idle worker process %d (pid %d)", slot, child.process.pid)
                self._retiring.add(slot)
                child.process.send_signal(signal.SIGTERM)
                return

    def _reap(self) -> None:
        now = time.monotonic()
        for slot, child in list(self.children.items()):
            code = child.process.poll()
            if code is None:
                continue
            del self.children[slot]
            held = child.ledger.finish(LEDGER_EOF_SECS) if child.ledger is not None else []
            respawn = ""
            if slot in self._retiring:
                self._retiring.discard(slot)
            elif not self._stopping.is_set():
                quick = now - child.started_at < QUICK_CRASH_SECS and code != 0
                crashes = child.crashes + 1 if quick else 0
                delay = min(MAX_RESPAWN_DELAY_SECS, 0.25 * 2 ** (crashes - 1)) if crashes else 0.0
                respawn = f"; respawning{f' in {delay:.1f} s' if delay else ''}"
                self._pending[slot] = (now + delay, crashes)
            if code != 0:
                self._lost(child, code, held, respawn)
            elif respawn:
                log.info("worker process %d (pid %d) exited with 0%s", slot, child.process.pid, respawn)
        for slot, (due, crashes) in list(self._pending.items()):
            if self._stopping.is_set():
                del self._pending[slot]
            elif now >= due:
                del self._pending[slot]
                self.respawns += 1
                self._spawn(slot, crashes)

    # ------------------------------------------------------------------ deaths

    def _lost(self, child: Child, code: int, held: list[Entry], respawn: str) -> None:
        """A worker process died: one line saying how and what it held, then its tasks handed back."""
        self.deaths += 1
        pid = child.process.pid
        running = [entry.name for entry in held if entry.running]
        waiting = len(held) - len(running)
        what = f" while running {', '.join(running[:NAMED_TASKS])}" if running else " running no task"
        if len(running) > NAMED_TASKS:
            what += f" and {len(running) - NAMED_TASKS} more"
        if waiting:
            what += f", {waiting} not started"
        reason = lost_reason(pid, code)
        action = f"; handing back its tasks ({reason})" if held else ""
        log.warning("worker process %d (pid %d) %s%s%s%s", child.slot, pid, exit_description(code), what, action,
                    respawn)
        if not held:
            return
        if self._hand_back_client is None:
            self._hand_back_client = Client(self._url)
        thread = threading.Thread(target=self._hand_back, args=(self._hand_back_client, pid, held, reason),
                                  name="kittiwake-hand-back", daemon=True)
        thread.start()
        self._hand_backs = [t for t in self._hand_backs if t.is_alive()] + [thread]

    def _hand_back(self, client: Client, pid: int, held: list[Entry], reason: str) -> None:
        try:
            done = hand_back(client, held, reason)
        except errors.KittiwakeError as error:
            log.warning("could not hand back the %d tasks of pid %d (they come back when their leases run out): %s",
                        len(held), pid, error)
            return
        if done.gone:
            log.info("handed back the tasks of pid %d: %d released, %d returned, %d no longer its own", pid,
                     done.released, done.returned, done.gone)
