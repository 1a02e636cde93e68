"""The pacer every EC2 write of a step goes through: spacing, and backoff when throttled.

`clock` and `sleep` are module attributes read at call time, so the local runtime can run
the pacer on a faster clock (`LocalRuntime(time_scale=...)`) without real waiting.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from sg_reconciler.core.pacing import Pacing, full_jitter
from sg_reconciler.errors import Throttled

T = TypeVar("T")

clock: Callable[[], float] = time.monotonic
sleep: Callable[[float], None] = time.sleep


class Pacer:
    """Spaces one step's writes as its item's pacing says; retries a throttled write with
    full jitter until `deadline` (on `clock`), then lets Throttled go to Step Functions'
    Retry."""

    def __init__(self, pacing: Pacing, deadline: float | None = None) -> None:
        self.pacing, self.deadline = pacing, deadline
        self.item = pacing.for_item(0, 1)
        self._free = self.item.free_writes
        self._next = 0.0
        self._lock = threading.Lock()
        self.throttled = 0  # throttled answers seen, for the step's log

    def fit(self, batch: int, batches: int) -> None:
        """Pace as item `batch` of a phase of `batches` items."""
        self.item = self.pacing.for_item(batch, batches)
        self._free = self.item.free_writes

    def call(self, write: Callable[[], T]) -> T:
        attempt = 0
        while True:
            self._wait_turn()
            try:
                return write()
            except Throttled:
                self.throttled += 1
                pause = full_jitter(attempt, random.random)
                if self.deadline is not None and clock() + pause > self.deadline:
                    raise
                sleep(pause)
                attempt += 1

    def _wait_turn(self) -> None:
        with self._lock:
            now = clock()
            if self._free > 0:
                self._free -= 1
                self._next = now + self.item.interval
                return
            start = max(now, self._next)
            self._next = start + self.item.interval
        if start > now:
            sleep(start - now)
