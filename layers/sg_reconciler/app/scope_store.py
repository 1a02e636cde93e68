"""The event scope a plan came from by a narrow read (core/narrow.py), in the plan store,
beside the plan's groups (keyed by its hash): a plan refreshed from the planner's read (one
the planner did not store what it planned for, app/planned.py) reads the same way. A plan
from a full read clears it: the same steps may come from either."""

from __future__ import annotations

from sg_reconciler.core.ports import PlanStorage
from sg_reconciler.core.scope import Scope

SCOPE_PART = "scope"
ITEMS_PER_PART = 500


def put_scope(store: PlanStorage, key: str, scope: Scope | None) -> None:
    items = [] if scope is None else scope.items()
    store.put_phase(
        key,
        SCOPE_PART,
        [items[i : i + ITEMS_PER_PART] for i in range(0, len(items), ITEMS_PER_PART)],
    )


def stored_scope(store: PlanStorage, key: str) -> Scope | None:
    """The event scope a stored plan was planned narrowly from; None when it was not."""
    items = store.phase(key, SCOPE_PART)
    return Scope.from_items(items) if items else None
