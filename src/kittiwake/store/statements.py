"""Every SQL statement of the SQLite store, in one place.

The schema keeps one row per task keyed by (queue, gen, pid); `gen` is the
queue's generation, bumped by delete_queue so a drop is one row write and the
old rows are reaped later in small chunks. Partial indexes cover the Paštas
look-ups (by sender, by receiver) and running leases, and cost nothing for
tasks that have no sender, receiver or lease.
"""

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

FIND_BY_SENDER_IN_QUEUE = (
    "SELECT gen, " + TASK_COLUMNS + " FROM tasks WHERE sender = ? AND queue = ? AND gen = ? "
    "ORDER BY sender, queue, pid LIMIT ?"
)

QUEUES_FOR_RECEIVER = "SELECT DISTINCT queue, gen FROM tasks WHERE receiver = ?"

# one scan at start-up: sizes, the FIFO high-water mark and the lease-id high-water mark
QUEUE_SUMMARIES = (
    "SELECT queue, gen, count(*), max(pid), "
    "max(CASE WHEN length(pid) = 17 AND pid NOT GLOB '*[^0-9]*' THEN pid END), max(lease_id), "
    "sum(waiting_on > 0) "
    "FROM tasks GROUP BY queue, gen"
)

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
