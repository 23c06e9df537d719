"""Broker processes forked from one Python that has the broker imported already.

`python -m kittiwake.broker` spends about 0.15 s importing before it listens, and the suite
starts a broker hundreds of times. `start(args, stdout_path, stderr_path)` asks a launcher — a
Python started once per test run, which imported `kittiwake.cli.broker_command` and nothing of
the tests — to fork a child that runs the same command with the same arguments, as
`python -m kittiwake.broker ARGS` does, with the caller's environment and working directory,
stdin on /dev/null and stdout and stderr appended to the two files. It listens about ten times
sooner. The child is a process of its own, killed, signalled and waited for like any other;
`LaunchedProcess` answers as much of `subprocess.Popen` as `kittiwake.testing.Spawned` asks, the
exit status read through the launcher (its parent). `spawn` is the hook the suite's `BrokerProcess`
gives `kittiwake.testing.BrokerProcess`: it forks `python -m kittiwake.broker` and starts any other
command as a subprocess.

The launcher is a child of the test process in the same process group, started as a broker would
be (same interpreter, no flags, stdin on /dev/null, output to a file), so its children see the
same streams and limits a broker started directly would. It ignores SIGINT (the brokers do not:
they stop, as they would under Ctrl-C anyway) and leaves when the test process closes its end of
the socket or exits. KITTIWAKE_TEST_BROKER_EXEC=1 starts every broker with exec instead.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Sequence

from kittiwake.testing import Spawned, broker_command, spawn_subprocess

EXEC_VARIABLE = "KITTIWAKE_TEST_BROKER_EXEC"
PROG_NAME = "python -m kittiwake.broker"
POLL_SECS = 0.002  # a wait's pause between two looks at the child


def enabled() -> bool:
    """Whether brokers are forked from the launcher (the default) rather than started with exec."""
    return os.environ.get(EXEC_VARIABLE, "") in ("", "0")


class LaunchedProcess:
    """A broker forked by the launcher: pid, poll, wait, send_signal and returncode as `subprocess.Popen`'s."""

    def __init__(self, launcher: Launcher, pid: int, args: Sequence[str]) -> None:
        self._launcher = launcher
        self.pid = pid
        self.args = list(args)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._launcher.status(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(POLL_SECS)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:  # never signal a pid that was reaped and may be another process's now
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class Launcher:
    """The test process's end: starts the launcher on first use and talks to it over a socket."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._socket: socket.socket | None = None
        self._reader: Any = None
        self._log_path: Path | None = None

    def _ensure_started(self) -> None:
        if self._process is not None and self._process.poll() is None:
            return
        if self._process is not None:  # it died: a new one for the brokers still to come
            print(f"the broker launcher exited with {self._process.returncode}: starting another\n{self._log_tail()}",
                  file=sys.stderr)
            self._reader.close()
            assert self._socket is not None
            self._socket.close()
        ours, theirs = socket.socketpair()
        self._log_path = Path(tempfile.mkdtemp(prefix="kittiwake-broker-launcher-")) / "launcher.log"
        with open(self._log_path, "wb") as log:
            self._process = subprocess.Popen(
                [sys.executable, __file__, str(theirs.fileno())],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=(theirs.fileno(),),
            )
        theirs.close()
        self._socket = ours
        self._reader = ours.makefile("rb")

    def _log_tail(self) -> str:
        try:
            return (self._log_path.read_text(errors="replace") if self._log_path else "")[-3000:]
        except OSError:
            return ""

    def _ask(self, request: dict[str, Any]) -> Any:
        with self._lock:
            self._ensure_started()
            assert self._socket is not None
            self._socket.sendall(json.dumps(request).encode() + b"\n")
            line = self._reader.readline()
        if not line:
            raise RuntimeError(f"the broker launcher went away\n{self._log_tail()}")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"the broker launcher could not {next(iter(request))}: {answer['error']}")
        return answer["result"]

    def start(self, args: Sequence[str], stdout_path: Path, stderr_path: Path) -> LaunchedProcess:
        pid = self._ask({"start": {"args": list(args), "stdout": str(stdout_path), "stderr": str(stderr_path),
                                   "cwd": os.getcwd(), "env": dict(os.environ)}})
        return LaunchedProcess(self, pid, [sys.executable, "-m", "kittiwake.broker", *args])

    def status(self, pid: int) -> int | None:
        """The child's exit status as Popen's returncode (-N for signal N), None while it runs."""
        return self._ask({"status": pid})

    def close(self) -> None:
        with self._lock:
            if self._socket is not None:
                self._reader.close()  # the socket stays open while its file object is
                self._socket.close()
                self._socket = self._reader = None
            if self._process is not None:
                try:
                    self._process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._process.kill()
                    self._process.wait()
            if self._log_path is not None:
                for path in (self._log_path, self._log_path.parent):
                    try:
                        path.unlink() if path.is_file() else path.rmdir()
                    except OSError:
                        pass


_launcher = Launcher()


def start(args: Sequence[str], stdout_path: Path, stderr_path: Path) -> LaunchedProcess:
    """A broker forked from the launcher, running `python -m kittiwake.broker ARGS`."""
    return _launcher.start(args, stdout_path, stderr_path)


def spawn(command: Sequence[str], stdout_path: Path, stderr_path: Path) -> Spawned:
    """`kittiwake.testing.BrokerProcess`'s `spawn=` hook: `python -m kittiwake.broker ARGS` forked from the
    launcher, any other command (or every one, under KITTIWAKE_TEST_BROKER_EXEC=1) as a subprocess."""
    if enabled() and list(command[:3]) == broker_command():
        return start(command[3:], stdout_path, stderr_path)
    return spawn_subprocess(command, stdout_path, stderr_path)


def close() -> None:
    """Let the launcher go (brokers still running go on, as they would after their parent's exit)."""
    _launcher.close()


# ---------------------------------------------------------------- the launcher process


def _serve(control: socket.socket) -> None:
    """Answer requests until the test process closes its end (a forked child leaves by SystemExit)."""
    from kittiwake.cli import broker_command  # the whole broker: what each child no longer imports

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    reader = control.makefile("rb")
    for line in reader:
        request = json.loads(line)
        try:
            if "start" in request:
                if threading.active_count() != 1:
                    raise RuntimeError("the launcher must be single-threaded to fork")
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:  # SystemExit passes the handler below: the child never answers requests
                    reader.close()
                    control.close()
                    raise SystemExit(_run_child(broker_command.broker, request["start"]))
                result: Any = pid
            else:
                pid, status = os.waitpid(request["status"], os.WNOHANG)
                result = None if pid == 0 else os.waitstatus_to_exitcode(status)
            answer = {"result": result}
        except Exception as exc:  # the test process shows it; the launcher goes on
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        control.sendall(json.dumps(answer).encode() + b"\n")


def _run_child(command: Any, start: dict[str, Any]) -> int:
    """In the forked child: the broker command as `python -m kittiwake.broker` runs it; the exit
    status that process would have (an uncaught exception: its traceback on stderr and 1)."""
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(start["cwd"])
        os.environ.clear()
        os.environ.update(start["env"])
        stdin = os.open(os.devnull, os.O_RDONLY)
        stdout = os.open(start["stdout"], os.O_WRONLY | os.O_APPEND)
        stderr = os.open(start["stderr"], os.O_WRONLY | os.O_APPEND)
        for source, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
            os.dup2(source, target)
            os.close(source)
        sys.argv = [PROG_NAME, *start["args"]]
        command.main(args=start["args"], prog_name=PROG_NAME)
    except SystemExit as exit:
        if exit.code is None or isinstance(exit.code, int):
            return exit.code or 0
        print(exit.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    _serve(socket.socket(fileno=int(sys.argv[1])))
