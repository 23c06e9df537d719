"""The broker process: listen, wire connections to the group commit, tick, stop cleanly.

`Broker` is the in-process API (`await start()`, `port`, `await stop()`);
`run_broker` is the process entry point used by `kittiwake broker` and
`python -m kittiwake.broker`: it raises the open-files limit, runs the loop
(uvloop when installed), prints the one listening line tests and scripts wait
for (its format and parser are `listening`), and stops on SIGTERM or SIGINT.

Ticks. Every `SWEEP_SECS` the broker asks for a pass that sweeps expired
leases (their queues wake parked long-polls) and answers long-polls past their
deadline; every `MAINTENANCE_SECS` one that also runs `Engine.maintain` and
reaps rows of dropped queues. A tick only asks: the pass itself runs in the
same group commit as requests, so there is one place that commits and replies.

Several brokers on one PostgreSQL schema (`brokers=many`): the store's
announcements of other brokers' changes wake long-polls (`announcements`), and
every POLL_TICKS ticks every parked long-poll looks again in case one was lost.
They may also listen on one address: on a shared store the listeners set SO_REUSEPORT, so the
kernel hands each new connection to one of the brokers alive on that address, and when one dies
clients reconnect to another (how a cluster node on PostgreSQL fails over: the map names one
address per node). A broker on a store of its own never shares its port.

Listeners: the plaintext port (`port`) unless `security.plaintext` is off,
and the TLS port (`tls_port`) when a certificate is given; both lead to the
same connections. Every other way in is a *face* (`faces.Face`: the SQS API,
the dashboard, UDP, ...), built by the composition root and handed to
`Broker(config, faces=...)`: the broker starts each once the store is open
and its own ports listen, and hands it itself as the face's `faces.Host` —
the group commit, the engine's reads between passes, the authenticator, and
the budgets every port shares: one cap on connections for the whole process
(`connection_slots`, fitted to the open-files limit at start) and one budget
of request bytes held while they arrive (`read_budget`). The server names no
face. With an auth file every binary connection gets a `Session`
(`session.py`) that checks its credentials and then its rights.

Stopping: stop accepting (every face too), stop reading, serve and commit what
was already received, answer every parked long-poll with an empty list, let
the replies flush, stop the faces, close the store.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable, Sequence

from kittiwake.broker import announcements
from kittiwake.broker.auth import Authenticator
from kittiwake.broker.config import BrokerConfig
from kittiwake.broker.connection import Connection
from kittiwake.broker.connection_slots import ConnectionSlots, fit_to_open_files
from kittiwake.broker.extensions import RequestExtension, id_class_of, labels_of
from kittiwake.broker.faces import CommitListener, Face
from kittiwake.broker.listening import Listening, format_listening_line
from kittiwake.broker.pass_replies import Caller
from kittiwake.broker.security import exposure_note, exposure_warnings
from kittiwake.broker.session import Session
from kittiwake.broker.tls import HANDSHAKE_TIMEOUT_SECS, server_context
from kittiwake.broker.group_commit import GroupCommit
from kittiwake.broker.read_budget import ReadBudget
from kittiwake.broker.timeouts import ConnectionTimeouts
from kittiwake.engine import Engine, TaskStore, identity
from kittiwake.engine.mutations import SetCounter
from kittiwake.engine.storage import is_shared
from kittiwake.model import Limits
from kittiwake.protocol.messages import Request
from kittiwake.store.location import open_store

log = logging.getLogger("kittiwake.broker")

SWEEP_SECS = 0.1
MAINTENANCE_SECS = 1.0
LISTEN_BACKLOG = 4096  # a burst of thousands of connects should not wait on SYN retries
FLUSH_ON_STOP_SECS = 5.0
STOP_STEP_SECS = 5.0  # a face's, an extension's or the listeners' stop that takes longer is left behind


@dataclass(frozen=True, slots=True)
class BrokerExposure:
    """Where the broker listens and how it is protected (`faces.Exposure`)."""

    address: str
    auth: bool
    tls: bool


class Broker:
    """One broker: its TCP listeners and connections, its faces, the engine and the store."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        store: TaskStore | None = None,
        faces: Sequence[Face] = (),
        extensions: Sequence[RequestExtension] = (),
    ) -> None:
        self.config = config
        self.extensions: list[RequestExtension] = list(extensions)
        self.labels: dict[str, str] = labels_of(self.extensions)
        self.max_frame = config.max_frame
        self._given_store = store
        names = [face.name for face in faces]
        if len(set(names)) != len(names):
            raise ValueError(f"two faces share a name: {', '.join(names)}")
        self.faces: list[Face] = list(faces)
        self.face_ports: dict[str, int] = {}  # by face name, once started
        self.store: TaskStore | None = None
        self.group: GroupCommit | None = None
        self.connections: set[Connection] = set()
        guarded = config.security.auth_file is not None  # without users, caps per user or address mean nothing
        self.connection_slots = ConnectionSlots(
            config.max_connections,
            per_address=config.max_unauthenticated_per_address if guarded else 0,
            per_user=config.max_connections_per_user if guarded else 0,
        )
        self.budget = ReadBudget(config.max_buffered_bytes, config.max_frame)
        self.timeouts = ConnectionTimeouts(
            lambda: self.connections, self.budget, config.frame_timeout_secs, config.idle_timeout_secs
        )
        self._server: asyncio.Server | None = None
        self._tls_server: asyncio.Server | None = None
        self.authenticator: Authenticator | None = None
        self.tls_port: int | None = None
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
                config.store_location, durability=config.durability, cache_mb=config.sqlite_cache_mb, broker=True,
                commit_log=config.commit_log == "on", checkpoint_secs=config.checkpoint_secs,
            )
        self.store = store

        id_class = id_class_of(self.extensions)

        def make_engine() -> Engine:
            return Engine(store, limits=config.limits, head_tasks=config.head_tasks, cache_bytes=config.cache_bytes,
                          id_class=id_class)

        self.started_at = time.time()
        group = GroupCommit(loop, store, make_engine, config.max_frame, extensions=self.extensions)
        cap, lowered = fit_to_open_files(config.max_connections, open_files_limit())
        self.connection_slots.limit = cap
        if lowered is not None:
            log.warning("%s", lowered)
        try:
            group.start(time.time())
            self._claim_store(store, group)
            share_port = True if is_shared(store) else None  # brokers of one schema may share an address
            if security.plaintext:
                self._server = await loop.create_server(
                    lambda: Connection(self), config.host, config.port, backlog=LISTEN_BACKLOG, reuse_port=share_port
                )
            if tls_context is not None:
                self._tls_server = await loop.create_server(
                    lambda: Connection(self), config.host, security.tls_port, backlog=LISTEN_BACKLOG,
                    ssl=tls_context, ssl_handshake_timeout=HANDSHAKE_TIMEOUT_SECS, reuse_port=share_port,
                )
        except BaseException:
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
        self._shared = announcements.listen(store, loop, group.wake)
        self._tick_handle = loop.call_later(SWEEP_SECS, self._tick)
        self.timeouts.start(loop)
        try:
            for face in self.faces:  # they read through the group commit, so they start last
                self.face_ports[face.name] = await face.start(self)
            for extension in self.extensions:
                await extension.start(self)
        except BaseException:
            await self.stop()
            raise
        ports = f", TLS on port {self.tls_port}" if self.tls_port is not None else ""
        ports += "".join(f", {face.name} on port {self.face_ports[face.name]}" for face in self.faces)
        plaintext = "" if self._server is not None else " (TLS only)"
        log.info("broker started on %s:%d%s%s (%s), %s%s",
                 self.host, self.port, plaintext, ports, exposure_note(self.host, security), self.store_description,
                 "".join(f", {extension.description}" for extension in self.extensions))
        for warning in self.exposure_warnings():
            log.warning("%s", warning)

    def _claim_store(self, store: TaskStore, group: GroupCommit) -> None:
        """Record who serves the store (a cluster node's extension says what), or refuse to start:
        a broker that is no node may not serve a store recorded as a node's (`engine.identity`)."""
        engine = group.passes.engine
        assert engine is not None  # started above
        marks = engine.state.marks
        where = f"the store ({self.store_description})"
        if not self.extensions:
            identity.refuse_unrecorded(marks, where)
            return
        holds_tasks = any(queue.size for queue in engine.state.queues.values())
        mutations = [m for extension in self.extensions for m in extension.claim_store(marks, holds_tasks, where)]
        if mutations:
            store.write(mutations)
            store.commit()
            for mutation in mutations:
                if isinstance(mutation, SetCounter):
                    marks[mutation.name] = mutation.value

    def exposure_warnings(self) -> list[str]:
        """What the binary port and every face warn about, given where the broker listens."""
        security = self.config.security
        exposure = BrokerExposure(self.host, security.auth_file is not None, security.tls)
        warnings = exposure_warnings(self.host, security)
        for face in self.faces:
            warnings.extend(face.exposure_warnings(exposure))
        return warnings

    def face_port(self, name: str) -> int | None:
        """The port of the face called `name`, once started; None when there is no such face."""
        return self.face_ports.get(name)

    # ------------------------------------------------------- the faces' host

    @property
    def accepting(self) -> bool:
        """Whether requests are still taken (False once stopping)."""
        return not self._stopping and self.group is not None

    @property
    def address(self) -> str:
        return self.host

    @property
    def limits(self) -> Limits:
        return self.config.limits

    @property
    def store_kind(self) -> str:
        return self.config.store_location.kind

    @property
    def read_budget(self) -> ReadBudget:
        return self.budget

    def withdraw(self, caller: Caller) -> None:
        if self.group is not None:
            self.group.drop_connection(caller)

    def reads(self) -> Engine | None:
        group = self.group
        return group.passes.engine if group is not None else None

    def wall_clock(self) -> float:
        group = self.group
        return group.passes.wall_clock() if group is not None else time.time()

    def on_commit(self, listener: CommitListener) -> Callable[[], None]:
        if self.group is None:
            raise RuntimeError("the broker has not started: faces listen to commits once started")
        return self.group.on_commit(listener)

    def ports(self) -> dict[str, int]:
        ports = {"port": self.port}
        if self.tls_port is not None:
            ports["tls_port"] = self.tls_port
        ports.update((f"{name}_port", port) for name, port in self.face_ports.items())
        return ports

    def connection_counts(self) -> dict[str, int]:
        counts = {"tcp": len(self.connections)}
        counts.update((face.name, face.connections()) for face in self.faces)
        return counts

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

    def admit(self, connection: Connection) -> str | None:
        if self._stopping:
            return "the broker is stopping"
        refusal = self.connection_slots.take(time.monotonic(), "binary", connection.source)
        if refusal is None:
            self.connections.add(connection)
        return refusal

    def admit_user(self, connection: Connection, user: str) -> str | None:
        return self.connection_slots.to_user(time.monotonic(), "binary", connection.source, user)

    def submit(self, connection: Caller, item: Request | bytes) -> None:
        if self.group is not None and not self._stopping:
            self.group.submit(connection, item)

    def resubmit(self, connection: Caller, items: list[Request | bytes]) -> None:
        if self.group is not None and not self._stopping:
            self.group.resubmit(connection, items)

    def end_waits(self, connection: Connection) -> None:
        if self.group is not None:
            self.group.end_waits(connection)

    def output_drained(self, connection: Connection) -> None:
        if self.group is not None and not self._stopping:
            self.group.wake_connection(connection)

    def open_session(self, connection: Connection) -> Session | None:
        if self.authenticator is None:
            return None
        return Session(self.authenticator, connection, self.config.security.auth_timeout_secs)

    def forget(self, connection: Connection) -> None:
        if connection in self.connections:
            self.connections.discard(connection)
            self.connection_slots.give_back(connection.source, connection.counted_user)
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
            for face in self.faces:
                self._quietly(face.stop_accepting, face.name)
            for connection in list(self.connections):
                connection.stop_reading()
            if self.group is not None:
                try:
                    self.group.finish()
                except Exception:
                    log.exception("closing the store failed")
            for connection in list(self.connections):
                connection.close()  # after the replies written above are flushed
            deadline = time.monotonic() + FLUSH_ON_STOP_SECS
            while self.connections and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            for connection in list(self.connections):
                if connection.transport is not None:
                    connection.transport.abort()
            for face in self.faces:
                try:
                    await _bounded(face.stop(), f"the {face.name} face")
                except Exception:
                    log.exception("stopping the %s face failed", face.name)
            for extension in self.extensions:
                try:
                    await _bounded(extension.stop(), extension.description)
                except Exception:
                    log.exception("stopping %s failed", extension.description)
            for server in (self._server, self._tls_server):
                if server is not None:
                    await _bounded(server.wait_closed(), "the listener's last connections")
            if self.authenticator is not None:
                self.authenticator.close()
            log.info("broker stopped")
        finally:
            self._stopped.set()


    @staticmethod
    def _quietly(step: Callable[[], None], name: str) -> None:
        try:
            step()
        except Exception:
            log.exception("stopping the %s face failed", name)


async def _bounded(step: Awaitable[object], what: str) -> None:
    """Await one step of a stop for at most `STOP_STEP_SECS`, then go on without it (logged): a
    SIGTERM must end the process whatever a face, an extension or a peer's connection does. Its
    error, if it failed in time, is raised."""
    task = asyncio.ensure_future(step)
    done, _ = await asyncio.wait({task}, timeout=STOP_STEP_SECS)
    if not done:
        task.cancel()
        log.warning("stopping: %s did not finish within %.0f s; going on without it", what, STOP_STEP_SECS)
        return
    task.result()


# ------------------------------------------------------------------ process


def open_files_limit() -> int:
    """The soft RLIMIT_NOFILE of this process: how many descriptors it may hold."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


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


def listening_of(broker: Broker) -> Listening:
    """What the listening line says about `broker`, once started."""
    config = broker.config
    security = config.security
    return Listening(
        host=broker.host, port=broker.port, store=broker.store_description, durability=config.durability,
        auth=bool(security.auth_file), plaintext=security.plaintext, tls_port=broker.tls_port,
        face_ports=dict(broker.face_ports),
    )


async def serve(
    config: BrokerConfig, faces: Sequence[Face] = (), extensions: Sequence[RequestExtension] = ()
) -> None:
    """Run a broker with `faces` and `extensions` until SIGTERM or SIGINT, then stop it cleanly."""
    loop = asyncio.get_running_loop()
    raise_open_files_limit()  # the broker fits its connection cap to what this allows
    signalled = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, signalled.set)
    broker = Broker(config, faces=faces, extensions=extensions)
    await broker.start()
    print(format_listening_line(listening_of(broker)), flush=True)
    try:
        await signalled.wait()
        log.info("signalled, stopping")
    finally:
        await broker.stop()


def run_broker(
    config: BrokerConfig, faces: Sequence[Face] = (), extensions: Sequence[RequestExtension] = ()
) -> int:
    """Run a broker with `faces` in this process until signalled; returns the exit status (0 after a clean stop)."""
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
        runner.run(serve(config, faces, extensions))
    return 0
