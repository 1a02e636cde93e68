"""Pacing writes at EC2's rate limit (docs/architecture.md, "Pacing").

EC2's mutating calls share one token bucket per account and region (about 50 tokens,
refilled about 5 a second, per AWS's documentation): a large change that fires every write
at once drains it and, throttled past its retries, rolls back. One setting, writes per
second, sets how many Map items run at once and how far apart each item spaces its own
writes, so that together they stay at the refill rate; a throttled call backs off with full
jitter (AWS's "Exponential Backoff And Jitter") for as long as the step may run.

Reads are paced the same way (`ReadPace`), at a share of AWS's documented read buckets, so
that the reconciler never spends the budget the other tools of the account need.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_WRITES_PER_SECOND = 5.0
BURST = 40  # of the bucket's 50: the first items may spend it at once, 10 stay for others
MAX_CONCURRENCY = 10  # Map items at once, whatever the rate
BACKOFF_BASE_SECONDS = 0.5
BACKOFF_CAP_SECONDS = 20.0


@dataclass(frozen=True)
class ItemPacing:
    interval: float  # seconds between two writes of one item
    free_writes: int  # writes the item may make at once first (its share of the burst)


@dataclass(frozen=True)
class Pacing:
    writes_per_second: float
    concurrency: int  # Map items at once

    def for_item(self, batch: int, batches: int) -> ItemPacing:
        """How one Map item of a phase with `batches` items paces its writes: the items that
        run together make `writes_per_second` between them, and those of the first round
        share the burst."""
        active = max(1, min(self.concurrency, batches))
        return ItemPacing(
            interval=active / self.writes_per_second,
            free_writes=BURST // active if batch < active else 0,
        )


def pacing_for(writes_per_second: float = DEFAULT_WRITES_PER_SECOND) -> Pacing:
    """A few items at once (a slow item does not stall the rate), each paced."""
    if writes_per_second <= 0:
        raise ValueError(f"writes per second must be positive, not {writes_per_second}")
    concurrency = max(1, min(MAX_CONCURRENCY, math.ceil(writes_per_second / 2)))
    return Pacing(writes_per_second, concurrency)


def full_jitter(attempt: int, random: Callable[[], float]) -> float:
    """The wait before retry `attempt` (0-based): uniform in [0, min(cap, base * 2^attempt)]."""
    return float(random() * min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2.0**attempt))


# Reads ---------------------------------------------------------------------------------------
# AWS's documented read buckets, per account and region, shared with every other tool there
# ("Request throttling for the Elastic Load Balancing API", "Request throttling for the
# Amazon EC2 API"): every ELBv2 Describe* draws on one bucket (and every ELBv2 call on an
# account-level one of the same size); EC2 has a bucket per read API.
ELBV2_READ_BUCKET = (40, 10.0)  # capacity, refill per second
EC2_READ_BUCKET = (100, 20.0)  # per API (50 / 10 unfiltered, unpaginated: never made here)
DEFAULT_READS_PER_SECOND = 1.0  # ELBv2 describes a second: a tenth of the refill
# The inventory index is re-read whole every 12 hours: at the schedule's 15 minutes, 48 runs
# share it, so 3,000 target groups cost 63 DescribeTargetHealth a run (docs/architecture.md).
DEFAULT_VERIFICATION_PERIOD_SECONDS = 43_200


@dataclass(frozen=True)
class BucketPace:
    """How fast one bucket's share is spent: `per_second` sustained, `burst` at once."""

    per_second: float
    burst: int


@dataclass(frozen=True)
class ReadPace:
    """The reads one invocation makes: `reads_per_second` ELBv2 describes a second, and the
    same share of every other documented bucket (EC2: twice as many per API, as its refill
    is twice ELBv2's). The default, 1, leaves 90% of each bucket to the other tools of the
    account, the AWS Load Balancer Controller first."""

    reads_per_second: float = DEFAULT_READS_PER_SECOND

    @property
    def share(self) -> float:
        """The share of each documented bucket (refill and capacity) this pace spends."""
        return self.reads_per_second / ELBV2_READ_BUCKET[1]

    def bucket(self, service: str) -> BucketPace | None:
        """The pace of `service`'s read bucket (one for ELBv2, one per API for EC2); None for
        a service whose reads are few and not paced (SSM, Service Quotas, DynamoDB)."""
        documented = {"elbv2": ELBV2_READ_BUCKET, "ec2": EC2_READ_BUCKET}.get(service)
        if documented is None:
            return None
        capacity, refill = documented
        return BucketPace(refill * self.share, max(1, math.floor(capacity * self.share)))


def read_pace(reads_per_second: float = DEFAULT_READS_PER_SECOND) -> ReadPace:
    if reads_per_second <= 0:
        raise ValueError(f"reads per second must be positive, not {reads_per_second}")
    return ReadPace(reads_per_second)
