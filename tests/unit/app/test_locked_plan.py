"""The plan under the locks from the locked groups' rules and the plan's closure only
(`compute_locked_plan`, docs/architecture.md "Reads"), on a reader that answers as
adapters/inventory.py `read_locked` does and counts the target groups whose targets it read
(one DescribeTargetHealth each; the reader itself runs on the real ASL in
tests/workflow/test_locked_reads.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from sg_reconciler.app.live_plan import LivePlan, compute_locked_plan, plan_from_inventory
from sg_reconciler.app.planned import Planned
from sg_reconciler.core.account import Inventory, LoadBalancer, SecurityGroup, Target, TargetGroup
from sg_reconciler.core.desired import compute_desired
from sg_reconciler.core.index_events import Version
from sg_reconciler.core.inventory_index import (
    IndexView,
    target_entry,
    target_group_entry,
    target_group_of,
    target_key,
)
from sg_reconciler.core.narrow import admitting, sending_peers
from sg_reconciler.core.plan import Authorize, Modify, Plan, Revoke
from sg_reconciler.core.policy import Policy
from sg_reconciler.core.revoke_closure import candidates, contradictions
from sg_reconciler.core.rules import OWNER_TAG_KEY, Peer, Rule, RuleKey
from sg_reconciler.core.scope import Locked, Scope
from sg_reconciler.core.traffic import Traffic
from sg_reconciler.policy import parse_policy
from unit.app import test_narrow_reads as narrow_reads

OWNER = "sg-reconciler"
VPC = "vpc-1"
CLUSTERS = {"a": ("sg-0000000b1", "sg-0000000a1"), "b": ("sg-0000000b2", "sg-0000000a2")}


def policy() -> Policy:
    """Two clusters, each with a shared backend group (the LBC's layout), a rule per port."""
    return parse_policy(
        json.dumps(
            {
                "bindings": [
                    {
                        "name": name,
                        "load_balancers": {"tags": {"cluster": name}},
                        "rule_source": {"kind": "backend_group", "group_id": backend},
                        "destination": {"kind": "target_enis"},
                        "rule_budget": 60,
                        "include_health_checks": False,
                    }
                    for name, (backend, nodes) in CLUSTERS.items()
                ]
            }
        )
    )


def account(target_groups: dict[str, int], per_lb: int = 4) -> Inventory:
    """`target_groups[c]` NodePort target groups in cluster c, `per_lb` per NLB; the nodes'
    rules as the full read plans them (ours, with ids)."""
    lbs: list[LoadBalancer] = []
    tgs: list[TargetGroup] = []
    for name, count in target_groups.items():
        backend, nodes = CLUSTERS[name]
        for n in range(count):
            if n % per_lb == 0:
                lbs.append(
                    LoadBalancer(
                        f"arn:loadbalancer/{name}{n}",
                        f"{name}{n}",
                        "network",
                        (f"sg-lb{name}{n}", backend),
                        (("cluster", name),),
                        VPC,
                    )
                )
            tgs.append(
                TargetGroup(
                    f"arn:targetgroup/{name}{n}",
                    f"{name}{n}",
                    "TCP",
                    30000 + 2 * n,  # apart: a rule per port
                    "instance",
                    load_balancer_arns=(lbs[-1].arn,),
                    vpc_id=VPC,
                    targets=(Target(f"i-{name}", 30000 + 2 * n, (nodes,), f"i-{name}"),),
                )
            )
    groups = [g for pair in CLUSTERS.values() for g in pair]
    groups += [g for lb in lbs for g in lb.security_groups]
    inventory = Inventory(
        load_balancers=tuple(lbs),
        target_groups=tuple(tgs),
        groups={g: SecurityGroup(g, VPC) for g in groups},
    )
    desired = plan_from_inventory(inventory, policy(), partial=True).desired
    rules = tuple(owned(r.key, f"sgr-{n}", r.description) for n, r in enumerate(desired))
    return replace(inventory, rules=rules, owned_groups=frozenset(r.group_id for r in rules))


def owned(key: RuleKey, rule_id: str, description: str = "ours") -> Rule:
    return Rule(key, description, rule_id, ((OWNER_TAG_KEY, OWNER),))


def backend_rule(cluster: str, port: int, rule_id: str) -> Rule:
    backend, nodes = CLUSTERS[cluster]
    return owned(RuleKey(nodes, "tcp", port, port, Peer("group", backend)), rule_id)


@dataclass
class Reader:
    """The InventoryReader port over a whole account: `read_locked` gives the locked groups'
    rules, and only the target groups whose load balancer admits one of the peers asked for."""

    inventory: Inventory
    chosen: Policy
    asked: list[Locked] = field(default_factory=list)
    target_healths: int = 0  # DescribeTargetHealth calls: one per target group read

    def read(self, narrow: Scope | None = None) -> Inventory:
        return self.inventory

    def read_locked(self, locked: Locked) -> Inventory:
        chosen = self.chosen
        self.asked.append(locked)
        full = self.inventory
        lbs: tuple[LoadBalancer, ...] = ()
        tgs: tuple[TargetGroup, ...] = ()
        if locked.peers:
            lbs = full.load_balancers
            attached = {tg.arn: tg.load_balancer_arns for tg in full.target_groups}
            found = admitting(locked.peers, chosen.desired_settings().bindings, lbs, attached)
            tgs = tuple(tg for tg in full.target_groups if tg.arn in found)
        self.target_healths += len(tgs)
        rules = tuple(r for r in full.rules if r.group_id in locked.groups)
        return replace(
            full,
            load_balancers=lbs,
            target_groups=tgs,
            rules=rules,
            owned_groups=frozenset(r.group_id for r in rules if r.owned_by(OWNER)),
            narrowed_to=locked.peers,
        )


def planner(inventory: Inventory) -> tuple[Plan, Planned]:
    """The planner's full read, and what it stores for the steps under the locks."""
    live = plan_from_inventory(inventory, policy(), Scope.everything(), partial=True)
    assert isinstance(live.result, Plan)
    return live.result, live.planned(live.result)


def locked(inventory: Inventory, plan: Plan, planned: Planned) -> tuple[LivePlan, Reader]:
    reader = Reader(inventory, policy())
    live = compute_locked_plan(reader, reader.chosen, plan.groups, planned)
    return live, reader


def revoked(live: LivePlan) -> set[str]:
    assert isinstance(live.result, Plan), live.result
    return {i for s in live.result.steps if isinstance(s, Revoke) for i in s.rule_ids}


@pytest.mark.parametrize("other", [8, 400])
def test_a_change_that_only_authorizes_reads_no_target_group(other: int) -> None:
    # Given cluster a (12 target groups) beside cluster b, reconciled, and a new NodePort
    # in cluster a
    before = account({"a": 12, "b": other})
    now = account({"a": 13, "b": other})
    now = replace(now, rules=before.rules)
    plan, planned = planner(now)
    assert plan.steps and all(isinstance(s, Authorize) for s in plan.steps)
    # When the refresh plans under the locks
    live, reader = locked(now, plan, planned)
    # Then it read the locked groups' rules and no target group at all, whatever b's size
    assert [a.peers for a in reader.asked] == [frozenset()]
    assert reader.target_healths == 0
    assert live.result == plan


@pytest.mark.parametrize("other", [8, 400])
def test_a_revoke_reads_only_the_target_groups_that_admit_its_peer(other: int) -> None:
    # Given a stale owned rule of cluster a's backend in a's nodes
    inventory = account({"a": 12, "b": other})
    stale = backend_rule("a", 40000, "sgr-stale")
    inventory = replace(inventory, rules=(*inventory.rules, stale))
    plan, planned = planner(inventory)
    assert planned.stale == {"sgr-stale"}
    # When the refresh plans under the locks
    live, reader = locked(inventory, plan, planned)
    # Then it revokes it, having read a's 12 target groups and none of b's
    assert revoked(live) == {"sgr-stale"}
    assert reader.asked[-1].peers == {Peer("group", CLUSTERS["a"][0])}
    assert reader.target_healths == 12


def test_a_revoke_whose_closure_shows_its_traffic_still_needed_is_not_made() -> None:
    # Given the planner planned to revoke a stale rule on port 40000
    inventory = account({"a": 4, "b": 4})
    stale = backend_rule("a", 40000, "sgr-stale")
    inventory = replace(inventory, rules=(*inventory.rules, stale))
    plan, planned = planner(inventory)
    # and a Service on NodePort 40000 came after its read
    lb = inventory.load_balancers[0]
    service = TargetGroup(
        "arn:targetgroup/new",
        "new",
        "TCP",
        40000,
        "instance",
        load_balancer_arns=(lb.arn,),
        vpc_id=VPC,
        targets=(Target("i-a", 40000, (CLUSTERS["a"][1],), "i-a"),),
    )
    now = replace(inventory, target_groups=(*inventory.target_groups, service))
    # When the refresh plans under the locks
    live, reader = locked(now, plan, planned)
    # Then the rule stays, and the plan says why
    assert reader.target_healths == 5
    assert revoked(live) == set()
    assert isinstance(live.result, Plan)
    assert any("still needs them" in n and "sgr-stale" in n for n in live.result.notes)


def test_a_target_whose_group_is_unknown_in_the_closure_holds_the_revoke() -> None:
    # Given a planned revoke of port 40000, and a target on 40000 whose interface is unknown
    inventory = account({"a": 4, "b": 4})
    stale = backend_rule("a", 40000, "sgr-stale")
    inventory = replace(inventory, rules=(*inventory.rules, stale))
    plan, planned = planner(inventory)
    lb = inventory.load_balancers[0]
    lost = TargetGroup(
        "arn:targetgroup/lost",
        "lost",
        "TCP",
        40000,
        "ip",
        load_balancer_arns=(lb.arn,),
        vpc_id=VPC,
        targets=(Target("10.0.9.9", 40000),),
    )
    now = replace(inventory, target_groups=(*inventory.target_groups, lost))
    # When the refresh plans under the locks
    live, _ = locked(now, plan, planned)
    # Then nothing is revoked: a lookup miss is held, as in the planner
    assert revoked(live) == set()
    assert isinstance(live.result, Plan) and "not found" in live.result.held
    assert live.brake is not None


def test_a_removal_the_planner_did_not_plan_is_held() -> None:
    # Given a plan that takes nothing away, and an owned rule the planner's desired rules
    # lack (made after its read, by an execution from a newer plan)
    inventory = account({"a": 4, "b": 4})
    plan, planned = planner(replace(account({"a": 5, "b": 4}), rules=inventory.rules))
    newer = backend_rule("a", 41000, "sgr-newer")
    now = replace(inventory, rules=(*inventory.rules, newer))
    # When the refresh plans under the locks
    live, reader = locked(now, plan, planned)
    # Then nothing is revoked, it reads no target group, and the plan says why
    assert revoked(live) == set()
    assert reader.target_healths == 0
    assert isinstance(live.result, Plan) and "did not plan" in live.result.held


def test_a_rule_replaced_by_a_wider_one_reads_no_target_group() -> None:
    # Given the #3639 change planned: a's 30000 rule replaced by 30000-30010 (it takes no
    # traffic away: the new rule allows all the old one did)
    inventory = account({"a": 1, "b": 400})
    old = next(r for r in inventory.rules if r.group_id == CLUSTERS["a"][1])
    wider = Rule(old.key._replace(to_port=30010), old.description)
    planned = Planned((wider,), frozenset({old.rule_id or ""}))
    # When the refresh plans under the locks
    reader = Reader(inventory, policy())
    live = compute_locked_plan(reader, reader.chosen, [old.group_id], planned)
    # Then it authorizes the wider rule and revokes the old one, having read no target group
    assert revoked(live) == {old.rule_id}
    assert reader.target_healths == 0 and [a.peers for a in reader.asked] == [frozenset()]


def applied(rules: list[Rule], plan: Plan) -> list[Rule]:
    """The rules once every call of `plan` ran."""
    now = {r.rule_id: r for r in rules}
    for n, step in enumerate(plan.steps):
        if isinstance(step, Authorize):
            now.update((f"new-{n}-{k}", r) for k, r in enumerate(step.rules))
        elif isinstance(step, Revoke):
            for rule_id in step.rule_ids:
                now.pop(rule_id, None)
        elif isinstance(step, Modify):
            now[step.rule_id] = step.rule
    return list(now.values())


def _targets_moved(before: Inventory, data: st.DataObject) -> Inventory:
    """The account after targets moved: some target groups lose targets or change ports."""
    moved = tuple(
        replace(
            tg,
            targets=tuple(
                replace(t, port=data.draw(st.sampled_from(narrow_reads.PORTS)))
                for t in tg.targets
                if data.draw(st.booleans())
            ),
        )
        if data.draw(st.booleans())
        else tg
        for tg in before.target_groups
    )
    return replace(before, target_groups=moved)


def _assert_needed_traffic_kept(now: Inventory, chosen: Policy, plan: Plan, locked: Plan) -> None:
    """No traffic the account needs now and the rules allow now is taken away by `locked`."""
    needed = compute_desired(now, chosen.desired_settings()).rules
    current = [r for r in now.rules if r.group_id in plan.groups]
    after = applied(current, locked)
    for group in plan.groups:
        kept = Traffic.of([r for r in current if r.group_id == group])
        kept &= Traffic.of([r for r in needed if r.group_id == group])
        assert kept <= Traffic.of([r for r in after if r.group_id == group]), group


def _planned_then_moved(
    before: Inventory, chosen: Policy, data: st.DataObject
) -> tuple[LivePlan, Plan, Inventory] | None:
    """The planner's plan from `before` (None: nothing to do), and the account after targets
    moved since."""
    planned_live = plan_from_inventory(before, chosen, Scope.everything(), partial=True)
    if not isinstance(planned_live.result, Plan) or not planned_live.result.steps:
        return None
    return planned_live, planned_live.result, _targets_moved(before, data)


@given(narrow_reads.accounts(), st.data())
def test_the_plan_under_the_locks_never_takes_away_what_the_account_now_needs(
    case: tuple[Inventory, Policy, Scope], data: st.DataObject
) -> None:
    # Given the planner's plan from one read, and the account changed since (targets moved)
    before, chosen, _ = case
    if (moved := _planned_then_moved(before, chosen, data)) is None:
        return
    planned_live, plan, now = moved
    # When the refresh plans under the locks
    reader = Reader(now, chosen)
    planned = planned_live.planned(plan)
    live = compute_locked_plan(reader, chosen, plan.groups, planned)
    if not isinstance(live.result, Plan):
        return
    event("revokes" if revoked(live) else "no revoke")
    # Then no traffic the account needs now and the rules allow now is taken away
    _assert_needed_traffic_kept(now, chosen, plan, live.result)
    # and only rules the planner planned to take away went
    assert revoked(live) <= planned.stale


NOW = 1_800_000_000.0
PERIOD = 43_200.0


@dataclass
class IndexedReader(Reader):
    """`Reader` as app/locked_index.py reads under the locks with the inventory index: of the
    closure, only the candidates the index (`index`, the planner's read, verified just now)
    chooses are read from the account; the rest are the index's."""

    index: Inventory = field(default_factory=Inventory)
    unread_changed: bool = False  # a target group not read differs from the account now

    def read_locked(self, locked: Locked) -> Inventory:
        read = super().read_locked(locked)
        if not locked.peers or locked.lost is None:
            return read
        self.target_healths -= len(read.target_groups)
        at = Version.of_read(NOW)
        view = IndexView.of(
            [target_group_entry(tg, at) for tg in self.index.target_groups]
            + [
                target_entry(
                    target_key(tg.target_type, tg.vpc_id, t.target_id),
                    t.group_ids,
                    t.instance_id,
                    at,
                )
                for tg in self.index.target_groups
                for t in tg.targets
            ]
        )
        attached = {tg.arn: tg.load_balancer_arns for tg in read.target_groups}
        sending = sending_peers(
            self.chosen.desired_settings().bindings, read.load_balancers, attached
        )
        listed = [replace(tg, targets=()) for tg in read.target_groups]
        found = candidates(locked.lost, sending, listed, view, NOW + 1, PERIOD)
        self.target_healths += len(found.read)
        kept = []
        for tg in read.target_groups:
            if tg.arn in found.read or tg.arn not in view.target_groups:
                kept.append(tg)
                continue
            from_index = target_group_of(view.target_groups[tg.arn], view.targets)
            self.unread_changed |= {(t.target_id, t.port, t.group_ids) for t in tg.targets} != {
                (t.target_id, t.port, t.group_ids) for t in from_index.targets
            }
            kept.append(from_index)
        doubts = [f"{a}: {why}" for a, why in found.doubts.items()]
        for tg in read.target_groups:
            if tg.arn in found.read and tg.arn in view.target_groups:
                doubts += contradictions(view.target_groups[tg.arn], tg, view)
        return replace(read, target_groups=tuple(kept), doubts=tuple(doubts))


def test_a_revoke_through_the_index_reads_only_its_candidates() -> None:
    # Given a stale owned rule of cluster a's backend on a port no target group uses
    inventory = account({"a": 12, "b": 400})
    stale = backend_rule("a", 40000, "sgr-stale")
    inventory = replace(inventory, rules=(*inventory.rules, stale))
    plan, planned = planner(inventory)
    # When the refresh plans under the locks through the index (the planner's read)
    reader = IndexedReader(inventory, policy(), index=inventory)
    live = compute_locked_plan(reader, reader.chosen, plan.groups, planned)
    # Then it revokes it, having read no target group's targets (of a's 12, none could
    # use port 40000 in a's nodes)
    assert revoked(live) == {"sgr-stale"}
    assert reader.target_healths == 0


@given(narrow_reads.accounts(), st.data())
def test_through_the_index_a_revoke_never_takes_away_what_the_account_now_needs(
    case: tuple[Inventory, Policy, Scope], data: st.DataObject
) -> None:
    # Given the planner's plan and the index from one read, and the account changed since
    # (targets moved); cases where a target group the index does not choose changed are
    # skipped: the index is trusted for those within the verification period (what holds
    # there is tests/unit/core/test_revoke_closure.py's: they need none of the lost traffic)
    before, chosen, _ = case
    if (moved := _planned_then_moved(before, chosen, data)) is None:
        return
    planned_live, plan, now = moved
    # When the refresh plans under the locks through the index
    reader = IndexedReader(now, chosen, index=before)
    planned = planned_live.planned(plan)
    live = compute_locked_plan(reader, chosen, plan.groups, planned)
    if not isinstance(live.result, Plan) or reader.unread_changed:
        return
    event("revokes" if revoked(live) else "no revoke")
    # Then no traffic the account needs now and the rules allow now is taken away
    _assert_needed_traffic_kept(now, chosen, plan, live.result)
    assert revoked(live) <= planned.stale
