"""An execution read as the Step Functions console shows it: its events, by state."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def events(stepfunctions: Any, execution_arn: str) -> list[dict[str, Any]]:
    """The execution's full history, every page."""
    paginator = stepfunctions.get_paginator("get_execution_history")
    found: list[dict[str, Any]] = []
    for page in paginator.paginate(executionArn=execution_arn):
        found.extend(dict(event) for event in page["events"])
    return found


def history(found: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(state name, event type) per history event, as the console lists them.

    Execution-level events have no state (""); task and Map events carry the state they
    belong to, found through `previousEventId`.
    """
    by_id = {event["id"]: event for event in found}
    return [(_state_of(event, by_id), str(event["type"])) for event in found]


def transitions(found: list[dict[str, Any]]) -> int:
    """State transitions billed for a Standard workflow: one per state entered."""
    return sum(1 for event in found if event["type"].endswith("StateEntered"))


def largest_state(found: list[dict[str, Any]]) -> tuple[int, str]:
    """The largest input or output any state carried, in bytes (as Step Functions counts
    against its 256 KiB limit), and the state that carried it."""
    by_id = {event["id"]: event for event in found}
    largest = (0, "")
    for event in found:
        for key, details in event.items():
            if not key.endswith("EventDetails") or not isinstance(details, dict):
                continue
            for field in ("input", "output"):
                data = details.get(field)
                if isinstance(data, str) and len(data.encode()) > largest[0]:
                    largest = (len(data.encode()), _state_of(event, by_id) or event["type"])
    return largest


def _state_of(event: Mapping[str, Any], by_id: Mapping[int, Mapping[str, Any]]) -> str:
    """The state an event belongs to ("" for an execution-level event)."""
    if str(event["type"]).startswith("Execution"):
        return ""
    seen: set[int] = set()
    current: Mapping[str, Any] | None = event
    while current is not None and current["id"] not in seen:
        seen.add(current["id"])
        for key, details in current.items():
            if key.endswith("EventDetails") and isinstance(details, Mapping) and "name" in details:
                return str(details["name"])
        current = by_id.get(current.get("previousEventId", 0))
    return ""
