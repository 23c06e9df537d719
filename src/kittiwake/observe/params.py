"""The parameters of the HTTP views, read from a query string or a JSON body and checked once.

Each reader takes the request's parameters (`http_json.query`, or a write's
body), a name and what the value may be, and returns it typed, or raises
BAD_REQUEST naming the parameter and what it takes. A parameter left out
takes its default; an empty one counts as left out for optional text.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from kittiwake import errors
from kittiwake.model import Limits, validate_pid, validate_queue

MAX_TEXT_CHARS = 512


def integer(params: Mapping[str, Any], name: str, default: int, low: int, high: int) -> int:
    """An integer in [low, high]; text ("50") or, in a JSON body, a number."""
    value = params.get(name)
    if value is None or value == "":
        return default
    if isinstance(value, str):
        text = value.strip()
        if not text.lstrip("-").isdigit() or len(text) > 12:
            raise errors.BadRequest(f"{name} must be an integer in [{low}, {high}], got {value[:40]!r}")
        value = int(text)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise errors.BadRequest(f"{name} must be an integer in [{low}, {high}], got {str(value)[:40]!r}")
    return value


def choice(params: Mapping[str, Any], name: str, allowed: Sequence[str], default: str) -> str:
    value = params.get(name)
    if value is None or value == "":
        return default
    if value not in allowed:
        raise errors.BadRequest(f"{name} must be one of {', '.join(allowed)}, got {str(value)[:40]!r}")
    return str(value)


def flag(params: Mapping[str, Any], name: str) -> bool:
    """`1`/`true` or `0`/`false` (left out: false)."""
    value = params.get(name)
    if value is None or value in ("", "0", "false", False):
        return False
    if value in ("1", "true", True):
        return True
    raise errors.BadRequest(f"{name} takes 1 or 0, got {str(value)[:40]!r}")


def text(params: Mapping[str, Any], name: str, max_chars: int = MAX_TEXT_CHARS) -> str | None:
    """Optional text of at most `max_chars` characters (None when left out or empty)."""
    value = params.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > max_chars:
        raise errors.BadRequest(f"{name} must be text of at most {max_chars} characters")
    return value


def queue(params: Mapping[str, Any], name: str, limits: Limits) -> str:
    """A required queue name, checked as the broker checks one."""
    value = params.get(name)
    if value is None or value == "":
        raise errors.BadRequest(f"{name} is required: the queue's name")
    return validate_queue(value, limits, name)


def optional_queue(params: Mapping[str, Any], name: str, limits: Limits) -> str | None:
    """An optional queue name, checked as the broker checks one (None when left out or empty)."""
    value = params.get(name)
    if value is None or value == "":
        return None
    return validate_queue(value, limits, name)


def pid(params: Mapping[str, Any], name: str, limits: Limits, queue_name: str) -> str | None:
    """An optional pid of a task of `queue_name`."""
    value = params.get(name)
    if value is None or value == "":
        return None
    return validate_pid(value, limits, name, queue_name)


def pids(params: Mapping[str, Any], name: str, limits: Limits, queue_name: str) -> list[str]:
    """A required list of 1..max_batch pids of tasks of `queue_name`."""
    value = params.get(name)
    if not isinstance(value, list) or not value or len(value) > limits.max_batch:
        raise errors.BadRequest(f"{name} must be a list of 1 to {limits.max_batch} pids")
    return [validate_pid(item, limits, name, queue_name) for item in value]
