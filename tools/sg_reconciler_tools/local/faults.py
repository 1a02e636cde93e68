"""Inject AWS errors into moto calls: throttling, denials, and writes whose response is lost.

A `Fault` makes the next `count` calls of one API operation fail with an AWS error code,
either before moto runs the call ("before": nothing changes) or after ("after": the call
took effect but the caller sees an error, as when a response is lost). The injector works
for boto3 clients, handlers and the Step Functions interpreter alike, because it runs in
botocore's `before-send` event around moto's answer (see `interception.intercept_api_call`).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from sg_reconciler_tools.local import interception, patching

FaultMode = Literal["before", "after"]


@dataclass(frozen=True)
class Fault:
    """The next `count` calls of `service:operation` fail with `error_code`."""

    service: str  # "ec2", "dynamodb", "stepfunctions", "lambda"
    operation: str  # the AWS API action, e.g. "AuthorizeSecurityGroupIngress"
    error_code: str  # e.g. "RequestLimitExceeded"
    count: int = 1
    mode: FaultMode = "before"
    message: str = "injected fault"

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"a fault fires at least once, not {self.count} times")
        if self.mode not in ("before", "after"):
            raise ValueError(f"mode must be 'before' or 'after', not {self.mode!r}")
        if self.service not in interception.SERVICES:
            known = ", ".join(interception.SERVICES)
            raise ValueError(f"cannot inject faults into {self.service!r}; known: {known}")

    def __str__(self) -> str:
        return f"{self.service}:{self.operation} -> {self.error_code} ({self.mode}, x{self.count})"


@dataclass(frozen=True)
class FiredFault:
    """One injected error: which fault, and which call of the operation it hit (1-based)."""

    fault: Fault
    call_number: int


class FaultInjector(patching.PatchSet):
    """Context manager that installs faults and records which fired.

    Faults on one operation fire in the order given: the first with calls left wins.
    """

    def __init__(self, *faults: Fault) -> None:
        self._faults = list(faults)
        self._remaining = {index: fault.count for index, fault in enumerate(faults)}
        self._calls: Counter[tuple[str, str]] = Counter()
        self._fired: list[FiredFault] = []
        self._lock = threading.Lock()

    def _install(self) -> Iterator[patching.Patch]:
        for service, operation in dict.fromkeys((f.service, f.operation) for f in self._faults):
            yield interception.intercept_api_call(service, operation, self._intercept)

    @property
    def fired(self) -> list[FiredFault]:
        with self._lock:
            return list(self._fired)

    def calls(self, service: str, operation: str) -> int:
        """How many calls of the operation moto received while the injector was active."""
        with self._lock:
            return self._calls[(service, operation)]

    def remaining(self, fault: Fault) -> int:
        """Calls the fault will still fail (the first fault equal to `fault`)."""
        with self._lock:
            index = self._faults.index(fault)
            return self._remaining[index]

    @property
    def exhausted(self) -> bool:
        with self._lock:
            return not any(self._remaining.values())

    def _take(self, service: str, operation: str) -> tuple[Fault | None, int]:
        with self._lock:
            self._calls[(service, operation)] += 1
            number = self._calls[(service, operation)]
            for index, fault in enumerate(self._faults):
                if (fault.service, fault.operation) == (service, operation) and self._remaining[
                    index
                ]:
                    self._remaining[index] -= 1
                    return fault, number
            return None, number

    def _intercept(self, service: str, operation: str, proceed: interception.Proceed) -> Any:
        fault, number = self._take(service, operation)
        if fault is None:
            return proceed()
        if fault.mode == "after":
            proceed()  # applied; a real error from moto wins over the injected one
        with self._lock:
            self._fired.append(FiredFault(fault, number))
        raise interception.AwsError(fault.error_code, fault.message)
