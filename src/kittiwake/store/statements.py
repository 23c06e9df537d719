"""Every SQL statement of the SQLite store, in one place.

The schema keeps one row per task keyed by (queue, gen, pid); `gen` is the
queue's generation, bumped by delete_queue so a drop is one row write and the
old rows are reaped later in small chunks. Partial indexes cover the Paštas
look-ups (by sender, by receiver), running leases and blocked tasks, and cost
nothing for tasks that have no sender, receiver, lease or parent.

Recovery reads no task row it does not need: `queue_sizes` holds each live
queue's size and pid high-water marks, kept by the store in the same
transaction as the rows — one upsert per queue per flush, from the task rows
the flush put and deleted (the engine puts only new pids, so a put is one
task more); `counters` holds the
engine's broker-wide high-water marks (`SetCounter`). `PRAGMA user_version`
is the schema version: a database of version 0 gets the tables and one
backfill scan when it is first opened by this version.
"""

SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    queue TEXT NOT NULL,
    gen INTEGER NOT NULL,
    pid TEXT NOT NULL,
    data BLOB NOT NULL,
    enqueued_at REAL NOT NULL,
    sender TEXT,
    receiver TEXT,
    headers BLOB,
    max_attempts INTEGER,
    attempts INTEGER NOT NULL DEFAULT 0,
    deliveries INTEGER NOT NULL DEFAULT 0,
    lease_id INTEGER NOT NULL DEFAULT 0,
    lease_owner TEXT,
    lease_peer TEXT,
    leased_at REAL,
    lease_expires_at REAL,
    waiting_on INTEGER NOT NULL DEFAULT 0,
    children INTEGER NOT NULL DEFAULT 0,
    progress REAL,
    note TEXT,
    PRIMARY KEY (queue, gen, pid)
);
CREATE TABLE IF NOT EXISTS edges (
    queue TEXT NOT NULL,
    pid TEXT NOT NULL,
    child_queue TEXT NOT NULL,
    child_pid TEXT NOT NULL,
    PRIMARY KEY (queue, pid, child_queue, child_pid)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tasks_by_sender ON tasks (sender, queue, pid) WHERE sender IS NOT NULL;
CREATE INDEX IF NOT EXISTS tasks_by_receiver ON tasks (receiver, queue) WHERE receiver IS NOT NULL;
CREATE INDEX IF NOT EXISTS tasks_leased ON tasks (lease_expires_at) WHERE lease_expires_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS generations (
    queue TEXT PRIMARY KEY,
    gen INTEGER NOT NULL
) WITHOUT ROWID;
"""

# version 1: recovery in O(live queues) instead of a scan of every row
SCHEMA_V1 = """
CREATE TABLE IF NOT EXISTS queue_sizes (
    queue TEXT NOT NULL,
    gen INTEGER NOT NULL,
    size INTEGER NOT NULL,
    max_pid TEXT NOT NULL,
    max_fifo_pid TEXT,
    PRIMARY KEY (queue, gen)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tasks_blocked ON tasks (queue, gen) WHERE waiting_on > 0;
"""

BACKFILL_QUEUE_SIZES = (
    "INSERT OR REPLACE INTO queue_sizes (queue, gen, size, max_pid, max_fifo_pid) "
    "SELECT queue, gen, count(*), max(pid), "
    "max(CASE WHEN length(pid) = 17 AND pid NOT GLOB '*[^0-9]*' THEN pid END) FROM tasks GROUP BY queue, gen"
)

# before version 1 the largest lease id on any row was the lease-id high-water mark
BACKFILL_LEASE_COUNTER = (
    "INSERT OR REPLACE INTO counters (name, value) SELECT 'lease_id', max(lease_id) FROM tasks HAVING max(lease_id) > 0"
)

SET_COUNTER = (
    "INSERT INTO counters (name, value) VALUES (?, ?) "
    "ON CONFLICT (name) DO UPDATE SET value = max(value, excluded.value)"
)

LOAD_COUNTERS = "SELECT name, value FROM counters"

DROP_QUEUE_SIZES = "DELETE FROM queue_sizes WHERE queue = ? AND gen < ?"

ADD_QUEUE_SIZE = (
    "INSERT INTO queue_sizes (queue, gen, size, max_pid, max_fifo_pid) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (queue, gen) DO UPDATE SET size = size + excluded.size, "
    "max_pid = max(max_pid, excluded.max_pid), "
    "max_fifo_pid = coalesce(max(max_fifo_pid, excluded.max_fifo_pid), max_fifo_pid, excluded.max_fifo_pid)"
)

FORGET_EMPTY_QUEUE_SIZE = "DELETE FROM queue_sizes WHERE queue = ? AND gen = ? AND size <= 0"

TASK_COLUMNS = (
    "queue, pid, data, enqueued_at, sender, receiver, headers, max_attempts, attempts, deliveries, "
    "lease_id, lease_owner, lease_peer, leased_at, lease_expires_at, waiting_on, children, progress, note"
)

INSERT_TASK = (
    "INSERT OR REPLACE INTO tasks (gen, " + TASK_COLUMNS + ") "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

SET_LEASE = (
    "UPDATE tasks SET attempts = ?, deliveries = ?, lease_id = ?, lease_owner = ?, lease_peer = ?, "
    "leased_at = ?, lease_expires_at = ?, progress = ?, note = ? WHERE queue = ? AND gen = ? AND pid = ?"
)

SET_WAITING = "UPDATE tasks SET waiting_on = ?, children = ? WHERE queue = ? AND gen = ? AND pid = ?"

PUT_EDGE = "INSERT OR IGNORE INTO edges (queue, pid, child_queue, child_pid) VALUES (?, ?, ?, ?)"

DELETE_EDGES = "DELETE FROM edges WHERE queue = ? AND pid = ?"

PARENTS_IN = "SELECT DISTINCT pid FROM edges WHERE queue = ? ORDER BY pid"

CHILDREN_OF = "SELECT child_queue, child_pid FROM edges WHERE queue = ? AND pid = ? ORDER BY child_queue, child_pid"

DELETE_TASK = "DELETE FROM tasks WHERE queue = ? AND gen = ? AND pid = ?"

SET_GENERATION = "INSERT OR REPLACE INTO generations (queue, gen) VALUES (?, ?)"

LOAD_GENERATIONS = "SELECT queue, gen FROM generations"

LOAD_AVAILABLE = (
    "SELECT " + TASK_COLUMNS + " FROM tasks WHERE queue = ? AND gen = ? AND pid > ? "
    "AND waiting_on = 0 AND (lease_expires_at IS NULL OR lease_expires_at <= ?) ORDER BY pid LIMIT ?"
)

LOAD_TASK = "SELECT " + TASK_COLUMNS + " FROM tasks WHERE queue = ? AND gen = ? AND pid = ?"

SCAN_FROM = "SELECT " + TASK_COLUMNS + " FROM tasks WHERE queue = ? AND gen = ? AND pid >= ? ORDER BY pid LIMIT ?"

FIND_BY_SENDER = (
    "SELECT gen, " + TASK_COLUMNS + " FROM tasks WHERE sender = ? ORDER BY sender, queue, pid"
)

FIND_BY_SENDER_AFTER = (
    "SELECT gen, " + TASK_COLUMNS + " FROM tasks WHERE sender = ? AND (queue, pid) > (?, ?) "
    "ORDER BY sender, queue, pid"
)

FIND_BY_SENDER_IN_QUEUE = (
    "SELECT gen, " + TASK_COLUMNS + " FROM tasks WHERE sender = ? AND queue = ? AND gen = ? "
    "ORDER BY sender, queue, pid LIMIT ?"
)

QUEUES_FOR_RECEIVER = "SELECT DISTINCT queue, gen FROM tasks WHERE receiver = ?"

# start-up reads: one row per live queue, then only blocked and leased tasks (partial indexes)
QUEUE_SUMMARIES = "SELECT queue, gen, size, max_pid, max_fifo_pid FROM queue_sizes"

BLOCKED_COUNTS = "SELECT queue, gen, count(*) FROM tasks WHERE waiting_on > 0 GROUP BY queue, gen"

# running leases and leases that ran out while no engine was watching
HELD_LEASES = "SELECT gen, " + TASK_COLUMNS + " FROM tasks WHERE lease_expires_at IS NOT NULL"

STALE_ROWS = (
    "SELECT t.rowid FROM generations g JOIN tasks t ON t.queue = g.queue AND t.gen < g.gen LIMIT ?"
)

DELETE_ROWIDS = "DELETE FROM tasks WHERE rowid = ?"

EMPTY_GENERATIONS = (
    "SELECT g.queue FROM generations g WHERE NOT EXISTS (SELECT 1 FROM tasks t WHERE t.queue = g.queue) LIMIT ?"
)

DELETE_GENERATION = "DELETE FROM generations WHERE queue = ?"

# The commit log's replay-safe ticket (`store.commit_log`): the last record the database holds, written in
# the transaction that applies it. Made when a log is first checkpointed, not by the schema's migrations.
HAS_LOG_STATE = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'commit_log_state'"
CREATE_LOG_STATE = (
    "CREATE TABLE IF NOT EXISTS commit_log_state (id INTEGER PRIMARY KEY CHECK (id = 1), ticket INTEGER NOT NULL)"
)
LOAD_LOG_TICKET = "SELECT ticket FROM commit_log_state WHERE id = 1"
SET_LOG_TICKET = (
    "INSERT INTO commit_log_state (id, ticket) VALUES (1, ?) "
    "ON CONFLICT (id) DO UPDATE SET ticket = max(ticket, excluded.ticket)"
)
