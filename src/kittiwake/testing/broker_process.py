"""`BrokerProcess`: a real broker in a subprocess, for integration tests and benchmarks.

It runs `python -m kittiwake.broker --data DIR` (or `--store URL`) with `--host`, `--port` (0: a
free one) and any other options (`--auth-file`, `--tls-cert`, faces' ports such as
`--sqs-port 0`), waits for the broker's listening line (`kittiwake.broker.listening`) and reads
the ports from it: `port`, `tls_port`, and each face's by name in `ports` (`udp_port`, `sqs_port`,
`http_port` for the faces Kittiwake ships). It can be killed (SIGKILL: a crash), terminated
(SIGTERM: the clean stop, returning the exit status) and restarted on the same data, on the same
ports while they are free. `cpu_secs()` reads its CPU time so far from `/proc` (Linux).

The broker's stdout and stderr go to files beside the data directory (`DIR.stdout`, `DIR.log`;
with `log_path=NAME.log`, `NAME.stdout` beside it), never to a pipe: a pipe nobody reads blocks
the broker once full. The log is
appended across restarts, each start marked by a line; `log_tail()` shows its end, and a broker
that exits before listening or does not listen in time raises `BrokerDidNotStart` with its exit
status and the log's end.

How the process starts is a hook (`spawn=`, `kittiwake.testing.spawn`): a subprocess by default.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Self
from collections.abc import Mapping, Sequence

from kittiwake.broker.listening import Listening, parse_listening_line
from kittiwake.testing.spawn import Spawn, Spawned, spawn_subprocess

START_TIMEOUT_SECS = 30.0  # a broker listens in well under a second; recovering a large store takes longer
WAIT_SECS = 30.0  # how long kill() waits for the process to be gone
POLL_SECS = 0.01  # a start's pause between two looks at the stdout file
LOG_TAIL_LINES = 40
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
WILDCARD_HOSTS = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}  # where a client reaches such a broker


class BrokerDidNotStart(RuntimeError):
    """The broker exited before printing its listening line (`returncode`), or did not print it in time
    (`returncode` None: it was killed); the message ends with the end of its log."""

    def __init__(self, message: str, returncode: int | None, log_tail: str) -> None:
        super().__init__(f"{message}\n{log_tail}")
        self.returncode = returncode
        self.log_tail = log_tail


def broker_command() -> list[str]:
    """`python -m kittiwake.broker` with this interpreter."""
    return [sys.executable, "-m", "kittiwake.broker"]


class BrokerProcess:
    """A broker subprocess on `data_dir` (or on the store `store_url` names; `data_dir` then only
    places the log files). `start()`, or `with BrokerProcess(...) as broker:`, starts it; leaving
    the `with` kills it.

    `args` are further options of `python -m kittiwake.broker` (not `--data`, `--store`, `--host`,
    `--port`: those are the parameters); `command` replaces `python -m kittiwake.broker` itself
    (`kittiwake sqs`, say)."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        store_url: str | None = None,
        args: Sequence[str] = (),
        host: str = "127.0.0.1",
        port: int = 0,
        log_path: str | os.PathLike[str] | None = None,
        start_timeout_secs: float = START_TIMEOUT_SECS,
        command: Sequence[str] | None = None,
        spawn: Spawn = spawn_subprocess,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.store_url = store_url
        self.args = tuple(args)
        self.listen_host = host
        self.log_path = Path(log_path) if log_path is not None else self.data_dir.with_name(self.data_dir.name + ".log")
        self.stdout_path = self.log_path.with_name(self.log_path.stem + ".stdout")
        if self.stdout_path == self.log_path:
            raise ValueError(f"the log cannot be named like the stdout file beside it: {self.log_path}")
        self.start_timeout_secs = start_timeout_secs
        self.command = tuple(command) if command is not None else tuple(broker_command())
        self.spawn = spawn
        self.listening: Listening | None = None  # what the latest listening line said (kept while it restarts)
        self.startup_secs: float | None = None  # from spawning to the listening line, at the last start
        self.starts = 0
        self._first_port = port
        self._process: Spawned | None = None

    # ------------------------------------------------------------ where it listens

    @property
    def host(self) -> str:
        """The address a client reaches the broker at: where it listens (the loopback for a wildcard)."""
        host = self.listening.host if self.listening is not None else self.listen_host
        return WILDCARD_HOSTS.get(host, host)

    @property
    def port(self) -> int:
        """The plaintext port (the TLS port when plaintext is off); the port asked for before the first start."""
        return self.listening.port if self.listening is not None else self._first_port

    @property
    def tls_port(self) -> int | None:
        return self.listening.tls_port if self.listening is not None else None

    @property
    def ports(self) -> Mapping[str, int]:
        """Each face's port by its name ("udp", "sqs", "http"), as the listening line lists them."""
        return dict(self.listening.face_ports) if self.listening is not None else {}

    @property
    def udp_port(self) -> int | None:
        """With `--udp-port`: the port the broker took."""
        return self.ports.get("udp")

    @property
    def sqs_port(self) -> int | None:
        """With `--sqs-port`: the port the broker took."""
        return self.ports.get("sqs")

    @property
    def http_port(self) -> int | None:
        """With `--http-port`: the port the broker took (dashboard, JSON API, metrics)."""
        return self.ports.get("http")

    @property
    def url(self) -> str:
        """`kw://HOST:PORT`, or `kws://` when only TLS is open (a client then needs the CA too)."""
        scheme = "kws" if self.listening is not None and not self.listening.plaintext else "kw"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}"

    # ------------------------------------------------------------------- the process

    @property
    def pid(self) -> int:
        return self._started().pid

    @property
    def returncode(self) -> int | None:
        """The exit status once it exited (-N after signal N); None while it runs or before it started."""
        return self._process.poll() if self._process is not None else None

    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> float:
        """Start the broker and wait for its listening line; the seconds that took.

        `BrokerDidNotStart` if it exits first or stays silent `start_timeout_secs` (then it is killed)."""
        if self.alive():
            raise RuntimeError(f"the broker is running already (pid {self.pid})")
        self._start(self._first_port, self.args)
        assert self.startup_secs is not None
        return self.startup_secs

    def restart(self) -> float:
        """Kill it if it runs and start again on the same data, on the same ports (the plaintext, TLS and
        faces' ports) if they are free, else on the ports the options ask for; the seconds until it listened."""
        self.kill()
        if self.listening is None:
            return self.start()
        try:
            self._start(self.listening.port, self._same_ports_args(self.listening))
        except BrokerDidNotStart:  # a port was taken meanwhile (the log says which)
            self._start(self._first_port, self.args)
        assert self.startup_secs is not None
        return self.startup_secs

    def kill(self) -> None:
        """SIGKILL and wait: a crash, with no chance to flush anything."""
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGKILL)
        self._process.wait(timeout=WAIT_SECS)

    def terminate(self, timeout_secs: float = WAIT_SECS) -> int:
        """SIGTERM (the broker's clean stop) and wait; the exit status, 0 after a clean stop.
        `subprocess.TimeoutExpired` if it has not exited after `timeout_secs`."""
        process = self._started()
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        return process.wait(timeout=timeout_secs)

    def cpu_secs(self) -> float:
        """User + system CPU of the broker process (all its threads) so far; NaN where `/proc` cannot tell."""
        try:
            with open(f"/proc/{self.pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last `lines` lines of the broker's log (its stderr, every start)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no broker log)"
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> Self:
        if self._process is None:
            self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.kill()

    # ------------------------------------------------------------------ starting

    def _started(self) -> Spawned:
        if self._process is None:
            raise RuntimeError("the broker has not been started")
        return self._process

    def _full_command(self, port: int, args: Sequence[str]) -> list[str]:
        store = ("--store", self.store_url) if self.store_url is not None else ("--data", str(self.data_dir))
        return [*self.command, *store, "--host", self.listen_host, "--port", str(port), *args]

    def _start(self, port: int, args: Sequence[str]) -> None:
        command = self._full_command(port, args)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.stdout_path.write_bytes(b"")  # this start's listening line only
        with open(self.log_path, "ab") as log:
            log.write(f"--- start {self.starts}: {' '.join(command)}\n".encode())
        started = time.monotonic()
        self._process = process = self.spawn(command, self.stdout_path, self.log_path)
        self.starts += 1
        deadline = started + self.start_timeout_secs
        while True:
            listening = self._read_listening()
            if listening is not None:
                self.listening = listening
                self.startup_secs = time.monotonic() - started
                return
            status = process.poll()
            if status is not None:
                raise BrokerDidNotStart(f"the broker exited with status {status} before listening: {' '.join(command)}",
                                        status, self.log_tail())
            if time.monotonic() > deadline:
                self.kill()
                raise BrokerDidNotStart(f"the broker did not listen within {self.start_timeout_secs} s: "
                                        f"{' '.join(command)}", None, self.log_tail())
            time.sleep(POLL_SECS)

    def _read_listening(self) -> Listening | None:
        text = self.stdout_path.read_text(errors="replace")
        for line in text.splitlines(keepends=True):
            if line.endswith("\n"):  # whole lines only: the broker may be halfway through writing one
                try:
                    return parse_listening_line(line)
                except ValueError:
                    continue
        return None

    def _same_ports_args(self, listening: Listening) -> list[str]:
        """`args` with each `--NAME-port` option set to the port the broker took (tls, udp, sqs, http)."""
        taken = {"tls": listening.tls_port, **listening.face_ports}
        pinned: list[str] = []
        options = iter(self.args)
        for option in options:
            name, equals, _ = option.partition("=")
            face = name.removeprefix("--").removesuffix("-port").replace("-", "_")
            port = taken.get(face) if name.startswith("--") and name.endswith("-port") else None
            if port is None:
                pinned.append(option)
            elif equals:
                pinned.append(f"{name}={port}")
            else:
                pinned += [option, str(port)]
                next(options, None)  # the value it replaces
        return pinned
