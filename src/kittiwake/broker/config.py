"""Broker settings: where the data lives, where to listen, how hard to sync, how much to hold.

One frozen dataclass, validated on construction so a bad setting fails at start
with a message naming it, never later under load. The published hard limits of
tasks and requests live in `kittiwake.model.Limits` and ride along here, so the
server and the engine read the same numbers. The faces (SQS, the dashboard,
UDP: `broker.faces`) own their settings; the broker's are what every port
shares.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kittiwake.broker.security import SecurityConfig
from kittiwake.model import Limits
from kittiwake.protocol import DEFAULT_MAX_FRAME
from kittiwake.store.location import StoreLocation, parse_store_url
from kittiwake.store.sqlite import DURABILITY_LEVELS

DEFAULT_PORT = 7370
DEFAULT_DATA_DIR = "./.kittiwake"
MIN_FRAME_BYTES = 64 * 1024  # smaller could not carry one task of default size limits
MAX_FRAME_BYTES = (1 << 32) - 1  # the length prefix is four bytes
MAX_TIMEOUT_SECS = 7 * 24 * 3600.0
DEFAULT_FRAME_TIMEOUT_SECS = 30.0
DEFAULT_IDLE_TIMEOUT_SECS = 600.0  # as Kafka's connections.max.idle.ms
DEFAULT_MAX_BUFFERED_MB = 256
COMMIT_LOG_MODES = ("on", "off")
MAX_CHECKPOINT_SECS = 3600.0
DEFAULT_MAX_CONNECTIONS_PER_USER = 2_500
DEFAULT_MAX_UNAUTHENTICATED_PER_ADDRESS = 256


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """Everything a broker process needs to start; `port=0` picks a free port."""

    data_dir: str = DEFAULT_DATA_DIR
    store_url: str | None = None  # sqlite://DIR or postgresql://…; None: SQLite in data_dir
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    durability: str = "fsync"  # "fsync": ok survives power loss; "os": survives a process crash
    commit_log: str = "off"  # "on": SQLite writes through a commit log (`store.commit_log`); "off": not
    checkpoint_secs: float = 1.0  # with the commit log: the database catches up at least this often
    max_frame: int = DEFAULT_MAX_FRAME
    max_connections: int = 10_000  # all ports together (binary, TLS, every face's)
    # with an auth file (`connection_slots`): one user's connections; connections no user is known for, per address
    max_connections_per_user: int = DEFAULT_MAX_CONNECTIONS_PER_USER
    max_unauthenticated_per_address: int = DEFAULT_MAX_UNAUTHENTICATED_PER_ADDRESS
    cache_mb: int = 256  # engine head cache
    head_tasks: int = 1000  # tasks per queue kept in memory ahead of leases
    sqlite_cache_mb: int = 64
    frame_timeout_secs: float = DEFAULT_FRAME_TIMEOUT_SECS  # a frame started must be whole by then
    idle_timeout_secs: float = DEFAULT_IDLE_TIMEOUT_SECS  # nothing in flight this long: closed; 0 = never
    max_buffered_mb: int = DEFAULT_MAX_BUFFERED_MB  # bytes of unfinished frames held across all connections
    limits: Limits = field(default_factory=Limits)
    security: SecurityConfig = field(default_factory=SecurityConfig)  # auth file, TLS, listeners

    def __post_init__(self) -> None:
        if not isinstance(self.data_dir, str) or not self.data_dir:
            raise ValueError("data_dir must be a non-empty path")
        if self.store_url is not None:
            parse_store_url(self.store_url)
        if not isinstance(self.host, str) or not self.host:
            raise ValueError("host must be a non-empty host name or address")
        _check_int("port", self.port, 0, 65535)
        if self.durability not in DURABILITY_LEVELS:
            raise ValueError(f"durability must be one of {', '.join(DURABILITY_LEVELS)}, got {self.durability!r}")
        if self.commit_log not in COMMIT_LOG_MODES:
            raise ValueError(f"commit_log must be one of {', '.join(COMMIT_LOG_MODES)}, got {self.commit_log!r}")
        if self.commit_log == "on" and self.store_location.kind != "sqlite":
            raise ValueError("the commit log is the SQLite store's: a PostgreSQL commit is one round trip to a "
                             "server that is durable on its own (see kittiwake.store.postgres)")
        _check_secs("checkpoint_secs", self.checkpoint_secs, MAX_CHECKPOINT_SECS, zero_allowed=True)
        _check_int("max_frame", self.max_frame, MIN_FRAME_BYTES, MAX_FRAME_BYTES)
        _check_int("max_connections", self.max_connections, 1, 1_000_000)
        _check_int("max_connections_per_user", self.max_connections_per_user, 0, 1_000_000)
        _check_int("max_unauthenticated_per_address", self.max_unauthenticated_per_address, 0, 1_000_000)
        _check_int("cache_mb", self.cache_mb, 1, 1 << 20)
        _check_int("head_tasks", self.head_tasks, 1, 1_000_000)
        _check_int("sqlite_cache_mb", self.sqlite_cache_mb, 1, 1 << 20)
        if not isinstance(self.security, SecurityConfig):
            raise ValueError("security must be a kittiwake.broker.security.SecurityConfig")
        _check_secs("frame_timeout_secs", self.frame_timeout_secs, MAX_TIMEOUT_SECS, zero_allowed=False)
        _check_secs("idle_timeout_secs", self.idle_timeout_secs, MAX_TIMEOUT_SECS, zero_allowed=True)
        _check_int("max_buffered_mb", self.max_buffered_mb, 1, 1 << 20)
        if self.max_buffered_bytes < self.max_frame:
            raise ValueError(
                f"max_buffered_mb ({self.max_buffered_mb} MiB) must hold at least one frame of max_frame "
                f"({self.max_frame} bytes)"
            )
        if not isinstance(self.limits, Limits):
            raise ValueError("limits must be a kittiwake.model.Limits")
        wait = self.limits.max_wait_secs
        if not (isinstance(wait, (int, float)) and math.isfinite(wait) and wait >= 0):
            raise ValueError("limits.max_wait_secs must be a finite number >= 0")

    @property
    def store_location(self) -> StoreLocation:
        """The store to open: `store_url`, or SQLite in `data_dir`."""
        if self.store_url is not None:
            return parse_store_url(self.store_url)
        return StoreLocation("sqlite", self.data_dir)

    @property
    def cache_bytes(self) -> int:
        return self.cache_mb * 1024 * 1024

    @property
    def max_buffered_bytes(self) -> int:
        return self.max_buffered_mb * 1024 * 1024


def _check_secs(name: str, value: object, high: float, *, zero_allowed: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a number of seconds, got {value!r}")
    low = "0" if zero_allowed else "above 0"
    if value < 0 or (value == 0 and not zero_allowed) or value > high:
        raise ValueError(f"{name} must be {low} and at most {high:g}, got {value:g}")


def _check_int(name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if not (low <= value <= high):
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")
