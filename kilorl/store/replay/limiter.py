"""Reverb's rate limiter: keeps sampled rows near ``samples_per_insert`` × inserted rows.

The count ``diff = inserted × spi − sampled`` must stay within ``tolerance`` of its target
(``spi × min_size_to_sample``, Reverb's offset). A call is admitted when one more row of its
kind would keep it inside; the whole call then counts, so the count strays by at most one
call's rows and comes back. Because the band is at least ``max(1, spi)`` wide on each side,
whenever one side is refused the other is admitted: two sides that keep calling never
deadlock. Waiting is the caller's (``RateLimiter`` only decides and counts).
"""

from __future__ import annotations

from kilorl.store.replay.spec import LimiterSpec


class RateLimiter:
    """Admission and accounting for one table's inserts and samples."""

    def __init__(self, spec: LimiterSpec) -> None:
        self.spi = spec.samples_per_insert
        self.min_size = spec.min_size_to_sample
        tol = spec.tolerance if spec.tolerance is not None else max(1.0, self.spi or 1.0)
        offset = (self.spi or 0.0) * self.min_size
        self.min_diff, self.max_diff = offset - tol, offset + tol
        self.inserted = 0
        self.sampled = 0
        self.blocked_insert_s = 0.0
        self.blocked_sample_s = 0.0

    @property
    def diff(self) -> float:
        return self.inserted * (self.spi or 0.0) - self.sampled

    def can_insert(self, size: int) -> bool:
        if self.spi is None or size < self.min_size:
            return True
        return self.diff + self.spi <= self.max_diff

    def can_sample(self, size: int) -> bool:
        if size < self.min_size:
            return False
        return self.spi is None or self.diff - 1 >= self.min_diff

    def inserted_rows(self, k: int) -> None:
        self.inserted += k

    def sampled_rows(self, k: int) -> None:
        self.sampled += k

    def stats(self) -> dict[str, float]:
        return {"blocked_insert_s": self.blocked_insert_s, "blocked_sample_s": self.blocked_sample_s,
                "samples_per_insert": (self.sampled / self.inserted) if self.inserted else 0.0}
