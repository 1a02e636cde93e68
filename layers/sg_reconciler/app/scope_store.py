"""The event scope a plan was planned from by a narrow read, kept beside its groups in the
plan store, so that the refresh under the locks reads narrowly too (core/narrow.py)."""

from __future__ import annotations

from sg_reconciler.core.ports import PlanStorage
from sg_reconciler.core.scope import Scope

SCOPE_PART = "scope"
ITEMS_PER_PART = 500


def put_scope(store: PlanStorage, key: str, scope: Scope) -> None:
    items = scope.items()
    store.put_phase(
        key,
        SCOPE_PART,
        [items[i : i + ITEMS_PER_PART] for i in range(0, len(items), ITEMS_PER_PART)],
    )


def stored_scope(store: PlanStorage, key: str) -> Scope | None:
    """The event scope a stored plan was planned narrowly from; None when it was not."""
    items = store.phase(key, SCOPE_PART)
    return Scope.from_items(items) if items else None
