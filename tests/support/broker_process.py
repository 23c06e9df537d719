"""A real broker in a subprocess, and a raw-frame connection to talk to it.

`BrokerProcess` runs `python -m kittiwake.broker` on a data directory and
waits for its listening line; it can be killed (SIGKILL), terminated (SIGTERM)
and restarted on the same data, on the same port when that port is still free.
The process is forked from a launcher that has the broker imported already
(`support.broker_launcher`: the same command, listening about ten times sooner),
or started with exec when `preexec_fn` is given or KITTIWAKE_TEST_BROKER_EXEC=1.
The broker's stdout and stderr go to files beside the data directory (a pipe
nobody reads would block the broker once full); `log_tail()` shows the end of
the log in assertion messages.

`RawConnection` speaks the wire protocol with `kittiwake.protocol` over a
blocking socket, with no client library in between, so broker tests can send
exactly the bytes they mean, pipeline, and match replies by id.

Security: `auth_file=` starts the broker with `--auth-file`; `tls=`
(`support.tls_certificates.Certificates`) adds the TLS port (`tls_port`, a
free one unless given) and `plaintext=False` closes the plaintext port.
`store_url=` starts it with `--store URL` instead of `--data` (the data directory then only
names the log files). `url(user, token, tls=)` builds client URLs; `connect(tls=True)` opens a raw
TLS connection and `RawConnection.auth(user, token)` authenticates it.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

from kittiwake.protocol import FrameReader, Reply, decode_reply, encode_frame, encode_request
from support import broker_launcher

LISTENING = re.compile(r"^kittiwake broker listening on (\S+):(\d+) (?:tls_port=(\d+) )?")
UDP_PORT = re.compile(r" udp_port=(\d+) ")
SQS_PORT = re.compile(r" sqs_port=(\d+) ")
HTTP_PORT = re.compile(r" http_port=(\d+) ")
START_TIMEOUT_SECS = 30.0


class BrokerProcess:
    """A broker subprocess on `data_dir`; `port=0` lets the broker pick one."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        port: int = 0,
        extra_args: Sequence[str] = (),
        *,
        host: str = "127.0.0.1",
        preexec_fn: Any = None,
        auth_file: str | os.PathLike[str] | None = None,
        tls: Any = None,
        tls_port: int = 0,
        plaintext: bool = True,
        store_url: str | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.store_url = store_url
        self.auth_file = auth_file
        self.tls = tls
        self.tls_port: int | None = tls_port if tls is not None else None
        self.plaintext = plaintext
        self.host = host
        self.port = port
        self.udp_port: int | None = None  # with `--udp-port` in extra_args: the port the broker took
        self.sqs_port: int | None = None  # with `--sqs-port` in extra_args: the port the broker took
        self.http_port: int | None = None  # with `--http-port` in extra_args: the port the broker took
        self.extra_args = tuple(extra_args)
        self.preexec_fn = preexec_fn
        self.stdout_path = self.data_dir.with_name(self.data_dir.name + ".stdout")
        self.log_path = self.data_dir.with_name(self.data_dir.name + ".log")
        self.proc: subprocess.Popen[bytes] | broker_launcher.LaunchedProcess | None = None
        self.starts = 0
        self._start(port)

    @property
    def url(self) -> str:
        return f"kw://{self.host}:{self.port}"

    @property
    def udp_url(self) -> str:
        """`kwu://` to the broker's UDP port (started with `--udp-port`)."""
        assert self.udp_port is not None, "the broker was started without --udp-port"
        return f"kwu://{self.host}:{self.udp_port}"

    @property
    def sqs_endpoint(self) -> str:
        """`http://` to the broker's SQS API (started with `--sqs-port`)."""
        assert self.sqs_port is not None, "the broker was started without --sqs-port"
        return f"http://{self.host}:{self.sqs_port}"

    @property
    def http_endpoint(self) -> str:
        """`http://` to the broker's HTTP port (started with `--http-port`: dashboard, API, metrics)."""
        assert self.http_port is not None, "the broker was started without --http-port"
        return f"http://{self.host}:{self.http_port}"

    def client_url(self, user: str | None = None, token: str | None = None, *, tls: bool = False) -> str:
        """A client URL: `kw://` to the plaintext port or `kws://` to the TLS port (CA from `tls.ca`)."""
        credentials = f"{user}:{token}@" if user is not None else ""
        if tls:
            assert self.tls is not None and self.tls_port is not None
            return f"kws://{credentials}{self.host}:{self.tls_port}?ca={self.tls.ca}"
        return f"kw://{credentials}{self.host}:{self.port}"

    def _security_args(self) -> list[str]:
        args: list[str] = []
        if self.auth_file is not None:
            args += ["--auth-file", str(self.auth_file)]
        if self.tls is not None:
            args += ["--tls-cert", str(self.tls.cert), "--tls-key", str(self.tls.key),
                     "--tls-port", str(self.tls_port or 0)]
        if not self.plaintext:
            args.append("--no-plaintext")
        return args

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def _start(self, port: int) -> bool:
        """Start and wait for the listening line; False if the process exited first."""
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable, "-m", "kittiwake.broker",
            *(("--store", self.store_url) if self.store_url else ("--data", str(self.data_dir))),
            "--host", self.host, "--port", str(port),
            *self._security_args(), *self.extra_args,
        ]
        forked = self.preexec_fn is None and broker_launcher.enabled()
        with open(self.stdout_path, "wb") as stdout, open(self.log_path, "ab") as log:
            log.write(f"--- start {self.starts}{' (forked)' if forked else ''}: {' '.join(command)}\n".encode())
            log.flush()
            if forked:
                self.proc = broker_launcher.start(command[3:], self.stdout_path, self.log_path)
            else:
                self.proc = subprocess.Popen(
                    command, stdout=stdout, stderr=log, stdin=subprocess.DEVNULL, preexec_fn=self.preexec_fn
                )
        self.starts += 1
        deadline = time.monotonic() + START_TIMEOUT_SECS
        while time.monotonic() < deadline:
            listening = self.stdout_path.read_text(errors="replace")
            match = LISTENING.match(listening)
            if match:
                self.port = int(match.group(2))
                udp = UDP_PORT.search(listening.splitlines()[0])
                self.udp_port = int(udp.group(1)) if udp else None
                sqs = SQS_PORT.search(listening.splitlines()[0])
                self.sqs_port = int(sqs.group(1)) if sqs else None
                http = HTTP_PORT.search(listening.splitlines()[0])
                self.http_port = int(http.group(1)) if http else None
                if match.group(3):
                    self.tls_port = int(match.group(3))
                return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.01)
        self.kill()
        raise RuntimeError(f"broker did not start within {START_TIMEOUT_SECS} s\n{self.log_tail()}")

    def restart(self) -> None:
        """Start again on the same data directory, on the same port if it is free."""
        if self.alive():
            self.kill()
        if not self._start(self.port):
            if not self._start(0):
                raise RuntimeError(f"broker did not restart (exit {self.proc.returncode})\n{self.log_tail()}")  # type: ignore[union-attr]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: a crash with no chance to flush anything."""
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=30)

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait; returns the exit status."""
        assert self.proc is not None
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def rss_bytes(self) -> int:
        """Resident memory of the broker now (VmRSS)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS in /proc status")

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no broker log)"
        return "\n".join(text.splitlines()[-lines:])

    def connect(self, timeout: float = 10.0, *, tls: bool = False, source: str | None = None) -> RawConnection:
        """A raw connection; `source` binds its local address first (any of 127.0.0.0/8 is loopback,
        so tests can come from many addresses)."""
        if tls:
            assert self.tls is not None and self.tls_port is not None
            context = ssl.create_default_context(cafile=str(self.tls.ca))
            return RawConnection(self.host, self.tls_port, timeout=timeout, tls=context, source=source)
        return RawConnection(self.host, self.port, timeout=timeout, source=source)

    def __enter__(self) -> BrokerProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.kill()


class RawConnection:
    """A blocking socket that sends requests and reads replies as `kittiwake.protocol` frames."""

    def __init__(
        self, host: str, port: int, timeout: float = 10.0, tls: ssl.SSLContext | None = None, source: str | None = None
    ) -> None:
        self.sock = socket.create_connection(
            (host, port), timeout=timeout, source_address=(source, 0) if source is not None else None
        )
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            self.sock = tls.wrap_socket(self.sock, server_hostname=host)
        self.reader = FrameReader(max_frame=1 << 30)
        self._ids = itertools.count(1)
        self._frames: list[bytes] = []

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # sending

    def next_id(self) -> int:
        return next(self._ids)

    @staticmethod
    def frame(op: str, request_id: int, **fields: Any) -> bytes:
        return encode_frame(encode_request(op, request_id, fields))

    def send(self, op: str, **fields: Any) -> int:
        request_id = self.next_id()
        self.sock.sendall(self.frame(op, request_id, **fields))
        return request_id

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    # receiving

    def read_frame(self) -> bytes:
        """The next frame body; raises ConnectionError when the broker closes first."""
        while not self._frames:
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("the broker closed the connection")
            self._frames.extend(self.reader.feed(data))
        return self._frames.pop(0)

    def read_reply(self) -> Reply:
        return decode_reply(self.read_frame())

    def read_replies(self, count: int) -> list[Reply]:
        replies: list[Reply] = []
        while len(replies) < count:
            if not self._frames:
                data = self.sock.recv(1 << 20)
                if not data:
                    raise ConnectionError(f"the broker closed the connection after {len(replies)} of {count} replies")
                self._frames.extend(self.reader.feed(data))
            replies.extend(decode_reply(body) for body in self._frames)
            self._frames.clear()
        return replies

    def read_until_closed(self, timeout: float = 10.0) -> list[Reply]:
        """Every reply until the broker closes the connection."""
        self.sock.settimeout(timeout)
        replies = [decode_reply(body) for body in self._frames]
        self._frames.clear()
        while True:
            try:
                data = self.sock.recv(1 << 20)
            except ConnectionResetError:
                return replies
            if not data:
                return replies
            replies.extend(decode_reply(body) for body in self.reader.feed(data))

    def request(self, op: str, **fields: Any) -> Reply:
        """Send one request and return its reply (replies to other ids are not expected)."""
        request_id = self.send(op, **fields)
        reply = self.read_reply()
        assert reply.id == request_id, f"reply id {reply.id} to request {request_id}"
        return reply

    def call(self, op: str, **fields: Any) -> Any:
        """Send one request and return its result; fails the test on an error reply."""
        reply = self.request(op, **fields)
        assert reply.ok, f"{op} failed: {reply.error}"
        return reply.result

    # conveniences for the common ops

    def auth(self, user: str, token: str) -> Reply:
        """Send credentials; the reply (ok with {"user"}, or the refusal before the broker closes)."""
        return self.request("auth", user=user, token=token)

    def enqueue(self, queue: str, data: bytes, **task: Any) -> dict[str, Any]:
        return self.call("enqueue", tasks=[{"queue": queue, "data": data, **task}])[0]

    def lease(self, queues: str | Iterable[str], **fields: Any) -> list[dict[str, Any]]:
        names = [queues] if isinstance(queues, str) else list(queues)
        return self.call("lease", queues=names, **fields)
