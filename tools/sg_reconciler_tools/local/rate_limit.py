"""EC2's rate limit on security-group writes, simulated on a faster clock.

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
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from sg_reconciler_tools.local import moto_hooks
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


class Ec2RateLimit:
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
        self._patches: list[moto_hooks.Patch] = []

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

    def _intercept(self, service: str, operation: str, proceed: moto_hooks.Proceed) -> Any:
        if not self._take():
            moto_hooks.raise_service_error(
                service, "RequestLimitExceeded", "Request limit exceeded."
            )
        return proceed()

    # Install and undo ---------------------------------------------------------------------

    def __enter__(self) -> Ec2RateLimit:
        try:
            self._patches.append(patch_pacer(self.sleep, self.now))
            for operation in WRITES:
                self._patches.append(
                    moto_hooks.intercept_api_call(
                        "ec2", operation, self._intercept, layer=moto_hooks.FAULT_LAYER
                    )
                )
            # Retry backoff and Wait states are stubbed to record only; here they take time.
            self._patches.append(self.runtime.retry_sleeps.subscribe(self.sleep))
            self._patches.append(self.runtime.waits.subscribe(self.sleep))
        except BaseException:
            self._undo()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._undo()

    def _undo(self) -> None:
        for patch in reversed(self._patches):
            patch.undo()
        self._patches = []
