"""What the trigger needs of the inventory index, without the index: when something was
true (`Version`) and what a target event says (`TargetChange`).

Apart so that the planner classifies an event without loading the index and the account
model (cold start: import only what the event needs); `inventory_index` orders its writes
by these versions.
"""

from __future__ import annotations

import calendar
import time
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Version:
    """When something was true: an event's time and id, or a read's time (its tie "!" and
    the microseconds).

    Text order is time order: times are UTC, fixed width, to the second (CloudTrail's
    precision). A read sorts before an event of the same second ("!" sorts before any event
    id): the event may have come after the read, so it is applied again (applying an event is
    idempotent). Reads of one second are ordered by their microseconds, so a later read is
    never taken for the same word as an earlier one (two runs a second apart, or less)."""

    time: str  # "YYYY-MM-DDTHH:MM:SSZ"
    tie: str = ""

    def text(self) -> str:
        return f"{self.time}#{self.tie}"

    @classmethod
    def parse(cls, text: str) -> Version:
        moment, _, tie = text.partition("#")
        return cls(moment, tie)

    @classmethod
    def of_event(cls, event_time: str | None, event_id: str) -> Version | None:
        """An event's version; None when it has no readable time (then it is not applied:
        the fresh read and the schedule's verification cover it)."""
        if not event_time:
            return None
        try:
            seconds = calendar.timegm(time.strptime(event_time[:19], "%Y-%m-%dT%H:%M:%S"))
        except ValueError:
            return None
        return cls(_utc(seconds), event_id)

    @classmethod
    def of_read(cls, now: float) -> Version:
        return cls(_utc(now), f"!{int(now % 1 * 1_000_000):06d}")

    def seconds(self) -> float:
        return float(calendar.timegm(time.strptime(self.time, "%Y-%m-%dT%H:%M:%SZ")))


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


@dataclass(frozen=True)
class TargetChange:
    """What a RegisterTargets or DeregisterTargets event says: the targets and their ports."""

    target_group_arn: str
    registered: bool
    targets: tuple[tuple[str, int | None], ...]
    version: Version
