"""Model time per Lambda invocation, for runs whose length on AWS matters (the rollback).

moto answers in microseconds and the local runtime records waits instead of sleeping, so a
local run says nothing about how long an invocation would take on AWS, nor whether it would
finish within its function's timeout. `InvocationClock` gives each handler invocation a
clock of its own: every EC2 call costs `ec2_latency` model seconds, every DynamoDB call
`dynamodb_latency`, and the steps' write pacer (`sg_reconciler.adapters.pacing`) waits on
that clock, so its spacing at `WritesPerSecond` counts as it would in Lambda. A Map's items
run `concurrency` at a time (`makespan`), as Step Functions runs them.

Reads are not paced here (the runtime's default read pace is unpaced): the read pacer's
buckets are shared by the process's threads, whose clocks differ. Dev tooling only.
"""

from __future__ import annotations

import heapq
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from sg_reconciler.adapters import pacing

from sg_reconciler_tools.local import interception, patching
from sg_reconciler_tools.local.rate_limit import EC2_READS
from sg_reconciler_tools.local.runtime import LocalRuntime, patch_pacer

EC2_LATENCY = 0.15  # seconds an EC2 API call takes, answer included (a typical p50)
DYNAMODB_LATENCY = 0.01
EC2_CALLS = EC2_READS + interception.APP_EC2_WRITES  # what the steps and the planner call
DYNAMODB_CALLS = ("GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "BatchWriteItem")


@dataclass
class TimedInvocation:
    """One handler call: its function, event, model seconds and AWS calls by operation."""

    logical_id: str
    event: Any
    seconds: float = 0.0
    calls: Counter[str] = field(default_factory=Counter)


class InvocationClock(patching.PatchSet):
    """Context manager: a model clock per handler invocation of one runtime (above)."""

    def __init__(
        self,
        runtime: LocalRuntime,
        ec2_latency: float = EC2_LATENCY,
        dynamodb_latency: float = DYNAMODB_LATENCY,
    ) -> None:
        self.runtime = runtime
        self.latency = {"ec2": ec2_latency, "dynamodb": dynamodb_latency}
        self.invocations: list[TimedInvocation] = []
        self._current = threading.local()
        self._lock = threading.Lock()

    def of(self, logical_id: str) -> list[TimedInvocation]:
        with self._lock:
            return [i for i in self.invocations if i.logical_id == logical_id]

    # The clock ------------------------------------------------------------------------------

    def _here(self) -> TimedInvocation | None:
        return getattr(self._current, "invocation", None)

    def now(self) -> float:
        here = self._here()
        return here.seconds if here is not None else 0.0

    def sleep(self, seconds: float) -> None:
        here = self._here()
        if here is not None and seconds > 0:
            here.seconds += seconds

    def _started(self, logical_id: str, event: Any) -> None:
        invocation = TimedInvocation(logical_id, event)
        self._current.invocation = invocation
        with self._lock:
            self.invocations.append(invocation)

    def _call(self, service: str, operation: str, proceed: interception.Proceed) -> Any:
        here = self._here()
        if here is not None:
            here.seconds += self.latency[service]
            here.calls[operation] += 1
        return proceed()

    # Install and undo -----------------------------------------------------------------------

    def _install(self) -> Iterator[patching.Patch]:
        yield self.runtime.before_invoke(self._started)
        yield patch_pacer(self.sleep, self.now)
        yield _unpaced_reads()
        for service, operations in (("ec2", EC2_CALLS), ("dynamodb", DYNAMODB_CALLS)):
            yield from interception.intercept_each(
                service, operations, self._call, layer=interception.OBSERVER_LAYER
            )


def makespan(durations: Iterable[float], concurrency: int) -> float:
    """How long items of these durations take, `concurrency` at a time, each started in
    order as soon as a slot is free (as a Map with MaxConcurrency runs them)."""
    slots = [0.0] * max(1, concurrency)
    for seconds in durations:
        start = heapq.heappop(slots)
        heapq.heappush(slots, start + seconds)
    return max(slots)


def longest(invocations: Sequence[TimedInvocation]) -> float:
    return max((i.seconds for i in invocations), default=0.0)


def _unpaced_reads() -> patching.Patch:
    """The process's read pacer lets every read go at once (see the module's note)."""

    def go(self: pacing.ReadPacer, service: str, operation: str) -> None:
        return None

    return patching.replace(pacing.ReadPacer, "wait", go)
