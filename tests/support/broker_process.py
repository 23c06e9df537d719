"""The test suite's broker subprocess, and a raw-frame connection to talk to it.

`BrokerProcess` is `kittiwake.testing.BrokerProcess` (the launcher Kittiwake ships) started at
construction, with the suite's conveniences on top: its test-style signature
(`BrokerProcess(data_dir, port, extra_args, auth_file=, tls=, plaintext=, store_url=)`), client
URLs with credentials (`client_url`), raw connections (`connect`, optionally from another loopback
address with `source=`), and the endpoints of the faces. Its logs are `DIR.stdout` and `DIR.log`
beside the data directory; `log_tail()` shows the end of the log in assertion messages.

Speed: the process is forked from a launcher that has the broker imported already
(`support.broker_launcher`: the same command, listening about ten times sooner), given to the
shipped class as its `spawn=` hook; it is started with exec when `preexec_fn` is given or
KITTIWAKE_TEST_BROKER_EXEC=1.

`RawConnection` speaks the wire protocol with `kittiwake.protocol` over a
blocking socket, with no client library in between, so broker tests can send
exactly the bytes they mean, pipeline, and match replies by id.

Security: `auth_file=` starts the broker with `--auth-file`; `tls=`
(`support.tls_certificates.Certificates`) adds the TLS port (`tls_port`, a
free one unless given) and `plaintext=False` closes the plaintext port.
`store_url=` starts it with `--store URL` instead of `--data` (the data directory then only
names the log files). `client_url(user, token, tls=)` builds client URLs; `connect(tls=True)` opens a raw
TLS connection and `RawConnection.auth(user, token)` authenticates it.
"""

from __future__ import annotations

import functools
import itertools
import os
import socket
import ssl
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from kittiwake import testing
from kittiwake.protocol import FrameReader, Reply, decode_reply, encode_frame, encode_request
from kittiwake.testing import BrokerDidNotStart, spawn_subprocess
from support import broker_launcher

__all__ = ["BrokerDidNotStart", "BrokerProcess", "RawConnection"]


class BrokerProcess(testing.BrokerProcess):
    """A broker subprocess on `data_dir`, started and listening once constructed; `port=0` lets the
    broker pick one. `BrokerDidNotStart` (with the exit status and the log's end) if it cannot start."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        port: int = 0,
        extra_args: Sequence[str] = (),
        *,
        host: str = "127.0.0.1",
        preexec_fn: Callable[[], object] | None = None,
        auth_file: str | os.PathLike[str] | None = None,
        tls: Any = None,
        tls_port: int = 0,
        plaintext: bool = True,
        store_url: str | None = None,
    ) -> None:
        self.auth_file = auth_file
        self.tls = tls
        self.plaintext = plaintext
        self.extra_args = tuple(extra_args)
        security: list[str] = []
        if auth_file is not None:
            security += ["--auth-file", str(auth_file)]
        if tls is not None:
            security += ["--tls-cert", str(tls.cert), "--tls-key", str(tls.key), "--tls-port", str(tls_port)]
        if not plaintext:
            security.append("--no-plaintext")
        spawn = broker_launcher.spawn if preexec_fn is None else functools.partial(spawn_subprocess, preexec_fn=preexec_fn)
        super().__init__(data_dir, store_url=store_url, args=[*security, *self.extra_args], host=host, port=port,
                         spawn=spawn)
        self.start()

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

    def rss_bytes(self) -> int:
        """Resident memory of the broker now (VmRSS)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS in /proc status")

    def connect(self, timeout: float = 10.0, *, tls: bool = False, source: str | None = None) -> RawConnection:
        """A raw connection; `source` binds its local address first (any of 127.0.0.0/8 is loopback,
        so tests can come from many addresses)."""
        if tls:
            assert self.tls is not None and self.tls_port is not None
            context = ssl.create_default_context(cafile=str(self.tls.ca))
            return RawConnection(self.host, self.tls_port, timeout=timeout, tls=context, source=source)
        return RawConnection(self.host, self.port, timeout=timeout, source=source)

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
