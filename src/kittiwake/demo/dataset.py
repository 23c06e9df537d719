"""The pipeline demo's data: generated event logs and a user table, written as files.

A shop's event log, sharded by user: shard `i` holds every event of the users
`[user_start, user_end)` of that shard, one CSV file each
(`events/shard-00000003.csv`), with the columns

    event_id, user_id, ts, event_type, amount, url

and the user table `users.parquet` (`user_id`, `country`, `plan`,
`signup_date`). The log is raw on purpose, so that cleaning it is real work:

* malformed rows (about 1.5%): a missing or non-numeric user id, a time stamp
  that does not parse, an unknown event type, a purchase or refund without a
  well-formed amount;
* garbage lines between the rows (a truncated record, a line of noise);
* replayed rows (about 2%): exact copies of rows of the same shard, so
  removing duplicates by `event_id` within a shard removes them all;
* untidy but valid values: event types in upper case or padded with spaces,
  URLs with an upper-case scheme and host, a query string, a trailing slash.

Everything is drawn with numpy and formatted by pyarrow, a shard at a time,
from a seed: the same size, shard count and seed give the same bytes. The
generator knows what it wrote, so `Manifest` carries, per shard, how many lines,
malformed rows, replays and garbage lines there are and how many clean events
must come out; `dataset.json` beside the files holds it.
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Callable

from kittiwake.byte_sizes import parse_byte_size
from kittiwake.errors import BadRequest

if TYPE_CHECKING:  # numpy and pyarrow are imported where a dataset is drawn (the `spark` extra)
    import numpy as np
    import pyarrow as pa
    from numpy.typing import NDArray

EVENT_COLUMNS = ("event_id", "user_id", "ts", "event_type", "amount", "url")
USER_COLUMNS = ("user_id", "country", "plan", "signup_date")
EVENT_TYPES = ("view", "click", "add_to_cart", "purchase", "refund", "signup")
EVENT_TYPE_WEIGHTS = (0.55, 0.25, 0.09, 0.06, 0.01, 0.04)
MONEY_TYPES = ("purchase", "refund")
COUNTRIES = ("US", "DE", "FR", "GB", "JP", "BR", "IN", "CA", "AU", "ES", "IT", "NL", "SE", "PL", "MX",
             "KR", "NO", "DK", "FI", "IE")
PLANS = ("free", "basic", "pro", "team")
PLAN_WEIGHTS = (0.6, 0.25, 0.12, 0.03)
PAGES = 400
URL_HOST = "https://shop.example.com"
LOG_START_SECS = 1_735_689_600  # 2025-01-01 00:00:00 UTC
LOG_DAYS = 28
MALFORMED_RATE = 0.015
REPLAY_RATE = 0.02
GARBAGE_LINES = ("<<<truncated record>>>", "7734,,", "##########", "0,0,0")
EVENTS_PER_USER = 20  # users = events / this, at least 10 per shard
ROW_BYTES = 81.5  # bytes per distinct row in the CSV, replays and garbage included (measured): rows from a size
# The default shard size: a Spark job's fixed cost (planning, a broadcast, the commit) is about half
# a second of CPU, so the flow's per-shard jobs should each have several seconds of work.
SHARD_BYTES = 50_000_000
BLOCK_ROWS = 250_000  # rows drawn and formatted at a time: bounded memory, a smooth progress bar
SEED = 2025
MANIFEST_NAME = "dataset.json"


@dataclass
class Shard:
    """One events file and what the generator put in it."""

    index: int
    path: str
    user_start: int  # users [user_start, user_end) have all their events here
    user_end: int
    bytes: int = 0
    lines: int = 0  # lines after the header: rows, replays and garbage
    rows: int = 0  # distinct events written (well-formed or not)
    malformed: int = 0  # of `rows`
    replays: int = 0
    garbage: int = 0

    @property
    def clean_rows(self) -> int:
        """Events that cleaning must keep: the distinct rows less the malformed ones."""
        return self.rows - self.malformed


@dataclass
class Manifest:
    """The generated dataset: its shards, the user table, and the totals."""

    root: str
    seed: int
    users_path: str
    users: int
    shards: list[Shard] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(shard.bytes for shard in self.shards)

    @property
    def lines(self) -> int:
        return sum(shard.lines for shard in self.shards)

    @property
    def clean_rows(self) -> int:
        return sum(shard.clean_rows for shard in self.shards)

    def save(self) -> None:
        Path(self.root, MANIFEST_NAME).write_text(json.dumps(asdict(self), indent=1) + "\n")

    @classmethod
    def load(cls, root: str | Path) -> Manifest:
        fields = json.loads(Path(root, MANIFEST_NAME).read_text())
        shards = [Shard(**shard) for shard in fields.pop("shards")]
        return cls(**fields, shards=shards)


def parse_size(text: str | int) -> int:
    """Bytes from `300MB`, `1.5GB`, `800kB` or a plain number of bytes (decimal units)."""
    size = parse_byte_size(text)
    if size < 10_000:
        raise BadRequest(f"the dataset must be at least 10kB, not {size} bytes")
    return size


def default_shards(size_bytes: int) -> int:
    """One shard per ~50 MB, at least 2 (so the split has something to split)."""
    return max(2, round(size_bytes / SHARD_BYTES))


def generate(root: str | Path, size_bytes: int, shards: int | None = None, seed: int = SEED,
             progress: Callable[[int], None] = lambda written: None) -> Manifest:
    """Write about `size_bytes` of event logs in `shards` files plus the user table under `root`.

    `progress` is called with the bytes written so far after each block."""
    import numpy as np

    if shards is None:
        shards = default_shards(size_bytes)
    if not 1 <= shards <= 10_000:
        raise BadRequest(f"shards must be within 1..10000, not {shards}")
    root = Path(root)
    (root / "events").mkdir(parents=True, exist_ok=True)
    rows_total = max(shards * 20, int(size_bytes / ROW_BYTES))
    users = max(10 * shards, rows_total // EVENTS_PER_USER)
    bounds = np.linspace(1, users + 1, shards + 1).astype(np.int64)
    manifest = Manifest(root=str(root), seed=seed, users_path=str(root / "users.parquet"), users=users)
    _write_users(manifest.users_path, users, seed)
    written = 0
    next_event_id = 1
    for index in range(shards):
        rows = rows_total // shards + (1 if index < rows_total % shards else 0)
        shard = Shard(index=index, path=str(root / "events" / f"shard-{index:08d}.csv"),
                      user_start=int(bounds[index]), user_end=int(bounds[index + 1]))
        before = written

        def shard_progress(now: int, before: int = before) -> None:
            progress(before + now)

        written += _write_shard(shard, rows, next_event_id, np.random.default_rng([seed, index]), shard_progress)
        next_event_id += rows
        manifest.shards.append(shard)
    manifest.save()
    return manifest


def change_shard(manifest: Manifest, index: int, variant: int = 1) -> Shard:
    """Draw shard `index` again with other random numbers (same users, event ids and row count)
    and save the manifest: a dataset where one input file changed, as a new day's log would."""
    import numpy as np

    old = manifest.shards[index]
    shard = Shard(index=old.index, path=old.path, user_start=old.user_start, user_end=old.user_end)
    first_event_id = 1 + sum(other.rows for other in manifest.shards[:index])
    _write_shard(shard, old.rows, first_event_id, np.random.default_rng([manifest.seed, index, variant]))
    manifest.shards[index] = shard
    manifest.save()
    return shard


def _write_shard(shard: Shard, rows: int, first_event_id: int, rng: np.random.Generator,
                 progress: Callable[[int], None] = lambda written: None) -> int:
    """Write `shard`'s file: a header, then `rows` events in blocks; returns the bytes written."""
    written = 0
    with open(shard.path, "wb") as out:
        out.write((",".join(EVENT_COLUMNS) + "\n").encode())
        for block_start in range(0, rows, BLOCK_ROWS):
            block = min(BLOCK_ROWS, rows - block_start)
            written += _write_block(out, rng, shard, first_event_id + block_start, block)
            progress(written)
    shard.bytes = Path(shard.path).stat().st_size
    return written


def _write_users(path: str, users: int, seed: int) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as parquet

    rng = np.random.default_rng([seed, 1 << 30])
    country = rng.choice(len(COUNTRIES), users, p=_country_weights())
    plan = rng.choice(len(PLANS), users, p=PLAN_WEIGHTS)
    signup_days = rng.integers(0, 5 * 365, users) + (LOG_START_SECS // 86400 - 5 * 365)
    table = pa.table({
        "user_id": pa.array(np.arange(1, users + 1, dtype=np.int64)),
        "country": pa.DictionaryArray.from_arrays(pa.array(country.astype(np.int32)),
                                                  pa.array(COUNTRIES)).cast(pa.string()),
        "plan": pa.DictionaryArray.from_arrays(pa.array(plan.astype(np.int32)), pa.array(PLANS)).cast(pa.string()),
        "signup_date": pa.array(signup_days.astype(np.int32), pa.int32()).cast(pa.date32()),
    })
    parquet.write_table(table, path)


def _country_weights() -> list[float]:
    raw = [1.0 / (rank + 1) ** 0.8 for rank in range(len(COUNTRIES))]
    return [weight / sum(raw) for weight in raw]


def _variants(values: list[str], messy: Callable[[str], list[str]]) -> list[str]:
    """Each value followed by its untidy spellings: index value*K + k."""
    return [spelling for value in values for spelling in (value, *messy(value))]


_TYPE_SPELLINGS = _variants(list(EVENT_TYPES), lambda t: [t.upper(), f" {t.capitalize()} "])
_URL_SPELLINGS = _variants([f"{URL_HOST}/products/{page}" for page in range(PAGES)],
                           lambda url: [url + "?utm_source=mail", url.replace("https://shop.example.com",
                                                                              "HTTPS://Shop.Example.com"), url + "/"])
_BAD_USER_IDS = ("", "N/A", "user-?")
_BAD_TIMES = ("", "yesterday", "2025-13-45 99:99:99")
_BAD_TYPES = ("unknown_event", "???")
_BAD_AMOUNTS = ("", "abc", "1.2.3", "12.5O")


def _write_block(out: BinaryIO, rng: np.random.Generator, shard: Shard, first_event_id: int, rows: int) -> int:
    """Draw `rows` events of `shard`, replays and garbage included, and append them as CSV."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as compute
    import pyarrow.csv as csv

    span = shard.user_end - shard.user_start
    # heavy-tailed activity: a few users make many events; which ones is shuffled per shard
    ranks = (rng.random(rows) ** 3 * span).astype(np.int64)
    user_ids = shard.user_start + rng.permutation(span)[ranks]
    seconds = np.sort(rng.integers(0, LOG_DAYS * 86400, rows)) + LOG_START_SECS
    types = rng.choice(len(EVENT_TYPES), rows, p=EVENT_TYPE_WEIGHTS)
    type_spelling = types * 3 + np.where(rng.random(rows) < 0.05, rng.integers(1, 3, rows), 0)
    money = (types == EVENT_TYPES.index("purchase")) | (types == EVENT_TYPES.index("refund"))
    cents = np.where(types == EVENT_TYPES.index("refund"), rng.integers(100, 5_000, rows),
                     rng.integers(199, 40_000, rows))
    pages = (rng.pareto(1.2, rows) * 20).astype(np.int64) % PAGES  # a long tail, folded over the catalogue
    url_spelling = pages * 4 + np.where(rng.random(rows) < 0.25, rng.integers(1, 4, rows), 0)

    days, times_of_day, two_digits = _spellings()
    dollars = compute.cast(pa.array(cents // 100), pa.string())
    pennies = _spell(cents % 100, two_digits)
    amount = compute.if_else(pa.array(money), compute.binary_join_element_wise(dollars, pennies, "."),
                             pa.scalar(None, pa.string()))
    columns = {
        "event_id": compute.cast(pa.array(np.arange(first_event_id, first_event_id + rows, dtype=np.int64)),
                                 pa.string()),
        "user_id": compute.cast(pa.array(user_ids), pa.string()),
        # day and time of day from tables: strftime per row is ten times slower
        "ts": compute.binary_join_element_wise(_spell((seconds - LOG_START_SECS) // 86400, days),
                                               _spell((seconds - LOG_START_SECS) % 86400, times_of_day), " "),
        "event_type": _spell(type_spelling, _TYPE_SPELLINGS),
        "amount": amount,
        "url": _spell(url_spelling, _URL_SPELLINGS),
    }

    # malformed rows: one fault each, in one column
    broken = np.flatnonzero(rng.random(rows) < MALFORMED_RATE)
    faults = rng.integers(0, 4, len(broken))
    for fault, (column, spellings) in enumerate((("user_id", _BAD_USER_IDS), ("ts", _BAD_TIMES),
                                                 ("event_type", _BAD_TYPES), ("amount", _BAD_AMOUNTS))):
        where = broken[faults == fault]
        if column == "amount":  # only a purchase or refund needs an amount
            where = where[money[where]]
        choice = rng.integers(0, len(spellings), len(where))
        columns[column] = _replace(columns[column], where, [spellings[k] for k in choice])
        shard.malformed += len(where)
    table = pa.table(columns)

    # replays: copies of rows of this block, written next to the original (a log shipped twice)
    replayed = rng.choice(rows, int(rows * REPLAY_RATE), replace=False)
    table = table.take(pa.array(np.sort(np.concatenate([np.arange(rows), replayed]))))

    options = csv.WriteOptions(include_header=False, quoting_style="none")
    pieces = int(rng.integers(1, 4))
    cuts = np.linspace(0, table.num_rows, pieces + 1).astype(np.int64)
    written = 0
    for piece in range(pieces):
        sink = pa.BufferOutputStream()
        csv.write_csv(table.slice(cuts[piece], cuts[piece + 1] - cuts[piece]), sink, options)
        data = sink.getvalue().to_pybytes()
        garbage = (GARBAGE_LINES[int(rng.integers(0, len(GARBAGE_LINES)))] + "\n").encode()
        out.write(data)
        out.write(garbage)
        written += len(data) + len(garbage)
        shard.garbage += 1
    shard.rows += rows
    shard.replays += len(replayed)
    shard.lines += table.num_rows + pieces
    return written


@functools.lru_cache(maxsize=1)
def _spellings() -> tuple[list[str], list[str], list[str]]:
    """The log's days (`yyyy-mm-dd`), the times of a day (`hh:mm:ss`) and the numbers 00..99."""
    start = datetime.fromtimestamp(LOG_START_SECS, timezone.utc)
    days = [(start + timedelta(days=day)).strftime("%Y-%m-%d") for day in range(LOG_DAYS)]
    times = [f"{hour:02d}:{minute:02d}:{second:02d}" for hour in range(24) for minute in range(60) for second in range(60)]
    return days, times, [f"{number:02d}" for number in range(100)]


def _spell(codes: NDArray[np.integer], spellings: list[str]) -> pa.Array:
    import numpy as np
    import pyarrow as pa

    return pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)), pa.array(spellings)).cast(pa.string())


def _replace(column: pa.Array, where: NDArray[np.intp], values: list[str]) -> pa.Array:
    """`column` with the strings at the (ascending) positions `where` replaced by `values`; "" is null."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as compute

    if len(where) == 0:
        return column
    mask = np.zeros(len(column), dtype=bool)
    mask[where] = True
    return compute.replace_with_mask(column, pa.array(mask), pa.array([value or None for value in values], pa.string()))
