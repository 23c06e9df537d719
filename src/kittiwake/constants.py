"""The names and defaults that more than one layer must agree on, each declared once (arq's `constants.py`).

A queue name, a header or a default that a producer, the broker and a worker
read must be spelt the same everywhere, or tasks go where nobody looks. So
every such name lives here and nowhere else; modules import it from here (or
through `kittiwake.model`, which re-exports the broker's own). Plain data
only: no imports, no functions — the functions that build names from these
(`model.dead_queue_of`, `app.envelope.delayed_queue_of`, ...) sit beside the
concept they serve. `docs/design.md` explains each word.

Units are suffixes (`_secs`, `_bytes`, `_per_sec`).
"""

# --------------------------------------------------------------------- leases

DEFAULT_LEASE_SECS = 30.0
"""A lease's length when the caller names none: the broker's, the client's, the CLI's and a task's default."""

# ---------------------------------------------------------------- queue names

DEFAULT_GROUP = ""
"""The consistency group of a queue name without `GROUP_SEPARATOR`."""

GROUP_SEPARATOR = "#"
"""`group#name`: the group is everything before the last separator."""

DEAD_SUFFIX = ".dead"
"""`<queue>.dead` is the dead-letter queue of `<queue>`, in the same group (the broker fills it)."""

DELAYED_SUFFIX = ".delayed"
"""`<queue>.delayed` holds an app's tasks submitted with a delay, pid = due time (`app.envelope`)."""

TICKS_DONE_SUFFIX = ".ticks-done"
"""`<queue>.ticks-done` holds a marker per finished periodic tick, so a late scheduler collapses."""

GANG_SUFFIX = ".gang"
"""`<queue>.gang` holds the join tasks of gang tasks defined on `<queue>` (`worker.gang`)."""

NODE_SEPARATOR = "@"
"""`<queue>@<node>` is the local queue of `<queue>`'s tasks whose data is on `<node>` (`app.locality`)."""

STREAM_LOG_INFIX = ".stream."
"""`<queue>.stream.<name>` is the batch log of the Spark stream `<name>` over `<queue>` (`spark.stream_log`)."""

RESERVED_SUFFIXES = (DELAYED_SUFFIX, DEAD_SUFFIX, TICKS_DONE_SUFFIX)
"""Endings a task definition's queue may not have: Kittiwake uses such queues itself."""

RESERVED_PREFIX = "_"
"""Queue names (after the group) that start with this are Kittiwake's own: reply queues, the registry."""

REPLIES_PREFIX = "_replies."
"""An app's reply queue is `<group>#_replies.<app id>` unless the app names another prefix."""

WORKERS_QUEUE = "_workers"
"""The worker registry: one record per worker process (`worker.registry`)."""

JOBS_QUEUE = "_jobs"
"""The job registry: one record per job an `App` submitted (`app.job_records`), read by the dashboard."""

DEFAULT_QUEUE = "default"
"""Where a task definition without `queue=` puts its tasks."""

# ----------------------------------------------------------------------- pids

FIFO_PID_DIGITS = 17
"""A FIFO pid is the broker's clock in microseconds, zero-padded to this many digits."""

DEAD_PID_SEPARATOR = "~"
"""A dead letter's pid is `<pid>~<FIFO pid of its death>`."""

DEAD_PID_EXTRA_BYTES = len(DEAD_PID_SEPARATOR) + FIFO_PID_DIGITS
"""How much longer a dead letter's pid may be than the longest pid."""

# -------------------------------------------------------------------- headers

DEAD_REASON_HEADER = "kittiwake-dead-reason"
"""Set by the broker on a dead letter: why the task died (`LEASE_EXPIRED`, `CANCELLED`, a worker's reason, ...)."""

DEAD_PID_HEADER = "kittiwake-dead-pid"
"""Set by the broker on a dead letter: the task's pid before it died."""

TASK_ID_HEADER = "kittiwake-task-id"
"""An app task's identity, the same on every delivery and on its result."""

SUBMISSION_HEADER = "kittiwake-submission"
"""One submission of an app task, new at every submit; its result's pid in the reply queue."""

REPLY_TO_HEADER = "kittiwake-reply-to"
"""The reply queue an app task's result goes to; absent when nobody wants it."""

SUBMITTED_AT_HEADER = "kittiwake-submitted-at"
"""Epoch seconds when an app task was submitted."""

TRACEPARENT_HEADER = "traceparent"
"""W3C Trace Context: the trace and the span that sent an app task (`app.tracing`); absent without tracing."""

TRACESTATE_HEADER = "tracestate"
"""W3C Trace Context: vendors' trace state beside `TRACEPARENT_HEADER`, when there is one."""

MAX_TRACESTATE_BYTES = 512
"""A longer trace state is not sent: what W3C Trace Context asks every carrier to propagate at least."""

# ---------------------------------------------------------- dead-letter reasons
# The broker's own reasons in `DEAD_REASON_HEADER`; workers add theirs (`ERROR`,
# `TIMEOUT`, `WORKER_LOST`, ... — see `app.serialization`).

LEASE_EXPIRED_REASON = "LEASE_EXPIRED"
"""The last allowed attempt's lease ran out."""

CANCELLED_REASON = "CANCELLED"
"""`cancel` withdrew the task without a reason of its own."""

RELEASED_REASON = "RELEASED"
"""The last allowed attempt was released without a reason."""

PARENT_FAILED_REASON = "PARENT_FAILED"
"""A parent (`after=`) died; the reason reads `PARENT_FAILED <queue>/<pid>`."""

# ----------------------------------------------------------------------- joins

JOINS_QUEUE = "_joins"
"""The broker's own queue of join declarations, one task per join (pid = its name)."""

JOIN_HEADER = "kittiwake-join"
"""Set by the broker on a job a join started: the join's name."""

SEQ_FINAL_HEADER = "kittiwake-seq-final"
"""On a token of a sequence port: this token has the last index of its sequence."""

SEQ_SEPARATOR = "/"
"""A token's key is `<run>[/<index>]...`; a sequence port's token adds one `/<index>` to its key."""

DEFAULT_METRICS_QUEUE_SERIES = 200
"""Queues with series of their own in /metrics (`--metrics-queue-series`); the rest add up in queue="other"."""

MAX_METRICS_QUEUE_SERIES = 100_000
"""The most `--metrics-queue-series` may ask for."""
