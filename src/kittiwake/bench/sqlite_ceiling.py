"""The bare ceiling `bench ops` holds explicit-pid enqueue against: asyncio + SQLite group commit.

`python -m kittiwake.bench.sqlite_ceiling --data DIR --host H --port P --durability fsync|os` is a
server that speaks one op of the wire protocol, `enqueue` (and `ping`), and does what any durable
queue must for it and nothing more: cut frames, decode the request, insert each task into one SQLite
table keyed by (queue, pid) — `INSERT OR IGNORE`, so a pid that exists collapses, as on the broker —
and answer once the commit that holds it is durable. It commits as the broker does: on its event
loop, one commit per pass, and requests that arrive while a commit runs ride the next pass; the same
pragmas (WAL, `synchronous=FULL` under fsync, `NORMAL` under os) and the same task row (the broker's
`tasks` table, `store.statements.SCHEMA`). No engine, head cache, rates, rights or budgets: the
broker's figure over this one is what its bookkeeping costs, on this disk, in the same run.

It prints the broker's listening line (`broker.listening`), so `testing.BrokerProcess(command=...)`
starts it like a broker. Any other op is answered `UNKNOWN_OP`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

from kittiwake import errors
from kittiwake.broker.listening import Listening, format_listening_line
from kittiwake.protocol import FrameReader, encode_frame
from kittiwake.protocol.replies import encode_error, encode_ok
from kittiwake.store.statements import SCHEMA

INSERT = ("INSERT OR IGNORE INTO tasks (queue, gen, pid, data, enqueued_at, sender, receiver, headers, max_attempts)"
          " VALUES (?, 0, ?, ?, ?, ?, ?, ?, ?)")


class _Task(msgspec.Struct):
    queue: str
    data: bytes
    pid: str | None = None
    sender: str | None = None
    receiver: str | None = None
    headers: dict[str, str] | None = None
    max_attempts: int | None = None


class _Request(msgspec.Struct):
    id: int
    op: str
    tasks: list[_Task] = []


_decode = msgspec.msgpack.Decoder(_Request).decode
_encode_headers = msgspec.msgpack.Encoder().encode


def open_database(data_dir: Path, durability: str) -> sqlite3.Connection:
    data_dir.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(data_dir / "ceiling.sqlite3", isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=" + ("FULL" if durability == "fsync" else "NORMAL"))
    db.execute("PRAGMA temp_store=MEMORY")
    db.execute("PRAGMA wal_autocheckpoint=4000")
    db.executescript(SCHEMA)
    return db


class Ceiling:
    """The passes: requests in, one commit, replies out."""

    def __init__(self, loop: asyncio.AbstractEventLoop, db: sqlite3.Connection) -> None:
        self.loop = loop
        self.db = db
        self.pending: list[tuple[_Connection, _Request]] = []
        self.scheduled = False

    def submit(self, connection: _Connection, request: _Request) -> None:
        self.pending.append((connection, request))
        if not self.scheduled:
            self.scheduled = True
            self.loop.call_soon(self.run_pass)

    def run_pass(self) -> None:
        self.scheduled = False
        batch, self.pending = self.pending, []
        try:
            replies = self._commit(batch, time.time())
        except Exception as exc:  # noqa: BLE001 - every request of the pass gets the error
            error = exc if isinstance(exc, errors.KittiwakeError) else errors.InternalError(str(exc))
            replies = [(connection, encode_error(request.id, error)) for connection, request in batch]
        for connection, body in replies:
            connection.write(body)

    def _commit(self, batch: list[tuple[_Connection, _Request]], now: float) -> list[tuple[_Connection, bytes]]:
        """Insert the pass's tasks in one transaction and commit: one `executemany`, and only when some
        pid existed (fewer rows changed than sent) each row again on its own to say which collapsed."""
        rows = [(task.queue, _pid(task), task.data, now, task.sender, task.receiver,
                 _encode_headers(task.headers) if task.headers else None, task.max_attempts)
                for _, request in batch for task in request.tasks]
        db = self.db
        db.execute("BEGIN")
        try:
            before = db.total_changes
            db.executemany(INSERT, rows)
            collapsed: list[bool] = [False] * len(rows)
            if db.total_changes - before != len(rows):
                db.execute("ROLLBACK")
                db.execute("BEGIN")
                collapsed = [db.execute(INSERT, row).rowcount == 0 for row in rows]
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        replies = []
        position = 0
        for connection, request in batch:
            outcomes = [{"queue": task.queue, "pid": task.pid, "collapsed": collapsed[position + index]}
                        for index, task in enumerate(request.tasks)]
            position += len(request.tasks)
            replies.append((connection, encode_ok(request.id, outcomes)))
        return replies


def _pid(task: _Task) -> str:
    if task.pid is None:
        raise errors.BadRequest("the ceiling takes tasks with a pid only")
    return task.pid


class _Connection(asyncio.Protocol):
    def __init__(self, ceiling: Ceiling) -> None:
        self.ceiling = ceiling
        self.reader = FrameReader()
        self.transport: Any = None  # an asyncio (or uvloop) stream transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            bodies = self.reader.feed(data)
        except errors.FrameTooLarge:
            self.close()
            return
        for body in bodies:
            try:
                request = _decode(body)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                self.write(encode_error(0, errors.MalformedFrame(str(exc))))
                continue
            if request.op == "enqueue":
                self.ceiling.submit(self, request)
            elif request.op == "ping":
                self.write(encode_ok(request.id, {"now": time.time()}))
            else:
                self.write(encode_error(request.id, errors.UnknownOperation(f"the ceiling speaks enqueue only, not {request.op!r}")))

    def write(self, body: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(encode_frame(body))

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


async def serve(data_dir: Path, host: str, port: int, durability: str) -> None:
    loop = asyncio.get_running_loop()
    ceiling = Ceiling(loop, open_database(data_dir, durability))
    server = await loop.create_server(lambda: _Connection(ceiling), host, port)
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    bound = server.sockets[0].getsockname()[1]
    line = format_listening_line(Listening(host=host, port=bound, store=f"data={data_dir}", durability=durability))
    print(line, flush=True)
    async with server:
        await stop.wait()
    ceiling.db.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kittiwake.bench.sqlite_ceiling", description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, type=Path, help="directory of the SQLite file")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--durability", choices=("fsync", "os"), default="fsync")
    options = parser.parse_args(argv)
    try:
        import uvloop  # the broker's loop where installed (`kittiwake[fast]`)

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    asyncio.run(serve(options.data, options.host, options.port, options.durability))
    return 0


if __name__ == "__main__":
    sys.exit(main())
