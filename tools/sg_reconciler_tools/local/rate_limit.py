"""AWS's rate limits, simulated in front of moto on a model clock: EC2's on security-group
writes (`Ec2RateLimit`), and the documented read buckets of EC2 and ELBv2 (`AwsReadLimits`).

AWS throttles EC2's mutating calls per account and region with a token bucket (about 50
tokens, refilled about 5 a second). `Ec2RateLimit` puts such a bucket in front of moto's
AuthorizeSecurityGroupIngress, RevokeSecurityGroupIngress and ModifySecurityGroupRules:
a call finding it empty fails with `RequestLimitExceeded` and changes nothing. Time runs
`time_scale` times faster than the wall clock for everything that waits in a run: the
bucket's refill, the steps' pacer, Step Functions' Retry backoff and Wait states. A large
change then runs under the limit in seconds, with real threads and no hand-written schedule.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from sg_reconciler_tools.local import interception, patching
from sg_reconciler_tools.local.runtime import LocalRuntime, patch_pacer

WRITES = ("AuthorizeSecurityGroupIngress", "RevokeSecurityGroupIngress", "ModifySecurityGroupRules")


@dataclass
class RateLimitStats:
    writes: int = 0  # calls that took a token
    throttled: int = 0  # calls refused
    first: float | None = None  # simulated time of the first write call
    last: float = 0.0  # ... and of the last one

    @property
    def seconds(self) -> float:
        """Simulated seconds from the first write call to the last."""
        return 0.0 if self.first is None else self.last - self.first

    def as_dict(self) -> dict[str, float]:
        return {
            "writes": self.writes,
            "throttled": self.throttled,
            "seconds": round(self.seconds, 1),
        }


class Ec2RateLimit(patching.PatchSet):
    """Context manager: the bucket on EC2 writes and the faster clock, for one runtime."""

    def __init__(
        self,
        runtime: LocalRuntime,
        capacity: int = 50,
        refill_per_second: float = 5.0,
        time_scale: float = 5.0,
    ) -> None:
        if capacity < 1 or refill_per_second <= 0 or time_scale <= 0:
            raise ValueError("capacity, refill and time scale must be positive")
        self.runtime, self.capacity, self.refill = runtime, capacity, refill_per_second
        self.time_scale = time_scale
        self.stats = RateLimitStats()
        self._tokens = float(capacity)
        self._last = 0.0
        self._lock = threading.Lock()

    # The simulated clock -----------------------------------------------------------------

    def now(self) -> float:
        """Simulated seconds (wall-clock seconds times the scale)."""
        return time.monotonic() * self.time_scale

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds / self.time_scale)

    def floor(self) -> float:
        """The fewest simulated seconds the writes made could take: what the burst does not
        cover, at the refill rate."""
        return max(0.0, (self.stats.writes - self.capacity) / self.refill)

    # The bucket ---------------------------------------------------------------------------

    def _take(self) -> bool:
        """The bucket starts full at the first write: the reads before it (the planner, the
        refresh) run at moto's speed, not EC2's, and must not count as refill time."""
        with self._lock:
            now = self.now()
            if self.stats.first is None:
                self.stats.first = self._last = now
            self._tokens = min(self.capacity, self._tokens + (now - self._last) * self.refill)
            self._last = self.stats.last = now
            if self._tokens >= 1:
                self._tokens -= 1
                self.stats.writes += 1
                return True
            self.stats.throttled += 1
            return False

    def _intercept(self, service: str, operation: str, proceed: interception.Proceed) -> Any:
        if not self._take():
            raise interception.AwsError("RequestLimitExceeded", "Request limit exceeded.")
        return proceed()

    # Install and undo ---------------------------------------------------------------------

    def _install(self) -> Iterator[patching.Patch]:
        yield patch_pacer(self.sleep, self.now)
        yield from interception.intercept_each("ec2", WRITES, self._intercept)
        # Retry backoff and Wait states are stubbed to record only; here they take time.
        yield self.runtime.retry_sleeps.subscribe(self.sleep)
        yield self.runtime.waits.subscribe(self.sleep)


# Reads -----------------------------------------------------------------------------------------
# AWS's documented read buckets, per account and region:
# - "Request throttling for the Elastic Load Balancing API": every ELBv2 Describe* call
#   draws on one bucket of 40 tokens refilled at 10 a second; every ELBv2 call of the account
#   (the AWS Load Balancer Controller's RegisterTargets included) also draws on an
#   account-level bucket of 40 refilled at 10 a second. A call finding a bucket empty fails
#   with `ThrottlingException`, message "Rate exceeded".
# - "Request throttling for the Amazon EC2 API": each read API has its own bucket of 100
#   refilled at 20 a second; unfiltered and unpaginated DescribeSecurityGroups,
#   DescribeInstances and DescribeNetworkInterfaces have 50 refilled at 10. A call finding
#   its bucket empty fails with `RequestLimitExceeded`.
# moto throttles nothing; `AwsReadLimits` puts these buckets in front of it.

ELBV2_DESCRIBES = (
    "DescribeLoadBalancers",
    "DescribeTags",
    "DescribeTargetGroups",
    "DescribeTargetHealth",
    "DescribeTargetGroupAttributes",
    "DescribeListeners",
    "DescribeRules",
)
ELBV2_OTHER_CALLS = ("RegisterTargets", "DeregisterTargets")  # account bucket only
EC2_READS = (
    "DescribeSecurityGroupRules",
    "DescribeSecurityGroups",
    "DescribeInstances",
    "DescribeNetworkInterfaces",
    "DescribeSubnets",
    "DescribeVpcs",
    "DescribeManagedPrefixLists",
)
EC2_SMALL_WHEN_UNFILTERED = frozenset(
    {"DescribeSecurityGroups", "DescribeInstances", "DescribeNetworkInterfaces"}
)
ELBV2_DESCRIBE_BUCKET = "elbv2 Describe*"
ELBV2_ACCOUNT_BUCKET = "elbv2 account"
THROTTLE_ERRORS = {
    "elbv2": ("ThrottlingException", "Rate exceeded"),
    "ec2": ("RequestLimitExceeded", "Request limit exceeded."),
}


class ManualClock:
    """A clock that moves only when slept on: exact, for one thread (the model's tests)."""

    def __init__(self) -> None:
        self.time = 0.0

    def now(self) -> float:
        return self.time

    def sleep(self, seconds: float) -> None:
        self.time += max(0.0, seconds)


class ScaledClock:
    """A model clock for real threads: wall-clock seconds times `scale`, standing still while
    moto serves a call (`serving`), so that a call costs the model's latency, not moto's
    speed on this machine. `sleep` waits until the model time has passed."""

    def __init__(self, scale: float) -> None:
        if scale <= 0:
            raise ValueError("the time scale must be positive")
        self.scale = scale
        self._lock = threading.Lock()
        self._inside = 0  # calls moto is serving now
        self._since = 0.0  # wall time the first of them began
        self._frozen = 0.0  # wall seconds spent serving, before that

    def now(self) -> float:
        with self._lock:
            wall = time.monotonic()
            frozen = self._frozen + (wall - self._since if self._inside else 0.0)
            return (wall - frozen) * self.scale

    def sleep(self, seconds: float) -> None:
        target = self.now() + seconds
        while (left := target - self.now()) > 0:
            time.sleep(max(left / self.scale, 1e-4))

    @contextmanager
    def serving(self) -> Iterator[None]:
        with self._lock:
            if self._inside == 0:
                self._since = time.monotonic()
            self._inside += 1
        try:
            yield
        finally:
            with self._lock:
                self._inside -= 1
                if self._inside == 0:
                    self._frozen += time.monotonic() - self._since


@dataclass
class Bucket:
    capacity: float
    refill: float  # tokens a second
    tokens: float = -1.0  # full at the first call
    last: float | None = None

    def level(self, now: float) -> float:
        if self.last is None:
            self.tokens, self.last = self.capacity, now
        self.tokens = min(self.capacity, self.tokens + max(0.0, now - self.last) * self.refill)
        self.last = max(self.last, now)
        return self.tokens


@dataclass
class ReadLimitStats:
    calls: dict[str, int] = field(default_factory=dict)  # "service Operation" -> answered
    throttled: dict[str, int] = field(default_factory=dict)  # ... -> refused
    first: float | None = None  # model time of the first call
    last: float = 0.0

    def count(self, service: str, refused: bool = False) -> int:
        table = self.throttled if refused else self.calls
        return sum(n for key, n in table.items() if key.startswith(service + " "))

    @property
    def seconds(self) -> float:
        return 0.0 if self.first is None else self.last - self.first


class AwsReadLimits(patching.PatchSet):
    """Context manager: AWS's read buckets (above) in front of moto, on a model clock.

    Every attempt of a call takes a token from each bucket it draws on, or fails with the
    service's throttling error and takes none. Each answer takes at least `latency` model
    seconds. botocore's own retry sleeps and the product's pacers run on the
    same clock, so a run under the model measures what AWS would do, with the real retry
    code. The clock is a `ScaledClock` (real threads: a whole execution) or a `ManualClock`
    (one thread, exact)."""

    def __init__(
        self,
        runtime: LocalRuntime | None = None,
        *,
        clock: ManualClock | ScaledClock | None = None,
        latency: float = 0.05,
    ) -> None:
        self.runtime = runtime
        self.clock = clock or ScaledClock(20.0)
        self.latency = latency
        self.stats = ReadLimitStats()
        self._buckets: dict[str, Bucket] = {}
        self._lock = threading.Lock()

    def now(self) -> float:
        return self.clock.now()

    def sleep(self, seconds: float) -> None:
        self.clock.sleep(seconds)

    # The buckets ---------------------------------------------------------------------------

    def buckets_for(self, service: str, operation: str, filtered: bool) -> list[str]:
        if service == "elbv2":
            names = [ELBV2_ACCOUNT_BUCKET]
            if operation.startswith("Describe"):
                names.append(ELBV2_DESCRIBE_BUCKET)
            return names
        small = operation in EC2_SMALL_WHEN_UNFILTERED and not filtered
        return [f"ec2 {operation}" + (" (unfiltered)" if small else "")]

    def _bucket(self, name: str) -> Bucket:
        if name not in self._buckets:
            capacity, refill = 40.0, 10.0
            if name.startswith("ec2 "):
                capacity, refill = (50.0, 10.0) if name.endswith("(unfiltered)") else (100.0, 20.0)
            self._buckets[name] = Bucket(capacity, refill)
        return self._buckets[name]

    def drain(self, service: str) -> None:
        """Empty `service`'s buckets now, as a burst of another tool would."""
        with self._lock:
            now = self.now()
            names = [ELBV2_ACCOUNT_BUCKET, ELBV2_DESCRIBE_BUCKET] if service == "elbv2" else []
            names += [n for n in self._buckets if n.startswith(service + " ")]
            for name in names:
                bucket = self._bucket(name)
                bucket.level(now)
                bucket.tokens = 0.0

    def take(self, service: str, operation: str, filtered: bool = True) -> bool:
        """One call's tokens, or False (throttled) when a bucket it draws on is empty."""
        with self._lock:
            now = self.now()
            if self.stats.first is None:
                self.stats.first = now
            self.stats.last = max(self.stats.last, now)
            buckets = [self._bucket(n) for n in self.buckets_for(service, operation, filtered)]
            key = f"{service} {operation}"
            if all(b.level(now) >= 1 for b in buckets):
                for bucket in buckets:
                    bucket.tokens -= 1
                self.stats.calls[key] = self.stats.calls.get(key, 0) + 1
                return True
            self.stats.throttled[key] = self.stats.throttled.get(key, 0) + 1
            return False

    def _intercept(self, service: str, operation: str, proceed: interception.Proceed) -> Any:
        params = interception.current_request_params()
        filtered = any(k.startswith(("Filter.", "MaxResults", "NextToken")) for k in params)
        filtered |= any(k.endswith("Id.1") or k.startswith("GroupId") for k in params)
        start = self.now()
        allowed = self.take(service, operation, filtered)
        try:
            if not allowed:
                code, message = THROTTLE_ERRORS[service]
                raise interception.AwsError(code, message)
            if isinstance(self.clock, ScaledClock):
                with self.clock.serving():
                    return proceed()
            return proceed()
        finally:
            self.sleep(self.latency - (self.now() - start))
            with self._lock:
                self.stats.last = max(self.stats.last, self.now())

    # Install and undo ---------------------------------------------------------------------

    def _install(self) -> Iterator[patching.Patch]:
        yield patch_pacer(self.sleep, self.now)
        yield _patch_botocore_sleep(self.sleep)
        yield _quiet_unmodelled_throttle()
        elbv2 = ELBV2_DESCRIBES + ELBV2_OTHER_CALLS
        yield from interception.intercept_each("elbv2", elbv2, self._intercept)
        yield from interception.intercept_each("ec2", EC2_READS, self._intercept)
        if self.runtime is not None:
            yield self.runtime.retry_sleeps.subscribe(self.sleep)
            yield self.runtime.waits.subscribe(self.sleep)


def _patch_botocore_sleep(sleep: Callable[[float], None]) -> patching.Patch:
    """botocore's retries sleep with `time.sleep` in `botocore.endpoint`: on the model's clock."""
    import botocore.endpoint

    return patching.replace(botocore.endpoint, "time", SimpleNamespace(sleep=sleep))


def _quiet_unmodelled_throttle() -> patching.Patch:
    """moto warns that ELBv2's service model lists no `ThrottlingException` shape; AWS
    returns that code all the same (see above), and botocore reads it from the answer."""
    saved = list(warnings.filters)
    warnings.filterwarnings("ignore", message=r".*ThrottlingException does not match an error")

    def undo() -> None:
        warnings.resetwarnings()
        for entry in reversed(saved):
            warnings.filters.insert(0, entry)  # type: ignore[attr-defined]

    return patching.Patch("warnings: unmodelled ThrottlingException", undo)
