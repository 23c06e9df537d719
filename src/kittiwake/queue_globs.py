"""Glob patterns over queue names, matched in time linear in the name, never by backtracking.

A pattern is a queue name that may also hold `*` (any run of characters,
`#` and `.` included, possibly empty) and `?` (exactly one character). There
are no character classes and no escapes: `*` and `?` cannot occur in a queue
name, so every other character stands for itself. The whole name must match:
`alice.*` matches `alice.jobs` and `alice.jobs.dead`, not `xalice.jobs`.

How it is matched, and why it cannot stall: most patterns are a literal
(`billing#invoices`) or a literal prefix then one `*` (`alice.*`), which are a
string comparison and a `startswith`; a pattern of stars and literals only
(`*.dead`, `shop#*.jobs`) is a `startswith`, an `endswith` and a `find` per
literal between stars, each from where the last one ended (taking each literal
at its leftmost place leaves the most room for the rest, so nothing is tried
twice). Anything with a `?` runs the pattern as a non-deterministic automaton,
all of its states at once, with one bit per state in a Python int (the
shift-and algorithm): state i means "the first i non-star tokens are matched",
a token moves i to i + 1 when it accepts the character, and a `*` after token
i lets state i stay. One step per character of the name. Neither way
backtracks, so a pattern like `*a*a*a*a*b` costs no more on `aaaa…` than on
anything else — unlike a backtracking regex, whose worst case is exponential.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_PATTERN_CHARS = 512
WILDCARDS = "*?"
# the characters of queue names (see `kittiwake.model`), `#`, and the two wildcards
_PATTERN_RE = re.compile(r"[A-Za-z0-9_.:@/\-#*?]+")  # used with fullmatch; no repetition inside, so linear


class PatternError(ValueError):
    """A pattern that is empty, too long or holds characters no queue name has."""


@dataclass(frozen=True, slots=True)
class QueuePattern:
    """One compiled glob; `matches(name)` says whether the whole name matches."""

    text: str
    _literal: str | None = field(init=False, repr=False, compare=False)
    _prefix: str | None = field(init=False, repr=False, compare=False)
    _parts: tuple[str, ...] | None = field(init=False, repr=False, compare=False)
    _masks: dict[str, int] = field(init=False, repr=False, compare=False)
    _any_mask: int = field(init=False, repr=False, compare=False)
    _star_mask: int = field(init=False, repr=False, compare=False)
    _final: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        text = self.text
        if not isinstance(text, str) or not text:
            raise PatternError("a queue pattern must be a non-empty string")
        if len(text) > MAX_PATTERN_CHARS:
            raise PatternError(f"a queue pattern is at most {MAX_PATTERN_CHARS} characters")
        if not _PATTERN_RE.fullmatch(text):
            raise PatternError(
                f"queue pattern {text[:64]!r} may hold only the characters of queue names "
                "([A-Za-z0-9_.:@/-] and '#') and the wildcards '*' and '?'"
            )
        star = text.find("*")
        literal = text if not any(c in text for c in WILDCARDS) else None
        prefix = text[:-1] if star == len(text) - 1 and "?" not in text else None
        # stars only (`a*b*c`): the literal runs between them, found left to right with str.find
        parts = tuple(text.split("*")) if literal is None and prefix is None and "?" not in text else None
        # the automaton, for every other shape (built for all: it is small)
        masks: dict[str, int] = {}
        any_mask = 0
        star_mask = 0
        position = 0  # non-star tokens seen so far
        for char in text:
            if char == "*":
                star_mask |= 1 << position
                continue
            position += 1
            bit = 1 << position
            if char == "?":
                any_mask |= bit
            else:
                masks[char] = masks.get(char, 0) | bit
        # a '?' accepts every character, so each literal's mask includes the '?' positions
        masks = {char: mask | any_mask for char, mask in masks.items()}
        object.__setattr__(self, "_literal", literal)
        object.__setattr__(self, "_prefix", prefix)
        object.__setattr__(self, "_parts", parts)
        object.__setattr__(self, "_masks", masks)
        object.__setattr__(self, "_any_mask", any_mask)
        object.__setattr__(self, "_star_mask", star_mask)
        object.__setattr__(self, "_final", 1 << position)

    @property
    def is_everything(self) -> bool:
        """Whether the pattern matches every queue name (`*`, `**`, …)."""
        return self._prefix == "" or (set(self.text) == {"*"})

    def matches(self, name: str) -> bool:
        if self._literal is not None:
            return name == self._literal
        if self._prefix is not None:
            return name.startswith(self._prefix)
        if self._parts is not None:
            return _stars_match(self._parts, name)
        states = 1  # state 0: nothing matched yet
        masks, any_mask, star_mask = self._masks, self._any_mask, self._star_mask
        for char in name:
            states = ((states << 1) & masks.get(char, any_mask)) | (states & star_mask)
            if not states:
                return False
        return bool(states & self._final)

    def matches_every_name_from(self, prefix: str) -> bool:
        """Whether every name that starts with `prefix` matches. Sound, not complete: yes when the
        pattern ends in `*` and `prefix` reaches that star (`jobs.*` or `jobs.fifo/*` from
        `jobs.fifo/`, and `*`); no for the rare shapes that cover every continuation otherwise
        (`a*?` from `a/`), so a caller deciding rights refuses rather than guesses."""
        if not self._final & self._star_mask:
            return False
        states = 1
        masks, any_mask, star_mask = self._masks, self._any_mask, self._star_mask
        for char in prefix:
            states = ((states << 1) & masks.get(char, any_mask)) | (states & star_mask)
            if not states:
                return False
        return bool(states & self._final)

    def first_name_from(self, name: str) -> str | None:
        """A lower bound of the names at or after `name` that match: `name` itself when a match may
        start there, the pattern's literal lead (the text before its first wildcard) when `name`
        sorts before it, None when no name from `name` on can match. Sound: every match >= `name`
        is >= the answer, so a search over sorted names may jump to it and miss nothing."""
        text = self.text
        lead = text[: min((index for index in (text.find("*"), text.find("?")) if index >= 0), default=len(text))]
        if name < lead:
            return lead
        if not name.startswith(lead) or (self._literal is not None and name != lead):
            return None  # every match starts with the lead (a literal is its lead), and sorts before `name`
        return name

    def __str__(self) -> str:
        return self.text


def _stars_match(parts: tuple[str, ...], name: str) -> bool:
    """Whether `name` matches parts[0] * parts[1] * … * parts[-1]. The first part must start
    the name and the last end it; each one between is taken at its leftmost place after the
    previous, which can only leave more room for the rest (so no backtracking is needed)."""
    first, last = parts[0], parts[-1]
    if len(name) < len(first) + len(last) or not name.startswith(first) or not name.endswith(last):
        return False
    position, end = len(first), len(name) - len(last)
    for part in parts[1:-1]:
        found = name.find(part, position, end)
        if found < 0:
            return False
        position = found + len(part)
    return True


def compile_pattern(text: str) -> QueuePattern:
    """A compiled pattern, or `PatternError` saying what is wrong with it."""
    return QueuePattern(text)
