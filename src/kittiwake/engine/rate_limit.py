"""A token bucket per queue: the broker-wide rate limit of leases.

Workers name a rate when they lease (`LeaseRequest.rate_per_sec`), and the
broker grants at most that many tasks per second from the queue across every
worker and process, since all leases pass through this one engine. The bucket
holds up to `burst` tokens (default: one second's worth, at least one) and
refills continuously; time is passed in. The limit is soft state: the last
lease that names a rate sets it, and a restart starts with a full bucket.
"""

from __future__ import annotations


class TokenBucket:
    __slots__ = ("rate_per_sec", "burst", "tokens", "updated_at")

    def __init__(self, rate_per_sec: float, burst: float, now: float) -> None:
        self.rate_per_sec = rate_per_sec
        self.burst = burst
        self.tokens = burst
        self.updated_at = now

    def configure(self, rate_per_sec: float, burst: float, now: float) -> None:
        self.refill(now)
        self.rate_per_sec = rate_per_sec
        self.burst = burst
        self.tokens = min(self.tokens, burst)

    def refill(self, now: float) -> None:
        elapsed = now - self.updated_at
        if elapsed > 0:
            self.tokens = min(self.burst, self.tokens + elapsed * self.rate_per_sec)
        self.updated_at = now

    def available(self, now: float) -> int:
        """Whole tokens that may be spent now."""
        self.refill(now)
        return int(self.tokens)

    def spend(self, count: int) -> None:
        self.tokens -= count

    def next_token_at(self, now: float) -> float:
        """When the next whole token will be there."""
        self.refill(now)
        missing = 1.0 - self.tokens
        return now if missing <= 0 else now + missing / self.rate_per_sec
