"""The planner's read through the inventory index (docs/architecture.md, "The inventory index").

`record_changes` applies the RegisterTargets and DeregisterTargets events of a batch to the
index (their targets and ports, versioned by the event). `IndexedReads` is the planner's
inventory reader when the deployment keeps an index: the index plus fresh reads of the
event's own objects, or of the schedule's slice (`adapters/index_reads.py`); what it read
fresh goes back into the index, with conditional writes on the version. `held_while_unread`
holds a plan's revokes while the index still lacks target groups the listing shows (it is
being filled): an authorization may come from the index, a revoke never rests on it (under
the locks every revoke that takes traffic away reads its closure fresh,
`compute_locked_plan`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sg_reconciler.core.account import Inventory
from sg_reconciler.core.brake import withhold_revokes
from sg_reconciler.core.index_events import TargetChange, Version
from sg_reconciler.core.inventory_index import (
    KINDS,
    Entry,
    IndexedRead,
    IndexView,
    apply_change,
    gone_entry,
    merge,
)
from sg_reconciler.core.plan import Plan
from sg_reconciler.core.policy import Policy
from sg_reconciler.core.ports import InventoryIndex, InventoryReader
from sg_reconciler.core.scope import Locked, Scope

if TYPE_CHECKING:
    from sg_reconciler.app.live_plan import LivePlan

WRITE_ATTEMPTS = 5  # another writer got there first: read again and merge


def record_changes(index: InventoryIndex, changes: Iterable[TargetChange]) -> int:
    """Apply target (de)registrations to the index; how many entries changed. A target
    group the index does not hold is left to its first read."""
    changed = 0
    for change in changes:
        for _ in range(WRITE_ATTEMPTS):
            stored = index.get("tg", [change.target_group_arn]).get(change.target_group_arn)
            if stored is None or stored.gone:
                break
            updated = apply_change(stored, change)
            if updated is None or updated == stored:
                break
            if index.put(updated, stored.version):
                changed += 1
                break
    return changed


def write_entries(index: InventoryIndex, entries: Sequence[Entry], view: IndexView) -> int:
    """Write what was read fresh, each merged with what the index holds (conditional on the
    version read: a conflict reads the entry again); how many were written."""
    written = 0
    held = {(e.kind, e.key): e for e in view.entries()}
    for entry in entries:
        stored = held.get((entry.kind, entry.key))
        for _ in range(WRITE_ATTEMPTS):
            updated = merge(stored, entry)
            if updated is None:
                break
            if index.put(updated, None if stored is None else stored.version):
                written += 1
                break
            stored = index.get(entry.kind, [entry.key]).get(entry.key)
    return written


def load_view(index: InventoryIndex) -> IndexView:
    return IndexView.of(e for kind in KINDS for e in index.entries(kind))


# `read_through_index` with the deployment's clients bound (adapters/index_reads.IndexFetch)
Fetch = Callable[..., IndexedRead]


@dataclass
class IndexedReads:
    """The planner's inventory reader through the index (an `InventoryReader`); remembers
    what its last read found, for `held_while_unread` and the planner's report. Under the
    locks it reads the account (`account`): a revoke never rests on the index."""

    index: InventoryIndex
    fetch: Fetch
    account: InventoryReader
    now: float
    period_seconds: float
    max_fresh: int
    last: IndexedRead | None = None
    narrowed: bool = False  # an event's narrow read was made in this invocation
    written: int = 0
    notes: list[str] = field(default_factory=list)

    def read(self, narrow: Scope | None = None) -> Inventory:
        view = load_view(self.index)
        # The planner asks for the full read (narrow None) when an event's narrow plan does
        # not stand: the event's objects were just read fresh, so the whole index serves
        # (its revokes are guarded under the locks by fresh reads of their closure).
        again = narrow is None and self.narrowed
        found = self.fetch(
            view,
            scope=narrow,
            now=self.now,
            period_seconds=self.period_seconds,
            max_fresh=self.max_fresh,
            whole_index=again,
        )
        self.narrowed = found.inventory.narrowed_to is not None
        read = Version.of_read(self.now)
        marks = [gone_entry(kind, key, read) for kind, key in found.gone]
        self.written += write_entries(self.index, [*found.fresh, *marks], view)
        self.last = found
        if found.drift:
            self.notes.append(
                f"verification found the index behind on {len(found.drift)} point(s), "
                f"repaired: {'; '.join(found.drift[:5])}"
            )
        return replace(found.inventory, notes=(*found.inventory.notes, *self.notes))

    def read_locked(self, locked: Locked) -> Inventory:
        return self.account.read_locked(locked)


def held_while_unread(live: LivePlan, reads: IndexedReads) -> LivePlan:
    """While the index lacks target groups the listing shows (it is being filled, a few
    hundred a run), or the plan took target groups from entries older than the verification
    period, nothing is revoked: the traffic of those target groups is not known well enough.
    The schedule reads them (the missing and the oldest first) and the next run plans them."""
    found = reads.last
    if found is None or not (found.unread or found.stale) or not isinstance(live.result, Plan):
        return live
    parts = []
    if found.unread:
        parts.append(f"does not hold {found.unread} target group(s) yet (it is being filled)")
    if found.stale:
        parts.append(f"holds {found.stale} target group(s) older than the verification period")
    reason = f"the inventory index {' and '.join(parts)}: revokes wait until it is read"
    return replace(live, result=withhold_revokes(live.result, reason, reason, live.current))


def uses_index(policy: Policy) -> bool:
    """Whether the index serves this policy: bindings that admit load balancers by address
    read subnets and client settings the index does not keep, so they read the account."""
    return all(b.source != "load_balancer_addresses" for b in policy.desired_settings().bindings)


def target_changes(
    records: Iterable[tuple[str, Any]],
) -> list[TargetChange]:
    """The target changes the relevant records carry."""
    return [c for _, parsed in records for c in getattr(parsed, "changes", ())]
