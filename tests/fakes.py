"""In-memory fakes of the ports (sg_reconciler.core.ports), for the steps' and the planner's
use cases without moto.

Each keeps the semantics the use cases rely on from its adapter, not only its signature:

- `FakeRules` (SecurityGroupRules): rule ids, owner and plan tags, idempotent authorize
  (an existing key keeps its id), revoke and modify only of owned rules (NotOwned),
  the guard called with the group's live rules right before a revoke or modify, adoption
  and hand-back by tags, the rule quota, a deleted group. `fail` injects a typed error into
  the next calls of one operation, before or after the write applied.
- `FakeLocks` (GroupLocks): one lock per group with a lease on a settable clock.
- `FakePlans` (PlanStore): groups and phases, through JSON like the table, InvalidPlan for
  what is not there.
- `FakeStarter` (the execution starter): names already running are duplicates.
- `FakeInventory` (read_inventory): a fixed Inventory, and the calls made.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sg_reconciler.adapters.plan_store import stored_groups
from sg_reconciler.adapters.rule_checks import adopt_calls, modify_needed, modify_target, revocable
from sg_reconciler.app.live_plan import LivePlan, Replan
from sg_reconciler.core.account import Inventory
from sg_reconciler.core.plan import Adopt, Plan
from sg_reconciler.core.planner import make_plan
from sg_reconciler.core.ports import (
    Batch,
    ExecutionStarter,
    Guard,
    InventoryReader,
    LockStore,
    PlanStorage,
    RuleStore,
    StartOutcome,
)
from sg_reconciler.core.quota import Limits
from sg_reconciler.core.rules import (
    ADOPTED_BY_TAG_KEY,
    ADOPTED_DESCRIPTION_TAG_KEY,
    DEFAULT_MAX_RULES_PER_GROUP,
    DEFAULT_OWNER,
    OWNER_TAG_KEY,
    PLAN_TAG_KEY,
    Rule,
    RuleKey,
    rule_from_dict,
)
from sg_reconciler.core.scope import Locked, Scope
from sg_reconciler.errors import (
    InvalidPlan,
    LockBusy,
    LockLost,
    ReconcilerError,
    from_aws_code,
)


def rule(
    group_id: str,
    port: int,
    peer: str = "10.0.0.0/16",
    description: str = "",
    to_port: int | None = None,
) -> Rule:
    """A TCP rule of `port` (to `to_port`), `peer` a CIDR or a group id."""
    source: dict[str, Any] = (
        {"ReferencedGroupInfo": {"GroupId": peer}} if peer.startswith("sg-") else {"CidrIpv4": peer}
    )
    return rule_from_dict(
        {
            "GroupId": group_id,
            "IpProtocol": "tcp",
            "FromPort": port,
            "ToPort": port if to_port is None else to_port,
            "Description": description,
            **source,
        }
    )


def _with_tags(rule: Rule, **changes: str | None) -> Rule:
    """`rule` with tags set (a value) or removed (None)."""
    tags = dict(rule.tags)
    for key, value in changes.items():
        if value is None:
            tags.pop(key, None)
        else:
            tags[key] = value
    return replace(rule, tags=tuple(sorted(tags.items())))


@dataclass
class Fault:
    error: ReconcilerError
    applied: bool  # the write happened, its caller sees the error (a lost response)


@dataclass
class FakePacer:
    """Records the share of the rate each Map item takes."""

    fitted: list[tuple[int, int]] = field(default_factory=list)

    def fit(self, batch: int, batches: int) -> None:
        self.fitted.append((batch, batches))


class FakeRules:
    """Security groups' ingress rules in memory, with SecurityGroupRules' semantics."""

    def __init__(self, quota: int = DEFAULT_MAX_RULES_PER_GROUP) -> None:
        self.quota = quota
        self.groups: dict[str, dict[str, Rule]] = {}  # group -> rule id -> rule
        self.pacer: FakePacer | None = None
        self.writes: list[tuple[str, str]] = []  # (operation, group) of each write made
        self.guarded: list[str] = []  # groups whose guard ran
        self._faults: dict[str, list[Fault]] = {}
        self._ids = itertools.count(1)

    # The world ------------------------------------------------------------------------

    def add_group(self, *group_ids: str) -> None:
        for group_id in group_ids:
            self.groups.setdefault(group_id, {})

    def delete_group(self, group_id: str) -> None:
        del self.groups[group_id]

    def put(self, rule: Rule, owner: str | None = None, plan_id: str | None = None) -> Rule:
        """A rule that exists already: someone else's, or with `owner`, ours."""
        self.add_group(rule.group_id)
        tags = {OWNER_TAG_KEY: owner, PLAN_TAG_KEY: plan_id}
        return self._create(_with_tags(rule, **{k: v for k, v in tags.items() if v}))

    def remove(self, rule_id: str) -> None:
        """Someone else revokes a rule."""
        for rules in self.groups.values():
            rules.pop(rule_id, None)

    def rules(self, group_id: str | None = None) -> list[Rule]:
        groups = [group_id] if group_id else sorted(self.groups)
        return [r for g in groups for r in self.groups.get(g, {}).values()]

    def keys(self, group_id: str | None = None) -> set[RuleKey]:
        return {r.key for r in self.rules(group_id)}

    def fail(
        self, operation: str, error: ReconcilerError, *, applied: bool = False, times: int = 1
    ) -> None:
        """The next `times` calls of `operation` raise `error`, after the write when `applied`."""
        self._faults.setdefault(operation, []).extend([Fault(error, applied)] * times)

    # The port -------------------------------------------------------------------------

    def describe(self, group_ids: Sequence[str]) -> list[Rule]:
        self._fault("describe", before=True)
        return [r for g in sorted(set(group_ids)) for r in self.groups.get(g, {}).values()]

    def tagged(
        self, group_ids: Sequence[str], owner: str, plan_id: str, tag_key: str = PLAN_TAG_KEY
    ) -> list[Rule]:
        return [
            r for r in self.describe(group_ids) if r.owned_by(owner) and r.tag(tag_key) == plan_id
        ]

    def authorize(
        self, group_id: str, rules: Sequence[Rule], owner: str, plan_id: str
    ) -> dict[RuleKey, str]:
        self._fault("authorize", before=True)
        live = {r.key: r for r in self._group(group_id).values()}
        missing = [r for r in rules if r.key not in live]
        if len(live) + len(missing) > self.quota:
            raise from_aws_code(
                "RulesPerSecurityGroupLimitExceeded",
                f"The maximum number of rules per security group has been reached ({group_id})",
            )
        for new in missing:
            tagged = _with_tags(replace(new, rule_id=None, tags=()), **{OWNER_TAG_KEY: owner})
            live[new.key] = self._create(_with_tags(tagged, **{PLAN_TAG_KEY: plan_id}))
        self._wrote("authorize", group_id)
        return {r.key: live[r.key].rule_id or "" for r in rules}

    def adopt(self, group_id: str, step: Adopt, owner: str, plan_id: str) -> None:
        self._fault("adopt", before=True)
        rule_id, rule = step.rule_id, step.rule
        target = self.groups.get(group_id, {}).get(rule_id)  # describe: a gone group has none
        calls = adopt_calls(group_id, target, step, owner, plan_id)
        if target is None or calls == "none":  # (adopt_calls raised on None)
            return
        if calls == "tag":
            target = _with_tags(
                target,
                **{
                    OWNER_TAG_KEY: owner,
                    ADOPTED_BY_TAG_KEY: plan_id,
                    ADOPTED_DESCRIPTION_TAG_KEY: step.was,
                },
            )
        self.groups[group_id][rule_id] = replace(target, description=rule.description)
        self._wrote("adopt", group_id)

    def hand_back(self, group_ids: Sequence[str], owner: str, plan_id: str) -> list[str]:
        handed = []
        for adopted in self.tagged(group_ids, owner, plan_id, ADOPTED_BY_TAG_KEY):
            self._fault("hand_back", before=True)
            old = adopted.tag(ADOPTED_DESCRIPTION_TAG_KEY) or ""
            keys = (OWNER_TAG_KEY, ADOPTED_BY_TAG_KEY, ADOPTED_DESCRIPTION_TAG_KEY)
            back = _with_tags(replace(adopted, description=old), **dict.fromkeys(keys))
            self.groups[adopted.group_id][adopted.rule_id or ""] = back
            self._wrote("hand_back", adopted.group_id)
            handed.append(adopted.rule_id or "")
        return sorted(handed)

    def revoke(
        self, group_id: str, rule_ids: Sequence[str], owner: str, guard: Guard | None = None
    ) -> list[str]:
        live = self.describe([group_id])
        ids = revocable(live, rule_ids, owner)
        if ids and guard is not None:
            self.guarded.append(group_id)
            guard(live)
        if ids:
            self._fault("revoke", before=True)
            for rule_id in ids:
                del self.groups[group_id][rule_id]
            self._wrote("revoke", group_id)
        return ids

    def modify(
        self, group_id: str, rule_id: str, rule: Rule, owner: str, guard: Guard | None = None
    ) -> None:
        live = self.describe([group_id])
        target = modify_target(live, rule_id, owner)
        if not modify_needed(target, rule):
            return
        if guard is not None:
            self.guarded.append(group_id)
            guard(live)
        self._fault("modify", before=True)
        self._group(group_id)
        if target is None:
            raise from_aws_code(
                "InvalidSecurityGroupRuleId.NotFound", f"The rule {rule_id} does not exist"
            )
        self.groups[group_id][rule_id] = replace(target, key=rule.key, description=rule.description)
        self._wrote("modify", group_id)

    # Inside ---------------------------------------------------------------------------

    def _group(self, group_id: str) -> dict[str, Rule]:
        if group_id not in self.groups:
            raise from_aws_code(
                "InvalidGroup.NotFound", f"The security group '{group_id}' does not exist"
            )
        return self.groups[group_id]

    def _create(self, rule: Rule) -> Rule:
        created = replace(rule, rule_id=f"sgr-{next(self._ids):017x}")
        self.groups[rule.group_id][created.rule_id or ""] = created
        return created

    def _fault(self, operation: str, *, before: bool) -> None:
        pending = self._faults.get(operation)
        if pending and pending[0].applied != before:
            raise pending.pop(0).error

    def _wrote(self, operation: str, group_id: str) -> None:
        self.writes.append((operation, group_id))
        self._fault(operation, before=False)


class FakeLocks:
    """One lock per group: (holder, lease end) on a clock tests move with `now`, read in whole
    seconds as GroupLocks reads its clock (the table stores whole seconds)."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now
        self.items: dict[str, tuple[str, float]] = {}
        self.ended: set[str] = set()  # executions the janitor recorded as ended

    @property
    def second(self) -> int:
        return int(self.now)

    def holder(self, group_id: str) -> str:
        return self.items.get(group_id, ("nobody", 0.0))[0]

    def acquire(self, group_ids: Sequence[str], holder: str, lease_seconds: int) -> list[str]:
        taken = []
        for group_id in sorted(set(group_ids)):
            other, until = self.items.get(group_id, (holder, 0.0))
            if other != holder and until >= self.second:
                raise LockBusy(f"{group_id} is locked by {other}")
            self.items[group_id] = (holder, self.second + lease_seconds)
            taken.append(group_id)
        return taken

    def renew(self, group_id: str, holder: str, lease_seconds: int) -> None:
        if self.holder(group_id) != holder:
            raise LockLost(f"{group_id} is no longer locked by {holder}")
        self.items[group_id] = (holder, self.second + lease_seconds)

    def fence(self, group_id: str, holder: str, lease_seconds: int) -> None:
        other, until = self.items.get(group_id, ("nobody", 0.0))
        if other != holder or until < self.second:
            raise LockLost(
                f"{group_id} is no longer locked by {holder} (freed, expired or taken over): "
                "no call made"
            )
        self.items[group_id] = (holder, self.second + lease_seconds)

    def release(self, group_ids: Sequence[str], holder: str) -> list[str]:
        released = [g for g in sorted(set(group_ids)) if self.holder(g) == holder]
        for group_id in released:
            del self.items[group_id]
        return released

    def release_held_by(self, holder: str) -> list[str]:
        return self.release([g for g, (h, _) in self.items.items() if h == holder], holder)

    def mark_stopped(self, holder: str, lease_seconds: int) -> None:
        self.ended.add(holder)

    def stopped(self, holder: str) -> bool:
        return holder in self.ended


class FakePlans:
    """The plan store's parts in a dict, each through JSON as the table stores it."""

    def __init__(self) -> None:
        self.parts: dict[tuple[str, str], list[str]] = {}  # (plan, groups|phase) -> bodies

    def put_groups(self, plan: str, groups: Sequence[str]) -> int:
        ids = sorted(set(groups))
        self.parts[(plan, "groups")] = [json.dumps(ids)] if ids else []
        return len(ids)

    def groups(self, plan: str, expected: int | None = None) -> list[str]:
        ids = [g for body in self.parts.get((plan, "groups"), []) for g in json.loads(body)]
        return stored_groups(plan, ids, expected)

    def put_phase(self, plan: str, phase: str, batches: Sequence[Batch]) -> int:
        self.parts[(plan, phase)] = [json.dumps(list(b)) for b in batches]
        return len(batches)

    def batch(self, plan: str, phase: str, index: int) -> Batch:
        bodies = self.parts.get((plan, phase), [])
        if not 0 <= index < len(bodies) or not bodies[index]:
            raise InvalidPlan(f"the plan store has no batch {phase} #{index} of {plan}")
        return list(json.loads(bodies[index]))

    def put_batch(self, plan: str, phase: str, index: int, batch: Batch) -> None:
        bodies = self.parts.setdefault((plan, phase), [])
        bodies.extend([""] * (index + 1 - len(bodies)))  # parts not written yet are empty
        bodies[index] = json.dumps(list(batch))

    def phase(self, plan: str, phase: str) -> Batch:
        bodies = self.parts.get((plan, phase), [])
        return [item for body in bodies if body for item in json.loads(body)]


class FakeStarter:
    """Starts executions by name; a name already running is a duplicate, one in `exhausted`
    has used up its restarts."""

    def __init__(self) -> None:
        self.started: list[tuple[str, dict[str, Any]]] = []
        self.running: set[str] = set()
        self.exhausted: set[str] = set()

    def __call__(self, name: str, payload: dict[str, Any]) -> StartOutcome:
        if name in self.running:
            return "duplicate"
        if name in self.exhausted:
            return "restart limit"
        self.running.add(name)
        self.started.append((name, json.loads(json.dumps(payload))))
        return "started"


@dataclass
class FakeInventory:
    """The InventoryReader port on a fixed inventory."""

    inventory: Inventory
    reads: int = 0

    def read(self, narrow: Scope | None = None) -> Inventory:
        self.reads += 1
        return self.inventory

    def read_locked(self, locked: Locked) -> Inventory:
        self.reads += 1
        return self.inventory


def planner(
    rules: FakeRules,
    desired: Sequence[Rule],
    owner: str = DEFAULT_OWNER,
    *,
    adopt: Callable[[Rule], bool] | None = None,
) -> Replan:
    """The live planner over the fake groups, for the scope's groups: the desired rules as
    given, the current ones as they are now, the fake's quota."""

    def replan(scope: Scope, narrow: Scope | None = None) -> LivePlan:
        groups = sorted(rules.groups) if scope.full else sorted(scope.group_ids)
        wanted = [r for r in desired if r.group_id in groups]
        current = rules.describe(groups)
        result = make_plan(current, wanted, owner, Limits(rules.quota), partial=True, adopt=adopt)
        return LivePlan(result=result, desired=wanted, current=current, groups=groups)

    return replan


def plan_of(live: LivePlan) -> Plan:
    assert isinstance(live.result, Plan), live.result
    return live.result


# Each fake satisfies its port (checked where the tests' types are read).
_PORTS: tuple[RuleStore, LockStore, PlanStorage, ExecutionStarter, InventoryReader] = (
    FakeRules(),
    FakeLocks(),
    FakePlans(),
    FakeStarter(),
    FakeInventory(Inventory()),
)
