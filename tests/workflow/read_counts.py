"""Describes moto serves in one part of an execution, whatever client makes them: the
planner's (until the refresh's first invocation) or those under the locks (from it on)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sg_reconciler_tools.demo.world import DemoWorld
from sg_reconciler_tools.local import interception
from sg_reconciler_tools.local.rate_limit import EC2_READS, ELBV2_DESCRIBES


class Reads:
    def __init__(self, on: bool) -> None:
        self.calls: Counter[str] = Counter()
        self.on = on
        self.lock = threading.Lock()

    def total(self, service: str, operation: str | None = None) -> int:
        return sum(
            n
            for k, n in self.calls.items()
            if k.startswith(f"{service} ") and (operation is None or k == f"{service} {operation}")
        )

    def elbv2(self, operation: str | None = None) -> int:
        return self.total("elbv2", operation)

    def ec2(self) -> int:
        return self.total("ec2")


@contextmanager
def counted_reads(world: DemoWorld, *, under_the_locks: bool) -> Iterator[Reads]:
    """Count the planner's describes (`under_the_locks` False) or the steps' (True)."""
    seen = Reads(on=not under_the_locks)

    def count(service: str, operation: str, proceed: interception.Proceed) -> Any:
        if seen.on:
            with seen.lock:
                seen.calls[f"{service} {operation}"] += 1
        return proceed()

    def refresh(function: str, _event: Any) -> None:
        if function == "RefreshPlanFunction":
            seen.on = under_the_locks

    patches = [world.runtime.before_invoke(refresh)]
    for service, operations in (("elbv2", ELBV2_DESCRIBES), ("ec2", EC2_READS)):
        for operation in operations:
            patches.append(interception.intercept_api_call(service, operation, count))
    try:
        yield seen
    finally:
        for patch in reversed(patches):
            patch.undo()
