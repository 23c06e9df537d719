"""Failed authentications: the limit on guessing, per source address and for all of them, and logs that do not flood.

Sans-IO (the caller passes `now`, monotonic seconds, and writes the lines).
Each source address (the client's IP, any port) gets a window that opens at
its first failure and lasts `WINDOW_SECS` (60 s):

* the first failure of a window is logged at once, naming the user tried;
  later ones are only counted, and when the window closes one summary line
  says how many there were — a brute force of a thousand tries from one
  address is two log lines, not a thousand;
* after `MAX_CHECKS_PER_WINDOW` (10) failures in a window, the source is
  *limited* (`Limit.SOURCE`) until the window closes: its tries are refused
  without checking the token, so guessing costs the broker a dictionary
  lookup per try, never another key derivation. A correct token that the
  broker has already verified since it started is still accepted (that
  check is free).

A budget per address alone lets many addresses cost many key derivations
(thirty addresses, three hundred scrypt runs, about 16 s of CPU). So all
sources together have a window too, opened by the first failed *key
derivation* and lasting `WINDOW_SECS`: after `MAX_CHECKS_ALL_PER_WINDOW`
(30) failed key derivations in it, every source is limited (`Limit.ALL`)
until it closes — at most about 1.7 s of scrypt a minute however many
addresses guess (plus the checks already under way when the budget ran out,
at most the authenticator's `MAX_PENDING_CHECKS`). Failures that cost no
key derivation (an unknown user, malformed credentials) count only against
their source, so a flood of them cannot lock everybody out. What the budget
of all sources costs: while guessing keeps it spent, a token never verified
since the broker started is refused too (clients are told to try again
later); tokens verified before keep working.

The caller keeps one book per kind of source address: the UDP listener's
addresses are only claimed (anyone can forge them), so its failures go to a
book of their own (`kind`), and forged datagrams cannot spend a TCP
address's budget nor the TCP budget of all sources.

At most `MAX_SOURCES` windows are kept; past that the oldest is closed early
(its summary is written), so memory stays bounded under a spoofed flood.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

WINDOW_SECS = 60.0
MAX_CHECKS_PER_WINDOW = 10
MAX_CHECKS_ALL_PER_WINDOW = 30
MAX_SOURCES = 10_000


class Limit(enum.Enum):
    """Why tries are refused unchecked for now."""

    SOURCE = "source"  # this address failed too often in its window
    ALL = "all"  # all addresses together failed too many key derivations in theirs


@dataclass(slots=True)
class SourceWindow:
    """One source's failures since `started_at`."""

    started_at: float
    failures: int = 0
    refused: int = 0  # of the failures, those refused without a check (the source was limited)
    first_user: str = ""


@dataclass(slots=True)
class AllWindow:
    """The failed key derivations of all sources since `started_at`."""

    started_at: float
    checks: int = 0
    refused: int = 0  # tries refused unchecked while this budget was spent


class AuthFailures:
    """The failure windows of every source that failed lately, and the window of all of them."""

    def __init__(self, window_secs: float = WINDOW_SECS, max_checks: int = MAX_CHECKS_PER_WINDOW,
                 max_sources: int = MAX_SOURCES, max_checks_all: int = MAX_CHECKS_ALL_PER_WINDOW,
                 kind: str = "") -> None:
        self.window_secs = window_secs
        self.max_checks = max_checks
        self.max_sources = max_sources
        self.max_checks_all = max_checks_all
        self.kind = kind  # how log lines name a source of this book ("UDP"), or nothing
        self._windows: dict[str, SourceWindow] = {}
        self._all: AllWindow | None = None
        self.total = 0

    def __len__(self) -> int:
        return len(self._windows)

    @property
    def open(self) -> bool:
        """Whether a window is open (its summary is still to come)."""
        return bool(self._windows) or self._all is not None

    def limited(self, source: str, now: float) -> Limit | None:
        """Why tries from `source` are refused unchecked for now, or None if they may be checked."""
        window = self._windows.get(source)
        if window is not None and now - window.started_at < self.window_secs and window.failures >= self.max_checks:
            return Limit.SOURCE
        if self._all_spent(now):
            return Limit.ALL
        return None

    def record(self, source: str, user: str, reason: str, now: float, *, refused: bool = False,
               checked: bool = False) -> list[str]:
        """Count one failure (`checked`: a key derivation ran and failed; `refused`: none ran, the
        source was limited); returns the lines to log now (the first of a window, closed windows)."""
        self.total += 1
        lines: list[str] = []
        window = self._windows.get(source)
        if window is not None and now - window.started_at >= self.window_secs:
            lines += self._close(source)
            window = None
        if window is None:
            if len(self._windows) >= self.max_sources:
                lines += self._close(next(iter(self._windows)))
            window = self._windows[source] = SourceWindow(now, first_user=user)
            lines.append(
                f"authentication failed from {self._name(source)} (user {user[:64]!r}: {reason}); further "
                f"failures from {source} are counted and summarised every {self.window_secs:.0f} s"
            )
        window.failures += 1
        if refused:
            window.refused += 1
            if self._all_spent(now):
                assert self._all is not None
                self._all.refused += 1
        if checked:
            lines += self._checked(now)
        return lines

    def summaries(self, now: float) -> list[str]:
        """Close the windows that have run their time; their summary lines."""
        lines: list[str] = []
        for source in [s for s, w in self._windows.items() if now - w.started_at >= self.window_secs]:
            lines += self._close(source)
        if self._all is not None and now - self._all.started_at >= self.window_secs:
            lines += self._close_all()
        return lines

    # ------------------------------------------------------------ internals

    def _name(self, source: str) -> str:
        return f"{self.kind} source {source}" if self.kind else source

    def _all_spent(self, now: float) -> bool:
        every = self._all
        return every is not None and now - every.started_at < self.window_secs and every.checks >= self.max_checks_all

    def _checked(self, now: float) -> list[str]:
        """One more failed key derivation against the budget of all sources."""
        lines: list[str] = []
        if self._all is not None and now - self._all.started_at >= self.window_secs:
            lines += self._close_all()
        if self._all is None:
            self._all = AllWindow(now)
        self._all.checks += 1
        if self._all.checks == self.max_checks_all:
            kind = f"{self.kind} " if self.kind else ""
            lines.append(
                f"{self.max_checks_all} failed {kind}authentications from all addresses within "
                f"{self.window_secs:.0f} s: credentials not verified before are refused unchecked until "
                f"{self.window_secs - (now - self._all.started_at):.0f} s from now"
            )
        return lines

    def _close(self, source: str) -> list[str]:
        window = self._windows.pop(source)
        more = window.failures - 1
        if more <= 0:
            return []
        refused = f", {window.refused} of them refused unchecked" if window.refused else ""
        return [f"{more} more failed authentications from {self._name(source)} in {self.window_secs:.0f} s{refused}"]

    def _close_all(self) -> list[str]:
        every, self._all = self._all, None
        if every is None or every.checks < self.max_checks_all:
            return []  # the budget was never spent: the per-source lines said it all
        kind = f"{self.kind} " if self.kind else ""
        return [
            f"{every.checks} failed {kind}authentications from all addresses in {self.window_secs:.0f} s "
            f"spent their budget; {every.refused} tries were refused unchecked for it"
        ]
