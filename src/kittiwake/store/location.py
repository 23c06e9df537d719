"""Where a broker keeps its tasks: a store URL, parsed, shown without secrets, and opened.

* `sqlite://DIR`: the embedded SQLite store in directory DIR (`sqlite:///var/lib/kw` is the
  absolute /var/lib/kw, `sqlite://data` the relative data); the same as `--data DIR`. One
  process at a time opens it (`directory_lock`).
* `postgresql://…` (or `postgres://…`): the PostgreSQL store, with libpq's URL syntax;
  `schema=NAME` among the query parameters picks the schema (default `kittiwake`);
  `brokers=one` (default) or `brokers=many` says whether a broker serves the schema alone
  or is one of several (`store.postgres`). Neither is passed on to libpq.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from kittiwake.store.postgres_statements import DEFAULT_SCHEMA, SCHEMA_NAME

SQLITE_PREFIX = "sqlite://"
TOOL_HOLDER = "a Kittiwake tool"  # how a tool that opens an SQLite directory is named to a refused opener
POSTGRES_SCHEMES = ("postgresql", "postgres")


@dataclass(frozen=True, slots=True)
class StoreLocation:
    kind: str  # "sqlite" or "postgresql"
    target: str  # the SQLite directory, or the libpq connection URL without `schema`
    schema: str = DEFAULT_SCHEMA  # PostgreSQL only
    brokers: str = "one"  # PostgreSQL only: "one" broker serves the schema, or "many"

    def describe(self) -> str:
        """How logs and the listening line name the store: no password."""
        if self.kind == "sqlite":
            return self.target
        parts = urlsplit(self.target)
        netloc = parts.netloc
        if "@" in netloc:
            user, _, host = netloc.rpartition("@")
            netloc = user.split(":", 1)[0] + "@" + host
        query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k != "password"])
        shared = " brokers=many" if self.brokers == "many" else ""
        return urlunsplit((parts.scheme, netloc, parts.path, query, "")) + f" schema={self.schema}{shared}"


def parse_store_url(url: object) -> StoreLocation:
    """The store a URL names; ValueError saying what is wrong otherwise."""
    if not isinstance(url, str) or not url.strip():
        raise ValueError("the store URL must be sqlite://DIR or postgresql://…")
    if url.startswith(SQLITE_PREFIX):
        directory = url[len(SQLITE_PREFIX):]
        if not directory:
            raise ValueError(f"{url!r} names no directory: sqlite:///absolute/dir or sqlite://relative/dir")
        return StoreLocation("sqlite", directory)
    scheme = url.split(":", 1)[0].lower()
    if scheme not in POSTGRES_SCHEMES:
        raise ValueError(f"unknown store URL {url.split('://', 1)[0]!r}://…: use sqlite://DIR or postgresql://…")
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = _one_param(query, "schema", DEFAULT_SCHEMA)
    if not SCHEMA_NAME.fullmatch(schema):
        raise ValueError(f"schema must be a lower-case SQL name ([a-z_][a-z0-9_]*, at most 63), got {schema!r}")
    brokers = _one_param(query, "brokers", "one")
    if brokers not in ("one", "many"):
        raise ValueError(f"brokers must be one or many, got {brokers!r}")
    rest = urlencode([(key, value) for key, value in query if key not in ("schema", "brokers")])
    target = urlunsplit((parts.scheme, parts.netloc, parts.path, rest, parts.fragment))
    return StoreLocation("postgresql", target, schema, brokers)


def _one_param(query: list[tuple[str, str]], name: str, default: str) -> str:
    values = [value for key, value in query if key == name]
    if len(values) > 1:
        raise ValueError(f"the store URL names {name}= more than once")
    return values[0] if values else default


def open_store(
    location: StoreLocation, *, durability: str = "fsync", cache_mb: int = 64, broker: bool = False,
    holder: str | None = None, commit_log: bool = False, checkpoint_secs: float | None = None,
    allow_unfinished_copy: bool = False,
):
    """Open (creating or upgrading its schema) the store at `location`; `cache_mb`: SQLite's page cache;
    `broker`: for a broker to serve (PostgreSQL then takes the broker's presence), not for a tool.

    An SQLite directory is locked until the store is closed, for a broker and a tool alike
    (`directory_lock`): a directory another opener holds raises `DirectoryInUse` (a ValueError, code
    STORE_IN_USE) naming its pid and `holder` — what this opener is, "broker" for a broker and
    TOOL_HOLDER unless a tool says ("kittiwake copy"). `commit_log`: SQLite writes through its commit log
    (`store.commit_log`), its database catching up at least every `checkpoint_secs`; whatever it says,
    opening an SQLite directory replays a log left in it. A store a `kittiwake copy` into did not finish
    raises `errors.CopyUnfinished` (`copy_marker`) unless `allow_unfinished_copy` (the copy into it)."""
    if location.kind == "sqlite":
        from kittiwake.store.directory_lock import BROKER
        from kittiwake.store.sqlite import SqliteStore

        holder = BROKER if broker else holder or TOOL_HOLDER
        from kittiwake.store.sqlite import CHECKPOINT_SECS

        return SqliteStore(location.target, durability=durability, cache_mb=cache_mb, holder=holder,
                           commit_log=commit_log, allow_unfinished_copy=allow_unfinished_copy,
                           checkpoint_secs=CHECKPOINT_SECS if checkpoint_secs is None else checkpoint_secs)
    from kittiwake.store.postgres import PostgresStore

    return PostgresStore(
        location.target, schema=location.schema, durability=durability, brokers=location.brokers if broker else None,
        allow_unfinished_copy=allow_unfinished_copy,
    )
