"""The steps' reader under the locks with the inventory index (docs/architecture.md, "Reads").

A revoke that takes traffic away is guarded by fresh reads of exactly the target groups
whose traffic it could remove, chosen from the index (`core/revoke_closure.py`,
`adapters/locked_index_reads.py`); what those reads find goes back into the index, each
entry conditional on the version it replaces (`write_entries`), so a missing, old or
contradicted entry is repaired as well as reported. Every other read is the account's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sg_reconciler.app.indexed_plan import load_view, write_entries
from sg_reconciler.core.account import Inventory
from sg_reconciler.core.ports import InventoryIndex, InventoryReader
from sg_reconciler.core.revoke_closure import LockedIndexRead
from sg_reconciler.core.scope import Locked, Scope

# `read_locked_through_index` with the deployment's clients bound
# (adapters/locked_index_reads.LockedIndexFetch)
LockedFetch = Callable[..., LockedIndexRead]


@dataclass
class IndexedLockedReads:
    """An `InventoryReader` for the steps under the locks: the closure of a revoke through
    the index, everything else from `account`."""

    index: InventoryIndex
    fetch: LockedFetch
    account: InventoryReader
    now: float
    period_seconds: float
    written: int = 0
    reads: list[tuple[int, int]] = field(default_factory=list)  # (read fresh, closure) a read

    def read(self, narrow: Scope | None = None) -> Inventory:
        return self.account.read(narrow)

    def read_locked(self, locked: Locked) -> Inventory:
        if not locked.peers or locked.lost is None:
            return self.account.read_locked(locked)
        view = load_view(self.index)
        found = self.fetch(view, locked, now=self.now, period_seconds=self.period_seconds)
        self.written += write_entries(self.index, found.fresh, view)
        self.reads.append((found.read_fresh, found.closure))
        return found.inventory
