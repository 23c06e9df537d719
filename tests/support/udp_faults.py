"""UDP helpers for tests of `kwu://`: a relay that passes each datagram through a policy, and a
flood of auth sessions.

`PolicyRelay` sits between a client and the broker's UDP port: every datagram goes through
`policy(direction, data)` ("c2b" client to broker, "b2c" back), which returns the datagrams to pass
on — none to drop it, two to duplicate it — and may act in between (restart the broker, say),
holding the relay meanwhile.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from typing import Any, Callable

import msgspec

from kittiwake.protocol import decode_reply, encode_request
from kittiwake.protocol.datagrams import PADDED_REQUEST_BYTES, decode_datagram, encode_datagram

Policy = Callable[[str, bytes], list[bytes]]


class PolicyRelay:
    """client ↔ relay ↔ broker, through `policy`; `port` is the client's side."""

    def __init__(self, broker: tuple[str, int], policy: Policy) -> None:
        self.broker = broker
        self.policy = policy
        self.front = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.front.bind(("127.0.0.1", 0))
        self.back = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.back.bind(("127.0.0.1", 0))
        self.port: int = self.front.getsockname()[1]
        self.client: Any = None
        self.stopped = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped:
            ready, _, _ = select.select([self.front, self.back], [], [], 0.1)
            for sock in ready:
                data, address = sock.recvfrom(65_535)
                if sock is self.front:
                    self.client = address
                    for out in self.policy("c2b", data):
                        self.back.sendto(out, self.broker)
                else:
                    for out in self.policy("b2c", data):
                        if self.client is not None:
                            self.front.sendto(out, self.client)

    def close(self) -> None:
        self.stopped = True
        self.thread.join()
        self.front.close()
        self.back.close()

    def __enter__(self) -> PolicyRelay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def request_id(data: bytes) -> int:
    """The id of the request or reply a datagram carries."""
    return int(msgspec.msgpack.decode(decode_datagram(data).body)["id"])


def is_ok_reply(data: bytes) -> bool:
    return bool(msgspec.msgpack.decode(decode_datagram(data).body).get("ok"))


def flood_sessions(broker: tuple[str, int], user: tuple[str, str], count: int, sources: list[str]) -> int:
    """`count` `auth`s of `user`, each with a producer id of its own, from `sources` in turn: how many
    were answered ok."""
    socks = []
    for source in sources:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind((source, 0))
        sock.connect(broker)
        sock.setblocking(False)
        socks.append(sock)
    ok = 0
    producer = 1 << 40
    try:
        for start in range(0, count, 200):
            batch = range(start, min(count, start + 200))
            for n in batch:
                producer += 1
                body = encode_request("auth", 1, {"user": user[0], "token": user[1]})
                socks[n % len(socks)].send(encode_datagram(producer, body, padded_to=PADDED_REQUEST_BYTES))
            got = 0
            deadline = time.monotonic() + 5.0
            while got < len(batch) and (left := deadline - time.monotonic()) > 0:
                ready, _, _ = select.select(socks, [], [], left)
                for sock in ready:
                    try:
                        data = sock.recv(65_535)
                    except BlockingIOError:
                        continue
                    got += 1
                    ok += bool(decode_reply(decode_datagram(data).body).ok)
    finally:
        for sock in socks:
            sock.close()
    return ok
