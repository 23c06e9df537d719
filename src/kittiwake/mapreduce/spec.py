"""`JobSpec`: what every map and reduce task of one MapReduce job needs to know, as a task argument.

The driver fills it once (`kittiwake.mapreduce.driver`) and every task gets
it as a plain map (`as_dict`, read back with `from_dict`, which validates):
the app, the reducer count, the grep pattern or the sort splits, the
intermediate directories and thresholds, the output directory, and the
broker queue where maps record where their output lives.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from kittiwake.errors import BadRequest
from kittiwake.mapreduce.partitioners import validate_reducers

WORDCOUNT = "wordcount"
GREP = "grep"
SORT = "sort"
APPS = (WORDCOUNT, GREP, SORT)
MAX_PATTERN_BYTES = 1024
DEFAULT_SPILL_BYTES = 64_000_000  # a map's buffered output past this goes to disk
DEFAULT_BLOCK_BYTES = 16_000_000  # a map reads and processes its partition this much at a time


def validate_app(app: object) -> str:
    if app not in APPS:
        raise BadRequest(f"app must be one of {', '.join(APPS)}, got {app!r}")
    return str(app)


def validate_pattern(pattern: object) -> bytes:
    """A grep pattern: a non-empty literal of at most 1 KiB without a line break (str as UTF-8)."""
    if isinstance(pattern, str):
        pattern = pattern.encode("utf-8")
    if not isinstance(pattern, bytes) or not pattern:
        raise BadRequest("grep needs a non-empty pattern")
    if len(pattern) > MAX_PATTERN_BYTES or b"\n" in pattern or b"\r" in pattern:
        raise BadRequest(f"a grep pattern is one line of at most {MAX_PATTERN_BYTES} bytes")
    return pattern


@dataclass(frozen=True)
class JobSpec:
    """One job's parameters (see the module docstring)."""

    app: str
    job: str  # the job id: names the locations queue and the intermediate directories
    maps: int
    reducers: int
    out_dir: str
    memory_dir: str
    spill_dir: str
    locations_queue: str
    spill_bytes: int = DEFAULT_SPILL_BYTES
    block_bytes: int = DEFAULT_BLOCK_BYTES
    pattern: bytes = b""  # grep
    splits: tuple[int, ...] = field(default_factory=tuple)  # sort: reducers - 1 key prefixes

    def __post_init__(self) -> None:
        validate_app(self.app)
        validate_reducers(self.reducers)
        if not isinstance(self.maps, int) or self.maps < 1:
            raise BadRequest("a job needs at least one map")
        for name in ("spill_bytes", "block_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise BadRequest(f"{name} must be a positive integer, got {value!r}")
        if self.app == GREP:
            validate_pattern(self.pattern)
        if self.app == SORT and len(self.splits) != self.reducers - 1:
            raise BadRequest(f"sort needs {self.reducers - 1} splits for {self.reducers} reducers")

    def as_dict(self) -> dict[str, Any]:
        record = asdict(self)
        record["splits"] = list(self.splits)
        return record

    @classmethod
    def from_dict(cls, record: Any) -> JobSpec:
        if not isinstance(record, dict):
            raise BadRequest("a job spec is a map")
        try:
            values = dict(record)
            values["splits"] = tuple(int(split) for split in values.get("splits", ()))
            return cls(**values)
        except TypeError as error:
            raise BadRequest(f"not a job spec: {error}") from None

    def reducer_of_map(self, index: int) -> int:
        """grep: the one reducer that concatenates map `index`'s matches (contiguous ranges of maps)."""
        return index * self.reducers // self.maps

    def maps_of_reducer(self, reducer: int) -> range:
        """grep: the maps whose matches reducer `reducer` concatenates, in input order."""
        first = -(-reducer * self.maps // self.reducers)
        last = -(-(reducer + 1) * self.maps // self.reducers)
        return range(first, last)
