"""Simulate a plan call by call and check the safety invariants at every state.

Invariants (docs/invariants.md): 1 no loss (OLD ∩ NEW always allowed), 2 no over-exposure
(nothing outside OLD ∪ NEW), 3 ownership (only owned rules revoked or modified), 5 quota (no
call pushes a group past its limit, counted as AWS counts it), 9 flow (every concrete
source, an address plus the groups its interface carries, keeps what OLD and NEW both
admit; a rule is never rewritten in place into a peer of another family that overlaps it),
and the final state equals the desired one. A multi-rule
call may apply partly; checking the states before and after each call covers those partial
states too, because an authorize only adds and a revoke only removes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from sg_reconciler.core.plan import Adopt, Authorize, Modify, Plan, Revoke
from sg_reconciler.core.quota import Limits, add, sub
from sg_reconciler.core.rules import OWNER_TAG_KEY, Rule, RuleKey
from sg_reconciler.core.traffic import (
    Stake,
    Traffic,
    key_box,
    overlapping,
    sharing_ports,
    source_stake,
    stake,
    touching,
)


def flow_conflict(old: RuleKey, new: RuleKey) -> bool:
    """Whether a source could lose traffic if `old` went before `new` came (invariant 9).

    The traffic algebra keeps peers of different families apart (sg-a, sg-b, a CIDR, a
    prefix list), but one source can be admitted by both: an NLB carrying two groups, an
    address inside a CIDR that a group's members also sit in. So two rules of one group from
    peers of different families that overlap on protocol and ports must be ordered.
    """
    return old.group_id == new.group_id and flow_waits([old], [new]) == [1]


def flow_waits(olds: Sequence[RuleKey], news: Sequence[RuleKey]) -> list[int]:
    """Per rule of `olds` (all of one group), the `news` it must wait for as a bitmask of their
    indexes: peers of different families (the algebra already judges one family exactly)
    that overlap on protocol and ports. Each box is looked up once; the pairs are compared
    inline, as a group's stale and new rules make many."""
    boxes = [key_box(new) for new in news]
    waits = []
    for (_, family), (_, (protocol_lo, protocol_hi), (port_lo, port_hi)) in map(key_box, olds):
        mask = 0
        for i, ((_, other), (_, (other_lo, other_hi), (lo, hi))) in enumerate(boxes):
            if (
                other != family
                and port_lo < hi
                and lo < port_hi
                and protocol_lo < other_hi
                and other_lo < protocol_hi
            ):
                mask |= 1 << i
        waits.append(mask)
    return waits


@dataclass(frozen=True)
class Violation:
    step: int  # index of the call after which it holds; -1 for the final state
    invariant: str
    group_id: str
    detail: str

    def __str__(self) -> str:
        where = "final state" if self.step < 0 else f"after step {self.step}"
        return f"{where}: {self.invariant} in {self.group_id}: {self.detail}"


@dataclass
class GroupBounds:
    """OLD and NEW of one group: rule keys for the cheap check, traffic for the exact one."""

    old_keys: frozenset[RuleKey]
    new_keys: frozenset[RuleKey]
    _must_keep: Traffic | None = None
    _may_allow: Traffic | None = None
    _stable: frozenset[RuleKey] | None = None
    _either: frozenset[RuleKey] | None = None
    _incoming: frozenset[RuleKey] | None = None
    _at_stake: Traffic | None = None
    _stake: Stake | None = None
    _overlaps: list[tuple[RuleKey, RuleKey]] | None = None
    _flows: Stake | None = None
    _all_flows: Stake | None = None

    @property
    def must_keep(self) -> Traffic:
        if self._must_keep is None:
            self._must_keep = Traffic.of(self.old_keys) & Traffic.of(self.new_keys)
        return self._must_keep

    @property
    def may_allow(self) -> Traffic:
        if self._may_allow is None:
            self._may_allow = Traffic.of(self.old_keys | self.new_keys)
        return self._may_allow

    @property
    def stable_keys(self) -> frozenset[RuleKey]:
        """The rules of both OLD and NEW: a make-before-break change never removes them."""
        if self._stable is None:
            self._stable = self.old_keys & self.new_keys
        return self._stable

    @property
    def at_stake(self) -> Traffic:
        """The OLD ∩ NEW traffic the stable rules S leave to the changing ones (A old, B new).

        (S ∪ A) ∩ (S ∪ B) − S = (A ∩ B) − S: only the changing rules are intersected, so a
        check costs the change, not the whole group.
        """
        if self._at_stake is None:
            stable = self.stable_keys
            old, new = self.old_keys - stable, self.new_keys - stable
            changing = Traffic.of(old) & Traffic.of(new)
            # Stable rules disjoint from the changing ones cannot cover any of it.
            self._at_stake = changing - Traffic.of(touching(stable, old)) if changing else changing
        return self._at_stake

    @property
    def stake(self) -> Stake:
        """`at_stake` as pieces the changing rules cover, for the planner's search."""
        if self._stake is None:
            # Only the changing rules that meet one of the other side's can cover any of it,
            # and only the stable rules that meet one of those old ones can take any away.
            old = list(dict.fromkeys(old for old, _ in self.overlaps))
            new = list(dict.fromkeys(new for _, new in self.overlaps))
            self._stake = stake(old, new, touching(self.stable_keys, old) if old else ())
        return self._stake

    @property
    def overlaps(self) -> list[tuple[RuleKey, RuleKey]]:
        """The changing rules of OLD and of NEW whose traffic meets: the traffic at stake lies
        where such a pair meets, so a state holding one rule of every pair keeps it all."""
        if self._overlaps is None:
            stable = self.stable_keys
            self._overlaps = overlapping(self.old_keys - stable, self.new_keys - stable)
        return self._overlaps

    @property
    def flows(self) -> Stake:
        """The OLD ∩ NEW flows of concrete sources the stable rules leave to the changing ones
        (invariant 9), as pieces for the planner's search and the checker."""
        if self._flows is None:
            stable = self.stable_keys
            old, new = self.old_keys - stable, self.new_keys - stable
            self._flows = source_stake(sorted(old), sorted(new), sharing_ports(stable, old))
        return self._flows

    def loses_flows(self, keys: frozenset[RuleKey]) -> bool:
        """Whether `keys` deny a concrete source some flow that OLD and NEW both admit."""
        if self.old_keys <= keys or self.new_keys <= keys:
            return False
        if self.stable_keys <= keys:
            flows = self.flows
        else:  # a state without some stable rule (a bad plan): judge OLD ∩ NEW whole
            if self._all_flows is None:
                self._all_flows = source_stake(sorted(self.old_keys), sorted(self.new_keys), ())
            flows = self._all_flows
        present = 0
        for key in keys:
            present |= flows.bit(key)
        return not flows.covered(present)

    def loses_traffic(self, keys: frozenset[RuleKey]) -> Traffic:
        """What OLD ∩ NEW traffic `keys` does not allow (empty when safe)."""
        if self.old_keys <= keys or self.new_keys <= keys:
            return Traffic()  # supersets of a bound allow at least OLD ∩ NEW
        if self.stable_keys <= keys:
            if all(old in keys or new in keys for old, new in self.overlaps):
                return Traffic()
            return self.at_stake - Traffic.of(keys - self.stable_keys)
        return self.must_keep - Traffic.of(keys)

    @property
    def incoming(self) -> frozenset[RuleKey]:
        """The rules of NEW that OLD lacks: those a stale rule may have to wait for (9)."""
        if self._incoming is None:
            self._incoming = self.new_keys - self.old_keys
        return self._incoming

    @property
    def either_keys(self) -> frozenset[RuleKey]:
        """The rules of OLD or NEW: states within them allow nothing outside OLD ∪ NEW."""
        if self._either is None:
            self._either = self.old_keys | self.new_keys
        return self._either

    def over_exposes(self, keys: frozenset[RuleKey]) -> Traffic:
        """What `keys` allow outside OLD ∪ NEW (empty when safe)."""
        if keys <= self.either_keys:
            return Traffic()
        return Traffic.of(keys) - self.may_allow


def group_bounds(
    current: Iterable[Rule], desired: Iterable[Rule], owner: str
) -> dict[str, GroupBounds]:
    """OLD = the current ingress rules; NEW = unmanaged rules plus the desired managed rules."""
    old: dict[str, set[RuleKey]] = {}
    new: dict[str, set[RuleKey]] = {}
    for rule in current:
        old.setdefault(rule.group_id, set()).add(rule.key)
        if not rule.owned_by(owner):
            new.setdefault(rule.group_id, set()).add(rule.key)
    for rule in desired:
        new.setdefault(rule.group_id, set()).add(rule.key)
    return {
        g: GroupBounds(frozenset(old.get(g, ())), frozenset(new.get(g, ())))
        for g in old.keys() | new.keys()
    }


def check_plan(
    plan: Plan,
    current: list[Rule],
    desired: list[Rule],
    owner: str,
    limits: Limits,
    bounds: dict[str, GroupBounds] | None = None,
    *,
    reaches_desired: bool = True,
) -> list[Violation]:
    """Every violation of the invariants, in call order; an empty list means the plan is safe.

    `reaches_desired` False checks a partial plan (revokes deferred): every state, not the end.
    """
    bounds = bounds if bounds is not None else group_bounds(current, desired, owner)
    state: dict[str, dict[str, Rule]] = {}
    for rule in current:
        state.setdefault(rule.group_id, {})[rule.rule_id or f"unnamed-{id(rule)}"] = rule
    tracked: dict[str, _Group] = {}  # the groups the plan changes
    violations: list[Violation] = []
    owner_tags = ((OWNER_TAG_KEY, owner),)

    for index, step in enumerate(plan.steps):
        simulated = tracked.get(step.group_id)
        if simulated is None:
            rules = state.setdefault(step.group_id, {})
            simulated = tracked[step.group_id] = _Group(rules, limits)
        rules, before = simulated.rules, simulated.usage
        present = set(simulated.keys)

        def bad(
            invariant: str, detail: str, *, at: int = index, group: str = step.group_id
        ) -> None:
            violations.append(Violation(at, invariant, group, detail))

        if isinstance(step, Authorize):
            for n, rule in enumerate(step.rules):
                if rule.group_id != step.group_id:
                    bad("call shape", f"rule {rule} is for another group")
                elif rule.key in present:
                    bad("call shape", f"{rule.key} already exists: EC2 rejects the duplicate")
                present.add(rule.key)
                simulated.put(
                    f"new-{index}-{n}", replace(rule, rule_id=f"new-{index}-{n}", tags=owner_tags)
                )
        elif isinstance(step, Revoke):
            for rule_id in step.rule_ids:
                target = rules.get(rule_id)
                if target is None:
                    bad("call shape", f"rule {rule_id} does not exist in the group")
                elif not target.owned_by(owner):
                    bad("3 ownership", f"revokes unmanaged rule {target}")
                else:
                    simulated.drop(rule_id)
        elif isinstance(step, Adopt):
            target = rules.get(step.rule_id)
            if target is None:
                bad("call shape", f"rule {step.rule_id} does not exist in the group")
            elif target.owned_by(owner):
                bad("call shape", f"adopts rule {target}, which is already owned")
            elif target.key != step.rule.key or target.description != step.was:
                bad("call shape", f"adopts rule {target} as {step.rule.key} ({step.was!r})")
            else:
                simulated.put(
                    step.rule_id, replace(step.rule, rule_id=step.rule_id, tags=owner_tags)
                )
        elif isinstance(step, Modify):
            target = rules.get(step.rule_id)
            if target is None:
                bad("call shape", f"rule {step.rule_id} does not exist in the group")
            elif not target.owned_by(owner):
                bad("3 ownership", f"modifies unmanaged rule {target}")
            elif target.key.peer.kind != step.rule.key.peer.kind:
                bad("call shape", f"modify cannot change the peer type of {target}")
            elif step.rule.key != target.key and step.rule.key in present:
                bad("call shape", f"{step.rule.key} already exists: EC2 rejects the duplicate")
            else:
                if flow_conflict(target.key, step.rule.key):
                    bad(
                        "9 flow",
                        f"rewrites {target} in place into {step.rule.key}: AWS does not document "
                        "that a source admitted through both peers keeps its traffic meanwhile",
                    )
                simulated.put(
                    step.rule_id, replace(step.rule, rule_id=step.rule_id, tags=target.tags)
                )

        after = simulated.usage
        grew = after[0] > before[0] or after[1] > before[1]
        if grew and not limits.fits(after, step.group_id):
            bad(
                "5 quota",
                f"{limits.describe(after)} exceed the limit of {limits(step.group_id)}",
            )
        _check_traffic(bounds, step.group_id, frozenset(simulated.keys), index, violations)

    for group_id, group in sorted(bounds.items()) if reaches_desired else ():
        keys = frozenset(r.key for r in state.get(group_id, {}).values())
        if keys != group.new_keys:
            missing = ", ".join(str(k) for k in sorted(group.new_keys - keys)) or "none"
            extra = ", ".join(str(k) for k in sorted(keys - group.new_keys)) or "none"
            violations.append(
                Violation(
                    -1,
                    "outcome",
                    group_id,
                    f"not the desired rules; missing {missing}; extra {extra}",
                )
            )
    wanted = {r.key: r.description for r in desired}
    for group_id, rules in state.items():
        for rule in rules.values():
            if rule.owned_by(owner) and rule.key in wanted and wanted[rule.key] != rule.description:
                violations.append(
                    Violation(
                        -1, "outcome", group_id, f"{rule} keeps description {rule.description!r}"
                    )
                )
    return violations


class _Group:
    """One group's rules as the simulation goes, with their keys and quota usage kept up to
    date call by call: recounting the whole group after every call made a plan's check cost
    its calls times the group's size."""

    def __init__(self, rules: dict[str, Rule], limits: Limits) -> None:
        self.rules, self.limits = rules, limits
        self.keys = Counter(r.key for r in rules.values())  # a bad plan may repeat a key
        self.usage = limits.usage(self.keys.elements())

    def put(self, rule_id: str, rule: Rule) -> None:
        """Add a rule, or replace the one with its id (in place: the order is kept)."""
        replaced = self.rules.get(rule_id)
        if replaced is not None:
            self._leave(replaced.key)
        self.rules[rule_id] = rule
        self.keys[rule.key] += 1
        self.usage = add(self.usage, self.limits.weight(rule.key))

    def drop(self, rule_id: str) -> None:
        self._leave(self.rules.pop(rule_id).key)

    def _leave(self, key: RuleKey) -> None:
        self.usage = sub(self.usage, self.limits.weight(key))
        self.keys[key] -= 1
        if not self.keys[key]:
            del self.keys[key]


def _check_traffic(
    bounds: dict[str, GroupBounds],
    group_id: str,
    keys: frozenset[RuleKey],
    index: int,
    violations: list[Violation],
) -> None:
    group = bounds.get(group_id)
    if group is None:
        violations.append(
            Violation(index, "scope", group_id, "the plan changes a group outside its scope")
        )
        return
    lost = group.loses_traffic(keys)
    if lost:
        violations.append(Violation(index, "1 no loss", group_id, f"denies {lost.describe()}"))
    elif group.loses_flows(keys):
        detail = "denies a source (an address and the groups it carries) traffic that both OLD and NEW admit"
        violations.append(Violation(index, "9 flow", group_id, detail))
    exposed = group.over_exposes(keys)
    if exposed:
        violations.append(
            Violation(index, "2 no over-exposure", group_id, f"allows {exposed.describe()}")
        )
