"""The broker process: listen, wire connections to the group commit, tick, stop cleanly.

`Broker` is the in-process API (`await start()`, `port`, `await stop()`);
`run_broker` is the process entry point used by `kittiwake broker` and
`python -m kittiwake.broker`: it raises the open-files limit, runs the loop
(uvloop when installed), prints the one listening line tests and scripts wait
for, and stops on SIGTERM or SIGINT.

Ticks. Every `SWEEP_SECS` the broker asks for a pass that sweeps expired
leases (their queues wake parked long-polls) and answers long-polls past their
deadline; every `MAINTENANCE_SECS` one that also runs `Engine.maintain` and
reaps rows of dropped queues. A tick only asks: the pass itself runs in the
same group commit as requests, so there is one place that commits and replies.

Several brokers on one PostgreSQL schema (`brokers=many`): the store's
announcements of other brokers' changes wake long-polls (`announcements`), and
every POLL_TICKS ticks every parked long-poll looks again in case one was lost.

Listeners: the plaintext port (`port`) unless `security.plaintext` is off,
and the TLS port (`tls_port`) when a certificate is given; both lead to the
same connections. With `udp_port`, also a UDP port (`udp_listener`) whose
datagrams go to the same group commit. With `sqs_port`, also an HTTP port
(`http_server`) serving the SQS API (`kittiwake.broker.sqs`), whose requests go
to the same group commit too. With `http_port`, an HTTP port for people and
their tools (`kittiwake.observe`): Prometheus metrics, the dashboard and its
JSON API. With an auth file every connection gets a `Session`
(`session.py`) that checks its credentials and then its rights.

Stopping: stop accepting, stop reading, serve and commit what was already
received, answer every parked long-poll with an empty list, let the replies
flush, close the store.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import signal
import sys
import time
from pathlib import Path
from typing import Any

from kittiwake.broker import announcements
from kittiwake.broker.auth import Authenticator
from kittiwake.broker.config import BrokerConfig
from kittiwake.broker.connection import Connection
from kittiwake.broker.security import exposure_note, exposure_warnings
from kittiwake.broker.session import Session
from kittiwake.broker.tls import HANDSHAKE_TIMEOUT_SECS, server_context
from kittiwake.broker.group_commit import GroupCommit
from kittiwake.broker.http_server import HttpServer, Routes
from kittiwake.broker.read_budget import ReadBudget
from kittiwake.broker.timeouts import ConnectionTimeouts
from kittiwake.broker.udp_listener import UdpListener
from kittiwake.engine import Engine, TaskStore
from kittiwake.protocol.messages import Request
from kittiwake.store.location import open_store

log = logging.getLogger("kittiwake.broker")

SWEEP_SECS = 0.1
MAINTENANCE_SECS = 1.0
LISTEN_BACKLOG = 4096  # a burst of thousands of connects should not wait on SYN retries
FLUSH_ON_STOP_SECS = 5.0


class Broker:
    """One broker: a TCP listener, its connections, the engine and the store."""

    def __init__(self, config: BrokerConfig, *, store: TaskStore | None = None) -> None:
        self.config = config
        self.max_frame = config.max_frame
        self._given_store = store
        self.store: TaskStore | None = None
        self.group: GroupCommit | None = None
        self.connections: set[Connection] = set()
        self.budget = ReadBudget(config.max_buffered_bytes, config.max_frame)
        self.timeouts = ConnectionTimeouts(
            lambda: self.connections, self.budget, config.frame_timeout_secs, config.idle_timeout_secs
        )
        self._server: asyncio.AbstractServer | None = None
        self._tls_server: asyncio.AbstractServer | None = None
        self.authenticator: Authenticator | None = None
        self.tls_port: int | None = None
        self.udp_port: int | None = None
        self.udp: UdpListener | None = None
        self.sqs_port: int | None = None
        self.http: HttpServer | None = None
        self.routes = Routes()  # the SQS port's: other modules may add theirs before start
        self.http_port: int | None = None
        self.observe_http: HttpServer | None = None
        self.observe_routes = Routes()  # the --http-port's (kittiwake.observe): metrics, dashboard, API
        self.observer: Any = None  # kittiwake.observe.Observer, imported only when the port is on
        self._sqs: Any = None  # kittiwake.broker.sqs.service.SqsService, imported only when the port is on
        self._tick_handle: asyncio.TimerHandle | None = None
        self._ticks = 0
        self._shared = False  # several brokers share the store: poll for their changes too
        self._stopping = False
        self._stopped = asyncio.Event()
        self.host = config.host
        self.port = config.port
        self.started_at: float | None = None  # epoch seconds, once `start` opened the store

    @property
    def data_dir(self) -> Path:
        return Path(self.config.data_dir).resolve()

    @property
    def store_description(self) -> str:
        """Where the tasks live, as the log and the listening line say it (no password)."""
        location = self.config.store_location
        if location.kind == "sqlite":
            return f"data={Path(location.target).resolve()}"
        return f"store={location.describe()}"

    @property
    def url(self) -> str:
        if self._server is None and self.tls_port is not None:
            return f"kws://{self.host}:{self.tls_port}"
        return f"kw://{self.host}:{self.port}"

    # -------------------------------------------------------------- start

    async def start(self) -> None:
        """Open the store, recover the engine and start listening; `port` is then the real port."""
        loop = asyncio.get_running_loop()
        config = self.config
        security = config.security
        # a bad auth file or certificate stops the start before the store is touched
        authenticator = Authenticator(security.auth_file, loop) if security.auth_file else None
        tls_context = server_context(security.tls_cert, security.tls_key) if security.tls_cert and security.tls_key else None
        store = self._given_store
        if store is None:
            store = open_store(
                config.store_location, durability=config.durability, cache_mb=config.sqlite_cache_mb, broker=True
            )
        self.store = store

        def make_engine() -> Engine:
            return Engine(store, limits=config.limits, head_tasks=config.head_tasks, cache_bytes=config.cache_bytes)

        self.started_at = time.time()
        group = GroupCommit(loop, store, make_engine, config.max_frame)
        try:
            group.start(time.time())
            if security.plaintext:
                self._server = await loop.create_server(
                    lambda: Connection(self), config.host, config.port, backlog=LISTEN_BACKLOG
                )
            if tls_context is not None:
                self._tls_server = await loop.create_server(
                    lambda: Connection(self), config.host, security.tls_port, backlog=LISTEN_BACKLOG,
                    ssl=tls_context, ssl_handshake_timeout=HANDSHAKE_TIMEOUT_SECS,
                )
            if config.udp_port is not None:
                _, self.udp = await loop.create_datagram_endpoint(
                    lambda: UdpListener(self, authenticator), local_addr=(config.host, config.udp_port)
                )
        except BaseException:
            if self.udp is not None:
                self.udp.close()
                self.udp = None
            for server in (self._server, self._tls_server):
                if server is not None:
                    server.close()
            store.close()
            if authenticator is not None:
                authenticator.close()
            raise
        self.group = group
        self.authenticator = authenticator
        if self._tls_server is not None and self._tls_server.sockets:
            self.tls_port = self._tls_server.sockets[0].getsockname()[1]
        if self._server is not None and self._server.sockets:
            self.port = self._server.sockets[0].getsockname()[1]
        elif self.tls_port is not None:
            self.port = self.tls_port
        if self.udp is not None and self.udp.transport is not None:
            self.udp_port = self.udp.transport.get_extra_info("sockname")[1]
        self._shared = announcements.listen(store, loop, group.wake)
        self._tick_handle = loop.call_later(SWEEP_SECS, self._tick)
        self.timeouts.start(loop)
        try:
            if config.sqs_port is not None:
                await self._start_sqs(config.sqs_port)
            if config.http_port is not None:
                await self._start_observe(config.http_port)
        except BaseException:
            await self.stop()
            raise
        tls = f", TLS on port {self.tls_port}" if self.tls_port is not None else ""
        tls += f", UDP on port {self.udp_port}" if self.udp_port is not None else ""
        tls += f", SQS API on port {self.sqs_port}" if self.sqs_port is not None else ""
        tls += f", dashboard and metrics on http://{self.host}:{self.http_port}/" if self.http_port is not None else ""
        plaintext = "" if self._server is not None else " (TLS only)"
        log.info("broker started on %s:%d%s%s (%s), %s",
                 self.host, self.port, plaintext, tls, exposure_note(self.host, security), self.store_description)
        for warning in exposure_warnings(self.host, security):
            log.warning("%s", warning)

    async def _start_sqs(self, port: int) -> None:
        """The SQS API on the HTTP port: its queues are read through the group commit, so it starts last."""
        from kittiwake.broker.sqs.service import MAX_REQUEST_BYTES, SqsService

        self._sqs = SqsService(self)
        await self._sqs.start(self.routes)
        self.http = HttpServer(self.routes, max_body_bytes=MAX_REQUEST_BYTES, max_connections=self.config.max_connections)
        self.sqs_port = await self.http.start(self.config.host, port)

    async def _start_observe(self, port: int) -> None:
        """Metrics, the dashboard and its API on their own HTTP port (`kittiwake.observe`)."""
        from kittiwake.observe import Observer

        self.observer = Observer(self)
        self.observer.install(self.observe_routes)
        self.observe_http = HttpServer(self.observe_routes, max_connections=self.config.max_connections)
        self.http_port = await self.observe_http.start(self.config.host, port)

    @property
    def accepting(self) -> bool:
        """Whether requests are still taken (False once stopping)."""
        return not self._stopping and self.group is not None

    def _tick(self) -> None:
        group = self.group
        if self._stopping or group is None:
            return
        self._ticks += 1
        group.request_sweep()
        if self._shared and self._ticks % announcements.POLL_TICKS == 0:
            group.wake(None)  # the poll behind other brokers' announcements
        if self._ticks % round(MAINTENANCE_SECS / SWEEP_SECS) == 0:
            group.request_maintenance()
        self._tick_handle = asyncio.get_running_loop().call_later(SWEEP_SECS, self._tick)

    # -------------------------------------------------- connection host

    def admit(self, connection: Connection) -> bool:
        if self._stopping or len(self.connections) >= self.config.max_connections:
            return False
        self.connections.add(connection)
        return True

    def submit(self, connection: Connection, item: Request | bytes) -> None:
        if self.group is not None and not self._stopping:
            self.group.submit(connection, item)

    def resubmit(self, connection: Connection, items: list[Request | bytes]) -> None:
        if self.group is not None and not self._stopping:
            self.group.resubmit(connection, items)

    def end_waits(self, connection: Connection) -> None:
        if self.group is not None:
            self.group.end_waits(connection)

    def open_session(self, connection: Connection) -> Session | None:
        if self.authenticator is None:
            return None
        return Session(self.authenticator, connection, self.config.security.auth_timeout_secs)

    def forget(self, connection: Connection) -> None:
        self.connections.discard(connection)
        self.budget.forget(connection)
        if self.group is not None:
            self.group.drop_connection(connection)

    # --------------------------------------------------------------- stop

    async def stop(self) -> None:
        """Stop accepting, answer what was received, flush replies, close the store. Idempotent."""
        if self._stopping:
            await self._stopped.wait()
            return
        self._stopping = True
        try:
            if self._tick_handle is not None:
                self._tick_handle.cancel()
            self.timeouts.stop()
            for server in (self._server, self._tls_server):
                if server is not None:
                    server.close()
            for http in (self.http, self.observe_http):
                if http is not None:
                    http.stop_accepting()
            if self.observer is not None:
                self.observer.stop()
            if self._sqs is not None:
                self._sqs.stop()
            for connection in list(self.connections):
                connection.stop_reading()
            if self.udp is not None:
                self.udp.stopping = True  # take no more datagrams; the replies below still go out
            if self.group is not None:
                try:
                    self.group.finish()
                except Exception:
                    log.exception("closing the store failed")
            for connection in list(self.connections):
                connection.close()  # after the replies written above are flushed
            if self.udp is not None:
                self.udp.close()
            deadline = time.monotonic() + FLUSH_ON_STOP_SECS
            while self.connections and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            for connection in list(self.connections):
                if connection.transport is not None:
                    connection.transport.abort()
            if self.http is not None or self.observe_http is not None:
                await asyncio.sleep(0.05)  # HTTP handlers answered by the last pass write their answers
            for http in (self.http, self.observe_http):
                if http is not None:
                    await http.stop()
            for server in (self._server, self._tls_server):
                if server is not None:
                    await server.wait_closed()
            if self.authenticator is not None:
                self.authenticator.close()
            log.info("broker stopped")
        finally:
            self._stopped.set()


# ------------------------------------------------------------------ process


def raise_open_files_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; every connection is a file descriptor."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            return hard
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-files limit from %d to %d: %s", soft, hard, exc)
    return soft


def listening_line(broker: Broker) -> str:
    config = broker.config
    security = config.security
    tls = f"tls_port={broker.tls_port} " if broker.tls_port is not None else ""
    tls += f"udp_port={broker.udp_port} " if broker.udp_port is not None else ""
    tls += f"sqs_port={broker.sqs_port} " if broker.sqs_port is not None else ""
    tls += f"http_port={broker.http_port} " if broker.http_port is not None else ""
    plaintext = "" if security.plaintext else "plaintext=off "
    auth = "auth=on " if security.auth_file else "auth=off "
    return (
        f"kittiwake broker listening on {broker.host}:{broker.port} {tls}{plaintext}{auth}"
        f"{broker.store_description} durability={config.durability}"
    )


async def serve(config: BrokerConfig) -> None:
    """Run a broker until SIGTERM or SIGINT, then stop it cleanly."""
    loop = asyncio.get_running_loop()
    open_files = raise_open_files_limit()
    if open_files < config.max_connections + 64:
        log.warning("the open-files limit %d is below max_connections %d", open_files, config.max_connections)
    signalled = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, signalled.set)
    broker = Broker(config)
    await broker.start()
    print(listening_line(broker), flush=True)
    try:
        await signalled.wait()
        log.info("signalled, stopping")
    finally:
        await broker.stop()


def run_broker(config: BrokerConfig) -> int:
    """Run a broker in this process until signalled; returns the exit status (0 after a clean stop)."""
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    try:
        import uvloop
    except ImportError:
        loop_factory = None
    else:
        loop_factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(serve(config))
    return 0
