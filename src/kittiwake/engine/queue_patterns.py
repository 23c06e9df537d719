"""Queue-name patterns of `list_queues` and `stats`: regular expressions matched in linear time.

A pattern is searched in each queue name (not anchored: use `^` and `$`), with
the syntax of Python's `re` minus what needs backtracking: backreferences
(`\\1`, `(?P=name)`), lookahead and lookbehind (`(?=`, `(?!`, `(?<=`, `(?<!`),
possessive and atomic groups, and `\\Z` (write `\\z` or `$`). The broker runs
patterns on its event loop, so it cannot use a backtracking matcher: there,
`(a+)+$` against `x#aaa…a-` takes 2^n steps and holds up every client. RE2
builds an automaton instead, whose running time is linear in the name and
bounded by the size of its program, which `MAX_PROGRAM_BYTES` caps along with
the memory of its lazily built DFA (beyond that RE2 falls back to its NFA,
still linear).

A pattern is compiled once per request, and the last few are kept so a worker
or dashboard polling with the same pattern does not compile it each time.
"""

from __future__ import annotations

import functools
from typing import Callable

import re2

from kittiwake import errors

MAX_PATTERN_CHARS = 1024
# RE2's budget for one compiled pattern, program and DFA cache together: a
# 1 KiB pattern of ordinary classes and repetitions needs a few kB; a 1 KiB
# pattern too big for this (e.g. `\pL{1000}`) is refused rather than run.
MAX_PROGRAM_BYTES = 2 * 1024 * 1024
# Compiled patterns kept between requests; with MAX_PROGRAM_BYTES, this bounds
# the memory patterns can hold in the broker (16 MiB).
CACHED_PATTERNS = 8

NameMatcher = Callable[[str], bool]


def name_matcher(pattern: object) -> NameMatcher:
    """A predicate telling whether a queue name matches `pattern` anywhere in it.

    Raises `BadRequest` for a pattern that is not a str of at most
    MAX_PATTERN_CHARS characters, or that RE2 refuses (bad syntax, a
    backtracking-only construct, a program above MAX_PROGRAM_BYTES).
    """
    if not isinstance(pattern, str) or len(pattern) > MAX_PATTERN_CHARS:
        raise errors.BadRequest(f"pattern must be a regular expression of at most {MAX_PATTERN_CHARS} characters")
    return _compiled(pattern)


@functools.lru_cache(maxsize=CACHED_PATTERNS)
def _compiled(pattern: str) -> NameMatcher:
    options = re2.Options()
    options.max_mem = MAX_PROGRAM_BYTES
    options.log_errors = False  # a refused pattern is the client's error, answered as BAD_REQUEST
    try:
        search = re2.compile(pattern, options).search
    except re2.error as exc:
        raise errors.BadRequest(f"bad pattern: {_reason(exc)}") from None
    finally:
        # re2 keeps its own cache of 128 compiled patterns; this module's
        # smaller one is the only one that should hold memory in the broker.
        re2.purge()
    return lambda name: search(name) is not None


def _reason(exc: Exception) -> str:
    """RE2's reason in words, with a hint where Python's `re` would have accepted the pattern."""
    reason = exc.args[0] if exc.args else "refused"
    if isinstance(reason, bytes):
        reason = reason.decode("utf-8", "replace")
    reason = str(reason)[:200]
    if "invalid perl operator" in reason or "invalid escape sequence" in reason:
        reason += " (patterns run in linear time: no backreferences, lookaround or atomic groups; \\z ends the name)"
    elif "pattern too large" in reason:
        reason += f" (its automaton needs more than {MAX_PROGRAM_BYTES >> 20} MiB)"
    return reason
