"""The pacers: every EC2 write of a step goes through `Pacer` (spacing, and backoff when
throttled), every read of an EC2 or ELBv2 client through `ReadPacer` (a token bucket per
documented AWS bucket, and backoff when throttled).

`clock` and `sleep` are module attributes read at call time, so the local runtime can run
the pacer on a faster clock (`LocalRuntime(time_scale=...)`) without real waiting.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sg_reconciler.core.pacing import Pacing, ReadPace, full_jitter
from sg_reconciler.errors import THROTTLE_CODES, ReadsOutOfTime, Throttled

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


READ_PREFIXES = ("Describe", "Get", "List")
_PACE_HOOK = "sg-reconciler-read-pace"
_RETRY_HOOK = "sg-reconciler-read-retry"


def is_read(operation: str) -> bool:
    return operation.startswith(READ_PREFIXES)


class ReadPacer:
    """Paces the reads of the clients it is installed on with one token bucket per documented
    AWS bucket (ELBv2: one for the service; EC2: one per API), shared by every thread of the
    invocation, and retries a throttled read with full jitter until `deadline` (on `clock`).

    It works through botocore's events, so paginators and threads need nothing: each attempt
    of a read waits for a token before it is sent (`before-send`), and a throttled answer is
    retried here (`needs-retry`) before botocore's own retry policy sees it. Writes pass
    through untouched: `Pacer` paces them and Step Functions retries them.
    """

    def __init__(self, pace: ReadPace, deadline: float | None = None) -> None:
        self.pace, self.deadline = pace, deadline
        self._lock = threading.Lock()
        self._buckets: dict[str, list[float]] = {}  # key -> [tokens, last refill time]
        self.reads = 0  # attempts sent
        self.throttled = 0  # throttled answers retried here
        self.waited = 0.0  # seconds spent waiting for tokens

    def until(self, deadline: float | None) -> ReadPacer:
        """The same buckets, for an invocation that must be done by `deadline`."""
        self.deadline = deadline
        return self

    def install(self, client: Any) -> Any:
        """Pace `client`'s reads (idempotent: a client has at most one read pacer)."""
        service = str(client.meta.service_model.service_name)
        events = client.meta.events
        for event, hook, name in (
            ("before-send", self._before_send, _PACE_HOOK),
            ("needs-retry", self._needs_retry, _RETRY_HOOK),
        ):
            events.unregister(event, unique_id=name)
            events.register_first(event, _for_service(service, hook), unique_id=name)
        return client

    def wait(self, service: str, operation: str) -> None:
        """Take a token of the bucket `operation` draws on, waiting for it when it is empty;
        ReadsOutOfTime when the wait would pass the deadline."""
        pace = self.pace.bucket(service)
        if pace is None or not is_read(operation):
            return
        key = service if service != "ec2" else f"{service}:{operation}"
        with self._lock:
            now = clock()
            tokens, last = self._buckets.get(key, [float(pace.burst), now])
            tokens = min(float(pace.burst), tokens + (now - last) * pace.per_second) - 1
            wait = 0.0 if tokens >= 0 else -tokens / pace.per_second
            if self.deadline is not None and now + wait > self.deadline:
                self._buckets[key] = [tokens + 1, now]
                raise ReadsOutOfTime(
                    f"{service} {operation}: the reads paced at {pace.per_second:g}/s "
                    f"(ReadsPerSecond {self.pace.reads_per_second:g}) cannot finish before "
                    "the function's deadline"
                )
            self._buckets[key] = [tokens, now]  # below zero: turns already promised
            self.reads += 1
            self.waited += wait
        if wait > 0:
            sleep(wait)

    def retry_pause(self, attempt: int) -> float | None:
        """The pause before retrying a throttled read (full jitter), or None when it would
        pass the deadline: the throttle then goes to the caller."""
        pause = full_jitter(attempt, random.random)
        if self.deadline is not None and clock() + pause > self.deadline:
            return None
        return pause

    def _before_send(self, service: str, event_name: str, **_: Any) -> None:
        self.wait(service, event_name.rsplit(".", 1)[-1])

    def _needs_retry(
        self, service: str, event_name: str, response: Any = None, attempts: int = 1, **_: Any
    ) -> float | None:
        operation = event_name.rsplit(".", 1)[-1]
        if response is None or not is_read(operation):
            return None
        code = response[1].get("Error", {}).get("Code", "")
        if code not in THROTTLE_CODES:
            return None  # botocore's policy decides (transient errors)
        pause = self.retry_pause(attempts - 1)
        if pause is None:
            return None
        with self._lock:
            self.throttled += 1
        sleep(pause)  # here, on the pacer's clock; botocore then sleeps 0
        return 0.0


def _for_service(service: str, hook: Callable[..., T]) -> Callable[..., T]:
    def bound(**kwargs: Any) -> T:
        return hook(service, **kwargs)

    return bound
