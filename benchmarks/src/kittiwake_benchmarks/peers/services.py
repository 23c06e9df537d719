"""The services the peers need — a Redis database, a PostgreSQL schema — checked, claimed and emptied.

Redis. The Redis peers share one database of their own (`--redis-url`, db 12
by default) and run one after another: it is emptied before and after each
(every key but the claim), never with FLUSHALL. Two runs on one machine must
not empty each other's queues, so a run first claims the database with a
key holding `<host>:<pid>`; a claim whose process is gone is taken over, a
live one makes the Redis peers skip with that reason.

PostgreSQL. pgqueuer's tables, types, functions and triggers go into a
schema of this run's own (`kittiwake_bench_peers_<pid>`), created here,
filled by `pgq install` (pgqueuer's own tool) and dropped at the end;
schemas left behind by runs that no longer exist are dropped first.

Both say how durable an acknowledged enqueue is on this server (Redis:
append-only file and its fsync policy, RDB save points; PostgreSQL: fsync and
synchronous_commit), since the figures mean little without it.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
from typing import Any, Mapping
from urllib.parse import urlsplit

from kittiwake_benchmarks.settings import PEERS_SCHEMA_PREFIX

CLAIM_KEY = "kittiwake-bench-peers:claim"
CLAIM_SECS = 6 * 3600  # a claim outlives any run; a run that died is noticed by its pid
CONNECT_TIMEOUT_SECS = 3.0
DELETE_BATCH = 1000


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _reason(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# ------------------------------------------------------------------ Redis


class RedisDatabase:
    """One Redis database, claimed by this run for the Redis peers."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.owner = f"{socket.gethostname()}:{os.getpid()}"
        self.client: Any = None
        self.claimed = False
        self.problem: str | None = None  # why the Redis peers cannot run, once `claim` said so
        parts = urlsplit(url)
        self.where = f"{parts.hostname or '127.0.0.1'}:{parts.port or 6379}{parts.path or '/0'}"

    def claim(self) -> str | None:
        """Connect and claim the database; None, or why the Redis peers must skip."""
        try:
            from redis import Redis
        except ImportError:
            self.problem = "the redis package is not installed (pip install kittiwake[peers])"
            return self.problem
        try:
            self.client = Redis.from_url(self.url, socket_timeout=CONNECT_TIMEOUT_SECS * 3,
                                         socket_connect_timeout=CONNECT_TIMEOUT_SECS)
            self.client.ping()
            if not self.client.set(CLAIM_KEY, self.owner, nx=True, ex=CLAIM_SECS):
                holder = (self.client.get(CLAIM_KEY) or b"").decode(errors="replace")
                host, _, pid = holder.rpartition(":")
                if host == socket.gethostname() and pid.isdigit() and not _pid_alive(int(pid)):
                    self.client.set(CLAIM_KEY, self.owner, ex=CLAIM_SECS)  # its run is gone
                elif holder:
                    self.problem = f"Redis database {self.where} is in use by another run ({holder})"
                    return self.problem
                else:
                    self.client.set(CLAIM_KEY, self.owner, ex=CLAIM_SECS)
        except Exception as exc:  # unreachable, refused, wrong password: the peers say why
            self.problem = f"Redis at {self.where} is unreachable ({_reason(exc)})"
            return self.problem
        self.claimed = True
        return None

    def empty(self) -> int:
        """Delete every key of the database but the claim; how many went."""
        if not self.claimed:
            return 0
        deleted = 0
        batch: list[bytes] = []
        for key in self.client.scan_iter(count=DELETE_BATCH):
            if key != CLAIM_KEY.encode():
                batch.append(key)
            if len(batch) >= DELETE_BATCH:
                deleted += self.client.delete(*batch)
                batch = []
        if batch:
            deleted += self.client.delete(*batch)
        return deleted

    def release(self) -> None:
        """Empty the database and give up the claim (if it is still ours)."""
        if not self.claimed:
            return
        try:
            self.empty()
            if (self.client.get(CLAIM_KEY) or b"").decode() == self.owner:
                self.client.delete(CLAIM_KEY)
        finally:
            self.claimed = False
            self.client.close()

    def describe(self) -> tuple[str, bool | None]:
        """The server and what an acknowledged write survives: (text, durable across a power cut)."""
        try:
            version = self.client.info("server").get("redis_version", "?")
        except Exception:
            version = "?"
        try:
            config = {**self.client.config_get("appendonly"), **self.client.config_get("appendfsync"),
                      **self.client.config_get("save")}
        except Exception:  # CONFIG may be disabled on a managed server
            return f"Redis {version} at {self.where}, persistence unknown", None
        if config.get("appendonly") == "yes":
            policy = config.get("appendfsync", "?")
            return f"Redis {version} at {self.where}, append-only file, appendfsync {policy}", policy == "always"
        saves = config.get("save") or ""
        if saves.strip():
            return f"Redis {version} at {self.where}, RDB snapshots only (save {saves})", False
        return f"Redis {version} at {self.where}, in memory only (no append-only file, no snapshots)", False


# ------------------------------------------------------------- PostgreSQL


class PostgresSchema:
    """A schema of this run's own in one PostgreSQL database, for pgqueuer's objects."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.schema = f"{PEERS_SCHEMA_PREFIX}{os.getpid()}"
        self.created = False
        parts = urlsplit(dsn)
        self.where = f"{parts.hostname or 'localhost'}:{parts.port or 5432}{parts.path or ''}"

    def _run(self, statements: Any) -> Any:
        return asyncio.run(statements)

    async def _connect(self) -> Any:
        import asyncpg

        return await asyncpg.connect(self.dsn, timeout=CONNECT_TIMEOUT_SECS)

    def create(self) -> str | None:
        """Drop the schemas of runs that are gone and create this run's; None, or why pgqueuer must skip."""
        try:
            import asyncpg  # noqa: F401
        except ImportError:
            return "asyncpg is not installed (pip install kittiwake[peers])"

        async def create() -> None:
            connection = await self._connect()
            try:
                rows = await connection.fetch(
                    "select nspname from pg_namespace where nspname like $1", PEERS_SCHEMA_PREFIX + "%")
                for row in rows:
                    match = re.fullmatch(re.escape(PEERS_SCHEMA_PREFIX) + r"(\d+)", row["nspname"])
                    if match and (int(match.group(1)) == os.getpid() or not _pid_alive(int(match.group(1)))):
                        await connection.execute(f'drop schema if exists "{row["nspname"]}" cascade')
                await connection.execute(f'create schema "{self.schema}"')
            finally:
                await connection.close()

        try:
            self._run(create())
        except Exception as exc:
            return f"PostgreSQL at {self.where} is unreachable or refused ({_reason(exc)})"
        self.created = True
        return None

    def install(self, python: str, env: Mapping[str, str]) -> str | None:
        """`pgq install` into the schema; None, or what it said when it failed."""
        done = subprocess.run([python, "-m", "pgqueuer", "install"], env=dict(env), capture_output=True, text=True,
                              timeout=120)
        if done.returncode != 0:
            return f"pgq install failed (exit code {done.returncode}): {(done.stderr or done.stdout)[-1000:]}"
        return None

    def describe(self) -> tuple[str, bool | None]:
        async def settings() -> tuple[str, str, str]:
            connection = await self._connect()
            try:
                return (await connection.fetchval("show server_version"), await connection.fetchval("show fsync"),
                        await connection.fetchval("show synchronous_commit"))
            finally:
                await connection.close()

        try:
            version, fsync, synchronous_commit = self._run(settings())
        except Exception:
            return f"PostgreSQL at {self.where}", None
        durable = fsync == "on" and synchronous_commit in ("on", "remote_write", "remote_apply", "local")
        return (f"PostgreSQL {version.split()[0]} at {self.where}, fsync {fsync}, "
                f"synchronous_commit {synchronous_commit}"), durable

    def drop(self) -> None:
        if not self.created:
            return

        async def drop() -> None:
            connection = await self._connect()
            try:
                await connection.execute(f'drop schema if exists "{self.schema}" cascade')
            finally:
                await connection.close()

        self._run(drop())
        self.created = False
