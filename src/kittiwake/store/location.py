"""Where a broker keeps its tasks: a store URL, parsed, shown without secrets, and opened.

* `sqlite://DIR`: the embedded SQLite store in directory DIR (`sqlite:///var/lib/kw` is the
  absolute /var/lib/kw, `sqlite://data` the relative data); the same as `--data DIR`.
* `postgresql://…` (or `postgres://…`): the PostgreSQL store, with libpq's URL syntax;
  `schema=NAME` among the query parameters picks the schema (default `kittiwake`) and is
  not passed on to libpq.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from kittiwake.store.postgres_statements import DEFAULT_SCHEMA, SCHEMA_NAME

SQLITE_PREFIX = "sqlite://"
POSTGRES_SCHEMES = ("postgresql", "postgres")


@dataclass(frozen=True, slots=True)
class StoreLocation:
    kind: str  # "sqlite" or "postgresql"
    target: str  # the SQLite directory, or the libpq connection URL without `schema`
    schema: str = DEFAULT_SCHEMA  # PostgreSQL only

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
        return urlunsplit((parts.scheme, netloc, parts.path, query, "")) + f" schema={self.schema}"


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
    schemas = [value for key, value in query if key == "schema"]
    if len(schemas) > 1:
        raise ValueError("the store URL names schema= more than once")
    schema = schemas[0] if schemas else DEFAULT_SCHEMA
    if not SCHEMA_NAME.fullmatch(schema):
        raise ValueError(f"schema must be a lower-case SQL name ([a-z_][a-z0-9_]*, at most 63), got {schema!r}")
    rest = urlencode([(key, value) for key, value in query if key != "schema"])
    return StoreLocation("postgresql", urlunsplit((parts.scheme, parts.netloc, parts.path, rest, parts.fragment)), schema)


def open_store(location: StoreLocation, *, durability: str = "fsync", cache_mb: int = 64):
    """Open (creating or upgrading its schema) the store at `location`; `cache_mb`: SQLite's page cache."""
    if location.kind == "sqlite":
        from kittiwake.store.sqlite import SqliteStore

        return SqliteStore(location.target, durability=durability, cache_mb=cache_mb)
    from kittiwake.store.postgres import PostgresStore

    return PostgresStore(location.target, schema=location.schema, durability=durability)
