"""A loss-injecting UDP relay: clients talk to it as to the broker, and it drops, duplicates and reorders.

CMQ (001) measures its UDP transport under packet loss; this relay makes that
loss on purpose and reproducibly on one machine. It listens on one port and
forwards every datagram to the target (the broker's `--udp-port`), and every
reply back to the client it answers. Each datagram, in either direction, is
independently:

* dropped with probability `drop_rate`;
* otherwise sent twice with probability `duplicate_rate`;
* and held back `reorder_delay_secs` with probability `reorder_rate`, so
  datagrams sent after it overtake it.

One seeded `random.Random` decides everything, in the order datagrams
arrive, so one seed and one arrival order give one run. Counts of what it did
are in `counts()`.

Each client address gets its own upstream socket, so the target's replies can
be routed back; at most `MAX_CLIENTS` of them are kept (the least recently
used is closed). The relay runs on its own thread (`start`/`stop`, or as a
context manager), or as a process:

    python -m kittiwake.bench.udp_relay --target 127.0.0.1:7372 --port 7373 --drop 0.014 --seed 1
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import random
import selectors
import socket
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass, field

MAX_CLIENTS = 1024
RECEIVE_BYTES = 65_535
SOCKET_BUFFER_BYTES = 4 * 1024 * 1024
UPSTREAM = "upstream"  # client → target
DOWNSTREAM = "downstream"  # target → client
Address = tuple[str | int | bytes, ...]  # a socket address: (host, port), with IPv6's flow info and scope id


@dataclass(frozen=True, slots=True)
class Faults:
    """What the relay does to each datagram."""

    drop_rate: float = 0.0
    duplicate_rate: float = 0.0
    reorder_rate: float = 0.0
    reorder_delay_secs: float = 0.005
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("drop_rate", "duplicate_rate", "reorder_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        if self.reorder_delay_secs < 0:
            raise ValueError("reorder_delay_secs must be >= 0")


@dataclass(slots=True)
class DirectionCounts:
    received: int = 0
    forwarded: int = 0  # datagrams sent on, duplicates included
    dropped: int = 0
    duplicated: int = 0
    reordered: int = 0


@dataclass(slots=True)
class RelayCounts:
    upstream: DirectionCounts = field(default_factory=DirectionCounts)
    downstream: DirectionCounts = field(default_factory=DirectionCounts)

    def total(self, what: str) -> int:
        return int(getattr(self.upstream, what)) + int(getattr(self.downstream, what))

    def as_dict(self) -> dict[str, dict[str, int]]:
        return {UPSTREAM: asdict(self.upstream), DOWNSTREAM: asdict(self.downstream)}


def _buffered_socket(family: int) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_DGRAM)
    for option in (socket.SO_RCVBUF, socket.SO_SNDBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER_BYTES)
        except OSError:
            pass
    sock.setblocking(False)
    return sock


class UdpRelay:
    """Forwards datagrams between clients and one target, with faults (see the module docstring)."""

    def __init__(self, target: tuple[str, int], faults: Faults = Faults(), *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.target = socket.getaddrinfo(target[0], target[1], type=socket.SOCK_DGRAM)[0][4]
        self.faults = faults
        self._random = random.Random(faults.seed)
        self._family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._front = _buffered_socket(self._family)
        self._front.bind((host, port))
        self.host = host
        self.port: int = self._front.getsockname()[1]
        self._upstream_of: OrderedDict[Address, socket.socket] = OrderedDict()  # client address → its socket
        self._client_of: dict[socket.socket, Address] = {}
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._front, selectors.EVENT_READ, None)
        self._held: list[tuple[float, int, socket.socket, bytes, Address]] = []  # reordered: (due, n, sock, data, to)
        self._order = itertools.count()
        self._counts = RelayCounts()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ running

    def start(self) -> UdpRelay:
        self._thread = threading.Thread(target=self.run, name="kittiwake-udp-relay", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._selector.close()
        for sock in [self._front, *self._upstream_of.values()]:
            sock.close()

    def __enter__(self) -> UdpRelay:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def counts(self) -> RelayCounts:
        with self._lock:
            return RelayCounts(DirectionCounts(**asdict(self._counts.upstream)),
                               DirectionCounts(**asdict(self._counts.downstream)))

    def run(self) -> None:
        """Relay until `stop` (blocks)."""
        while not self._stop.is_set():
            timeout = 0.05
            if self._held:
                timeout = max(0.0, min(timeout, self._held[0][0] - time.monotonic()))
            for key, _ in self._selector.select(timeout):
                assert isinstance(key.fileobj, socket.socket)  # only sockets are registered
                self._drain(key.fileobj)
            self._release_held()

    def _drain(self, sock: socket.socket) -> None:
        for _ in range(256):  # a bounded burst per socket, then the others get a turn
            try:
                data, source = sock.recvfrom(RECEIVE_BYTES)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # ICMP unreachable from an earlier send, a closed socket
            if sock is self._front:
                self._forward(UPSTREAM, self._upstream(source), data, self.target)
            else:
                client = self._client_of.get(sock)
                if client is not None:
                    self._forward(DOWNSTREAM, self._front, data, client)

    def _upstream(self, client: Address) -> socket.socket:
        sock = self._upstream_of.get(client)
        if sock is not None:
            self._upstream_of.move_to_end(client)
            return sock
        sock = _buffered_socket(self._family)
        sock.bind((self.host, 0))
        self._upstream_of[client] = sock
        self._client_of[sock] = client
        self._selector.register(sock, selectors.EVENT_READ, None)
        while len(self._upstream_of) > MAX_CLIENTS:
            _, old = self._upstream_of.popitem(last=False)
            self._selector.unregister(old)
            del self._client_of[old]
            old.close()
        return sock

    # ------------------------------------------------------------- faults

    def _forward(self, direction: str, sock: socket.socket, data: bytes, to: Address) -> None:
        faults = self.faults
        draw = self._random.random
        with self._lock:
            counts = self._counts.upstream if direction == UPSTREAM else self._counts.downstream
            counts.received += 1
            if draw() < faults.drop_rate:
                counts.dropped += 1
                return
            copies = 1
            if draw() < faults.duplicate_rate:
                counts.duplicated += 1
                copies = 2
            held = draw() < faults.reorder_rate
            if held:
                counts.reordered += 1
            counts.forwarded += copies
        for copy in range(copies):
            if held and copy == 0:  # the duplicate, if any, goes now: the copies arrive out of order too
                due = time.monotonic() + faults.reorder_delay_secs
                heapq.heappush(self._held, (due, next(self._order), sock, data, to))
            else:
                self._send(sock, data, to)

    def _release_held(self) -> None:
        now = time.monotonic()
        held = self._held
        while held and held[0][0] <= now:
            _, _, sock, data, to = heapq.heappop(held)
            self._send(sock, data, to)

    @staticmethod
    def _send(sock: socket.socket, data: bytes, to: Address) -> None:
        try:
            sock.sendto(data, to)
        except OSError:
            pass  # a full buffer or a closed socket: as if the network lost it


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kittiwake.bench.udp_relay", description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True, help="HOST:PORT of the broker's UDP port")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (0: a free one, printed)")
    parser.add_argument("--drop", type=float, default=0.0, help="probability of dropping a datagram")
    parser.add_argument("--duplicate", type=float, default=0.0, help="probability of sending a datagram twice")
    parser.add_argument("--reorder", type=float, default=0.0, help="probability of holding a datagram back")
    parser.add_argument("--reorder-delay-ms", type=float, default=5.0, help="how long a held datagram waits")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    host, _, port = args.target.rpartition(":")
    faults = Faults(args.drop, args.duplicate, args.reorder, args.reorder_delay_ms / 1000, args.seed)
    relay = UdpRelay((host.strip("[]"), int(port)), faults, host=args.host, port=args.port)
    print(f"udp relay listening on {relay.host}:{relay.port} -> {args.target}", flush=True)
    try:
        relay.run()
    except KeyboardInterrupt:
        pass
    finally:
        print(relay.counts().as_dict(), flush=True)
        relay.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
