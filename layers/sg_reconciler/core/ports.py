"""Ports: what the use cases (`sg_reconciler.app`) need of the world outside, as Protocols.

The adapters (`sg_reconciler.adapters`) satisfy them structurally, with their method names
and signatures as they are; `sg_reconciler.wiring` has mypy check it. The tests' in-memory
fakes (`tests/fakes.py`) satisfy them too, so the steps' branches run without moto.

- `RuleStore`: a security group's ingress rules (`adapters.security_groups.SecurityGroupRules`).
- `LockStore`: one lock per group, with a lease (`adapters.locks.GroupLocks`).
- `PlanStorage`: a plan's groups and its phases' batches (`adapters.plan_store.PlanStore`).
- `InventoryReader`: the account as the desired state needs it
  (`adapters.inventory.AccountInventory`).
- `ExecutionStarter`: start the apply state machine (`wiring.execution_starter`).
- `RevocationWindow`: the brake's memory of removals let through
  (`adapters.deployment.RevocationLog`).
- `InventoryIndex`: the inventory kept from events (`adapters.index_table.IndexTable`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

from sg_reconciler.core.rules import PLAN_TAG_KEY

if TYPE_CHECKING:  # types only: a step that types against a port loads no planner (cold start)
    from sg_reconciler.core.account import Inventory
    from sg_reconciler.core.brake import WindowCount
    from sg_reconciler.core.index_events import Version
    from sg_reconciler.core.inventory_index import Entry, Kind
    from sg_reconciler.core.plan import Adopt
    from sg_reconciler.core.rules import Rule, RuleKey
    from sg_reconciler.core.scope import Locked, Scope

# Called with a group's live rules right before each attempt of a revoke or modify (a retry
# after a backoff reads them again); raises to stop the call.
Guard: TypeAlias = "Callable[[list[Rule]], None]"
Batch = list[dict[str, Any]]  # one Map item's share of a phase: a few groups' calls


class WritePacer(Protocol):
    """Spaces a step's writes at the deployment's rate (`adapters.pacing.Pacer`)."""

    def fit(self, batch: int, batches: int) -> None:
        """Take this Map item's share of the rate: item `batch` of `batches`."""
        ...


class RuleStore(Protocol):
    """The ingress rules of security groups, read and written by rule id.

    Writes are idempotent: authorizing a rule that exists returns its id, revoking a rule
    that is gone succeeds. Only rules tagged with `owner` are revoked or modified (NotOwned
    otherwise); a `guard` sees the group's live rules right before such a call and raises to
    stop it. Errors are the typed errors of `sg_reconciler.errors`.
    """

    @property
    def pacer(self) -> WritePacer | None: ...

    def describe(self, group_ids: Sequence[str]) -> list[Rule]:
        """Every ingress rule of the groups (a group that is gone has none)."""
        ...

    def tagged(
        self, group_ids: Sequence[str], owner: str, plan_id: str, tag_key: str = PLAN_TAG_KEY
    ) -> list[Rule]:
        """The rules tagged with `owner` and `tag_key` = `plan_id` (what an execution
        created, or with the adopted-by key, adopted)."""
        ...

    def authorize(
        self, group_id: str, rules: Sequence[Rule], owner: str, plan_id: str
    ) -> dict[RuleKey, str]:
        """Ensure the rules exist, new ones tagged with the owner and the plan; their ids."""
        ...

    def adopt(self, group_id: str, step: Adopt, owner: str, plan_id: str) -> None:
        """Take over the planned unowned rule in place (RuleChanged when it is gone, or its
        key or description changed since the plan)."""
        ...

    def revoke(
        self, group_id: str, rule_ids: Sequence[str], owner: str, guard: Guard | None = None
    ) -> list[str]:
        """Revoke the owned rules among `rule_ids` that still exist; the ids revoked."""
        ...

    def modify(
        self, group_id: str, rule_id: str, rule: Rule, owner: str, guard: Guard | None = None
    ) -> None:
        """Rewrite an owned rule in place (same id, tags kept)."""
        ...

    def hand_back(self, group_ids: Sequence[str], owner: str, plan_id: str) -> list[str]:
        """Undo `plan_id`'s adoptions: the old description back, the tags off; their ids."""
        ...


class LockStore(Protocol):
    """One lock per group, held by an execution (its name) for a lease."""

    def acquire(self, group_ids: Sequence[str], holder: str, lease_seconds: int) -> list[str]:
        """Take or renew every lock, in sorted order; LockBusy names one held elsewhere."""
        ...

    def renew(self, group_id: str, holder: str, lease_seconds: int) -> None:
        """Extend the holder's lease; LockLost when another execution took the group."""
        ...

    def fence(self, group_id: str, holder: str, lease_seconds: int) -> None:
        """Right before each attempt of a destructive write: extend the lease only if the
        holder still has the lock with a live lease; LockLost when it was freed (the
        janitor), expired or taken over, so a late writer stops without writing."""
        ...

    def release(self, group_ids: Sequence[str], holder: str) -> list[str]:
        """Free the holder's locks among `group_ids` (others' stay); the groups freed."""
        ...

    def release_held_by(self, holder: str) -> list[str]:
        """Free every lock the holder still has, wherever it is."""
        ...

    def mark_stopped(self, holder: str, lease_seconds: int) -> None:
        """Record that the holder's execution ended (the janitor, before it frees locks)."""
        ...

    def stopped(self, holder: str) -> bool:
        """Whether the janitor recorded the holder's execution as ended."""
        ...


class PlanStorage(Protocol):
    """A plan's groups and its phases' batches, outside the execution state (invariant 13).

    A read of something that is not there is an InvalidPlan (`sg_reconciler.errors`)."""

    def put_groups(self, plan: str, groups: Sequence[str]) -> int:
        """Store a plan's group ids; how many there are."""
        ...

    def groups(self, plan: str, expected: int | None = None) -> list[str]:
        """The plan's group ids, all `expected` of them."""
        ...

    def put_phase(self, plan: str, phase: str, batches: Sequence[Batch]) -> int:
        """Replace one phase's batches; how many there are."""
        ...

    def batch(self, plan: str, phase: str, index: int) -> Batch:
        """One batch of a phase."""
        ...

    def put_batch(self, plan: str, phase: str, index: int, batch: Batch) -> None:
        """Write (or replace) one batch of a phase: a Map item's own record."""
        ...

    def phase(self, plan: str, phase: str) -> Batch:
        """Every item of a phase, in batch order (none when it has none)."""
        ...


# What a start did: "started"; "duplicate": that plan is running already; "restart limit":
# that plan's execution and every restart allowed in its name's window ended (not started).
StartOutcome: TypeAlias = Literal["started", "duplicate", "restart limit"]


class ExecutionStarter(Protocol):
    """Start an apply execution named `name` (`StartOutcome` says whether it did)."""

    def __call__(self, name: str, payload: dict[str, Any]) -> StartOutcome: ...


class InventoryReader(Protocol):
    """The account as the deployment's policy needs it (the clients and the policy are
    bound where it is built: wiring.py)."""

    def read(self, narrow: Scope | None = None) -> Inventory:
        """What the desired state depends on, plus the rules of the groups in play; with an
        event's scope (`narrow`), only its peer closure when it has one (core/narrow.py)."""
        ...

    def read_locked(self, locked: Locked) -> Inventory:
        """The locked groups' rules and the closure of `locked.peers`, exact for those
        peers (`narrowed_to`)."""
        ...


class RevocationWindow(Protocol):
    """The brake's memory (invariant 14): per scope (the deployment, each binding), the rules
    owned when the window started and the ids of the rules taken away since."""

    def current(self, owned: Mapping[str, int]) -> dict[str, WindowCount]:
        """Each scope's window; one that ran out (or never started) starts now, with
        `owned[scope]` rules."""
        ...

    def record(self, removed: Mapping[str, Sequence[str]]) -> None:
        """Count rules a plan takes away in each scope's window (ids already there count once)."""
        ...


class InventoryIndex(Protocol):
    """The inventory kept from events (core/inventory_index.py): entries by kind and key,
    written on the condition that the version read is still there."""

    def entries(self, kind: Kind) -> list[Entry]:
        """Every entry of one kind."""
        ...

    def get(self, kind: Kind, keys: list[str]) -> dict[str, Entry]:
        """The entries of `kind` among `keys`."""
        ...

    def put(self, entry: Entry, replacing: Version | None) -> bool:
        """Write if the stored version is still `replacing` (None: absent); False if not."""
        ...
