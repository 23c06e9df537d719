"""Every SQL statement of the PostgreSQL store, in one place.

The tables, columns and indexes are those of the SQLite store
(`statements`): one row per task keyed by (queue, gen, pid), edges, queue
generations, per-queue sizes and pid high-water marks, broker-wide counters.
Differences: names and pids are `text COLLATE "C"` so they compare bytewise
as in SQLite; `note` is `bytea` holding UTF-8, because a worker's note may
hold NUL, which PostgreSQL text cannot; times are float8, counts bigint.

Every write statement takes one array per column and applies a whole run of
mutations of one kind (`unnest`), so a flush is a handful of statements sent
in one pipeline. Their parameters are sent in binary (`%b`): no text escaping
of each task's bytes, and no parsing of the text on the server. Puts and deletes keep `queue_sizes` in the same statement
(a data-modifying CTE), so the sizes are exact and kept by the server.

The statements name no schema: the store sets `search_path` to its own.
`schema_version` holds the version; `MIGRATIONS[v]` takes version v - 1 to v.

Several brokers (version 2): `queue_versions` holds, per queue, the version
its last committing broker wrote (the `postgres` module says how the versions and
the advisory locks keep each broker's cache right); `broker_incarnations`
numbers broker starts, so that no two commits ever write the same version.
"""

import re

from kittiwake.model import FIFO_PID_DIGITS

DEFAULT_SCHEMA = "kittiwake"
SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")  # lower case: no quoting surprises in psql

SCHEMA_VERSION = 2

_FIFO = f"'^[0-9]{{{FIFO_PID_DIGITS}}}$'"

VERSION_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_version ("
    "only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row), version integer NOT NULL)"
)
LOAD_VERSION = "SELECT version FROM schema_version"
SET_VERSION = (
    "INSERT INTO schema_version (only_row, version) VALUES (true, %s) "
    "ON CONFLICT (only_row) DO UPDATE SET version = excluded.version"
)

MIGRATIONS: dict[int, list[str]] = {
    1: [
        """CREATE TABLE tasks (
            queue text COLLATE "C" NOT NULL,
            gen bigint NOT NULL,
            pid text COLLATE "C" NOT NULL,
            data bytea NOT NULL,
            enqueued_at float8 NOT NULL,
            sender text COLLATE "C",
            receiver text COLLATE "C",
            headers bytea,
            max_attempts bigint,
            attempts bigint NOT NULL DEFAULT 0,
            deliveries bigint NOT NULL DEFAULT 0,
            lease_id bigint NOT NULL DEFAULT 0,
            lease_owner text,
            lease_peer text,
            leased_at float8,
            lease_expires_at float8,
            waiting_on bigint NOT NULL DEFAULT 0,
            children bigint NOT NULL DEFAULT 0,
            progress float8,
            note bytea,
            PRIMARY KEY (queue, gen, pid)
        )""",
        """CREATE TABLE edges (
            queue text COLLATE "C" NOT NULL,
            pid text COLLATE "C" NOT NULL,
            child_queue text COLLATE "C" NOT NULL,
            child_pid text COLLATE "C" NOT NULL,
            PRIMARY KEY (queue, pid, child_queue, child_pid)
        )""",
        "CREATE INDEX tasks_by_sender ON tasks (sender, queue, pid) WHERE sender IS NOT NULL",
        "CREATE INDEX tasks_by_receiver ON tasks (receiver, queue) WHERE receiver IS NOT NULL",
        "CREATE INDEX tasks_leased ON tasks (lease_expires_at) WHERE lease_expires_at IS NOT NULL",
        "CREATE INDEX tasks_blocked ON tasks (queue, gen) WHERE waiting_on > 0",
        'CREATE TABLE generations (queue text COLLATE "C" PRIMARY KEY, gen bigint NOT NULL)',
        """CREATE TABLE queue_sizes (
            queue text COLLATE "C" NOT NULL,
            gen bigint NOT NULL,
            size bigint NOT NULL,
            max_pid text COLLATE "C" NOT NULL,
            max_fifo_pid text COLLATE "C",
            PRIMARY KEY (queue, gen)
        )""",
        'CREATE TABLE counters (name text COLLATE "C" PRIMARY KEY, value bigint NOT NULL)',
    ],
    2: [
        'CREATE TABLE queue_versions (queue text COLLATE "C" PRIMARY KEY, version bigint NOT NULL)',
        "CREATE SEQUENCE broker_incarnations",
        # a queue's running leases, read when another broker changed the queue
        "CREATE INDEX tasks_leased_by_queue ON tasks (queue, gen) WHERE lease_expires_at IS NOT NULL",
    ],
}

TASK_COLUMNS = (
    "queue, pid, data, enqueued_at, sender, receiver, headers, max_attempts, attempts, deliveries, "
    "lease_id, lease_owner, lease_peer, leased_at, lease_expires_at, waiting_on, children, progress, note"
)
_T_COLUMNS = ", ".join("t." + name.strip() for name in TASK_COLUMNS.split(","))

# ------------------------------------------------------------------ writes (one per run)

PUT_TASKS = (
    "WITH put AS (INSERT INTO tasks (queue, gen, pid, data, enqueued_at, sender, receiver, headers, "
    "max_attempts, attempts, deliveries, lease_id, lease_owner, lease_peer, leased_at, lease_expires_at, "
    "waiting_on, children, progress, note) "
    "SELECT * FROM unnest(%b::text[], %b::bigint[], %b::text[], %b::bytea[], %b::float8[], %b::text[], "
    "%b::text[], %b::bytea[], %b::bigint[], %b::bigint[], %b::bigint[], %b::bigint[], %b::text[], %b::text[], "
    "%b::float8[], %b::float8[], %b::bigint[], %b::bigint[], %b::float8[], %b::bytea[]) "
    "ON CONFLICT (queue, gen, pid) DO UPDATE SET data = excluded.data, enqueued_at = excluded.enqueued_at, "
    "sender = excluded.sender, receiver = excluded.receiver, headers = excluded.headers, "
    "max_attempts = excluded.max_attempts, attempts = excluded.attempts, deliveries = excluded.deliveries, "
    "lease_id = excluded.lease_id, lease_owner = excluded.lease_owner, lease_peer = excluded.lease_peer, "
    "leased_at = excluded.leased_at, lease_expires_at = excluded.lease_expires_at, "
    "waiting_on = excluded.waiting_on, children = excluded.children, progress = excluded.progress, "
    "note = excluded.note "
    "RETURNING queue, gen, pid, (xmax = 0) AS inserted) "
    "INSERT INTO queue_sizes (queue, gen, size, max_pid, max_fifo_pid) "
    "SELECT queue, gen, count(*) FILTER (WHERE inserted), max(pid), max(pid) FILTER (WHERE pid ~ " + _FIFO + ") "
    "FROM put GROUP BY queue, gen "
    "ON CONFLICT (queue, gen) DO UPDATE SET size = queue_sizes.size + excluded.size, "
    "max_pid = greatest(queue_sizes.max_pid, excluded.max_pid), "
    "max_fifo_pid = greatest(queue_sizes.max_fifo_pid, excluded.max_fifo_pid)"
)

DELETE_TASKS = (
    "WITH gone AS (DELETE FROM tasks t USING unnest(%b::text[], %b::bigint[], %b::text[]) AS k(queue, gen, pid) "
    "WHERE t.queue = k.queue AND t.gen = k.gen AND t.pid = k.pid RETURNING t.queue, t.gen) "
    "UPDATE queue_sizes s SET size = s.size - c.n "
    "FROM (SELECT queue, gen, count(*) AS n FROM gone GROUP BY queue, gen) AS c "
    "WHERE s.queue = c.queue AND s.gen = c.gen"
)

FORGET_EMPTY_QUEUE_SIZES = (
    "DELETE FROM queue_sizes s USING unnest(%b::text[], %b::bigint[]) AS k(queue, gen) "
    "WHERE s.queue = k.queue AND s.gen = k.gen AND s.size <= 0"
)

SET_LEASES = (
    "UPDATE tasks t SET attempts = k.attempts, deliveries = k.deliveries, lease_id = k.lease_id, "
    "lease_owner = k.lease_owner, lease_peer = k.lease_peer, leased_at = k.leased_at, "
    "lease_expires_at = k.lease_expires_at, progress = k.progress, note = k.note "
    "FROM unnest(%b::text[], %b::bigint[], %b::text[], %b::bigint[], %b::bigint[], %b::bigint[], %b::text[], "
    "%b::text[], %b::float8[], %b::float8[], %b::float8[], %b::bytea[]) "
    "AS k(queue, gen, pid, attempts, deliveries, lease_id, lease_owner, lease_peer, leased_at, "
    "lease_expires_at, progress, note) "
    "WHERE t.queue = k.queue AND t.gen = k.gen AND t.pid = k.pid"
)

SET_WAITING = (
    "UPDATE tasks t SET waiting_on = k.waiting_on, children = k.children "
    "FROM unnest(%b::text[], %b::bigint[], %b::text[], %b::bigint[], %b::bigint[]) "
    "AS k(queue, gen, pid, waiting_on, children) "
    "WHERE t.queue = k.queue AND t.gen = k.gen AND t.pid = k.pid"
)

SET_COUNTERS = (
    "INSERT INTO counters (name, value) SELECT name, max(value) "
    "FROM unnest(%b::text[], %b::bigint[]) AS k(name, value) GROUP BY name "
    "ON CONFLICT (name) DO UPDATE SET value = greatest(counters.value, excluded.value)"
)

PUT_EDGES = (
    "INSERT INTO edges (queue, pid, child_queue, child_pid) "
    "SELECT * FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[]) ON CONFLICT DO NOTHING"
)

DELETE_EDGES = (
    "DELETE FROM edges e USING unnest(%b::text[], %b::text[]) AS k(queue, pid) "
    "WHERE e.queue = k.queue AND e.pid = k.pid"
)

SET_GENERATION = (
    "INSERT INTO generations (queue, gen) VALUES (%s, %s) ON CONFLICT (queue) DO UPDATE SET gen = excluded.gen"
)

DROP_QUEUE_SIZES = "DELETE FROM queue_sizes WHERE queue = %s AND gen < %s"

# ------------------------------------------------------------------ reads

LOAD_GENERATIONS = "SELECT queue, gen FROM generations"

LOAD_AVAILABLE = (
    "SELECT " + TASK_COLUMNS + " FROM tasks WHERE queue = %(queue)s AND gen = %(gen)s AND pid > %(after)s "
    "AND waiting_on = 0 AND (lease_expires_at IS NULL OR lease_expires_at <= %(now)s) ORDER BY pid LIMIT %(limit)s"
)

LOAD_TASK = "SELECT " + TASK_COLUMNS + " FROM tasks WHERE queue = %(queue)s AND gen = %(gen)s AND pid = %(pid)s"

SCAN_FROM = (
    "SELECT " + TASK_COLUMNS + " FROM tasks WHERE queue = %(queue)s AND gen = %(gen)s AND pid >= %(from)s "
    "ORDER BY pid LIMIT %(limit)s"
)

SCAN_AFTER = (
    "SELECT " + TASK_COLUMNS + " FROM tasks WHERE queue = %(queue)s AND gen = %(gen)s AND pid > %(after)s "
    "ORDER BY pid LIMIT %(limit)s"
)

PARENTS_IN = "SELECT DISTINCT pid FROM edges WHERE queue = %s ORDER BY pid"

CHILDREN_OF = "SELECT child_queue, child_pid FROM edges WHERE queue = %s AND pid = %s ORDER BY child_queue, child_pid"

# the current generation of a row: the one in `generations`, or 0 for a queue never dropped
_CURRENT = "LEFT JOIN generations g ON g.queue = t.queue WHERE t.gen = coalesce(g.gen, 0)"

FIND_BY_SENDER = (
    "SELECT " + _T_COLUMNS + " FROM tasks t " + _CURRENT + " AND t.sender = %s ORDER BY t.queue, t.pid LIMIT %s"
)

FIND_BY_SENDER_AFTER = (
    "SELECT " + _T_COLUMNS + " FROM tasks t " + _CURRENT + " AND t.sender = %s AND (t.queue, t.pid) > (%s, %s) "
    "ORDER BY t.queue, t.pid LIMIT %s"
)

FIND_BY_SENDER_IN_QUEUE = (
    "SELECT " + TASK_COLUMNS + " FROM tasks WHERE sender = %(sender)s AND queue = %(queue)s AND gen = %(gen)s "
    "ORDER BY pid LIMIT %(limit)s"
)

QUEUES_FOR_RECEIVER = "SELECT DISTINCT t.queue FROM tasks t " + _CURRENT + " AND t.receiver = %s ORDER BY t.queue"

# start-up reads: one row per live queue, then only blocked and leased tasks (partial indexes)
QUEUE_SUMMARIES = (
    "SELECT t.queue, t.size, t.max_pid, t.max_fifo_pid FROM queue_sizes t " + _CURRENT + " AND t.size > 0 "
    "ORDER BY t.queue"
)

BLOCKED_COUNTS = "SELECT t.queue, count(*) FROM tasks t " + _CURRENT + " AND t.waiting_on > 0 GROUP BY t.queue"

HELD_LEASES = "SELECT " + _T_COLUMNS + " FROM tasks t " + _CURRENT + " AND t.lease_expires_at IS NOT NULL"

LOAD_COUNTERS = "SELECT name, value FROM counters"

# ------------------------------------------------------------------ upkeep

REAP_STALE_ROWS = (
    "DELETE FROM tasks t USING (SELECT s.queue, s.gen, s.pid FROM generations g "
    "JOIN tasks s ON s.queue = g.queue AND s.gen < g.gen LIMIT %s) AS old "
    "WHERE t.queue = old.queue AND t.gen = old.gen AND t.pid = old.pid"
)

# Forgetting the generations of queues that hold no row, in three statements. A generation is
# forgotten only while the reap holds its queue's lock (tried, never waited for): another broker
# holding it may be writing the queue's first rows of that generation. One statement that filtered
# on the lock was wrong twice: the planner pushed the lock down onto the scan of `generations`, so
# every reap locked every queue with a generation row (past ~10,000 of them the server's lock table
# ran out and every pass failed), and its snapshot, taken before the locks, missed a broker's rows
# committed meanwhile (the queue's generation was forgotten under an acknowledged task).
EMPTY_GENERATION_CANDIDATES = (
    "SELECT g.queue FROM generations g WHERE NOT EXISTS (SELECT 1 FROM tasks t WHERE t.queue = g.queue) "
    "LIMIT %s"
)
# only the candidates, each tried
TRY_LOCK_QUEUES = "SELECT q FROM unnest(%s::text[]) AS q WHERE pg_try_advisory_xact_lock(%s, hashtext(q))"
# a statement of its own, after the locks: READ COMMITTED takes its snapshot when it starts
FORGET_EMPTY_GENERATIONS = (
    "DELETE FROM generations g WHERE g.queue = ANY(%s::text[]) "
    "AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.queue = g.queue) RETURNING g.queue"
)

# ------------------------------------------------------------------ several brokers (see `postgres`)

# transaction-level advisory locks, one per queue, keyed (schema, queue): taken in key order, so two
# brokers locking overlapping sets in one statement each never wait on each other in a cycle
LOCK_QUEUES = (
    "SELECT count(pg_advisory_xact_lock(%s, k)) FROM "
    "(SELECT DISTINCT hashtext(q) AS k FROM unnest(%s::text[]) AS q ORDER BY k) AS keys"
)

# run after LOCK_QUEUES, as a statement of its own: READ COMMITTED takes a statement's snapshot when it
# starts, and the locks may have waited for another broker's commit
QUEUE_VERSIONS = (
    "SELECT k.q, v.version, coalesce(g.gen, 0) FROM unnest(%s::text[]) AS k(q) "
    "LEFT JOIN queue_versions v ON v.queue = k.q LEFT JOIN generations g ON g.queue = k.q"
)

SET_QUEUE_VERSIONS = (
    "INSERT INTO queue_versions (queue, version) SELECT q, %s FROM unnest(%s::text[]) AS q "
    "ON CONFLICT (queue) DO UPDATE SET version = excluded.version"
)

NEXT_INCARNATION = "SELECT nextval('broker_incarnations')"

_IN_QUEUES = " AND t.queue = ANY(%s::text[])"

QUEUE_SUMMARIES_OF = (
    "SELECT t.queue, t.size, t.max_pid, t.max_fifo_pid FROM queue_sizes t " + _CURRENT + " AND t.size > 0" + _IN_QUEUES
)

BLOCKED_COUNTS_OF = (
    "SELECT t.queue, count(*) FROM tasks t " + _CURRENT + " AND t.waiting_on > 0" + _IN_QUEUES + " GROUP BY t.queue"
)

HELD_LEASES_OF = "SELECT " + _T_COLUMNS + " FROM tasks t " + _CURRENT + " AND t.lease_expires_at IS NOT NULL" + _IN_QUEUES

# queues with a lease that ran out, whichever broker granted it (tasks_leased)
EXPIRED_LEASE_QUEUES = (
    "SELECT DISTINCT queue FROM (SELECT queue FROM tasks WHERE lease_expires_at <= %s "
    "ORDER BY lease_expires_at LIMIT %s) AS expired"
)

NOTIFY = "SELECT pg_notify(%s, %s)"
