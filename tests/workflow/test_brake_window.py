"""The brake with memory (docs/invariants.md, invariants 12 and 14) on the real ASL: load balancers leave the
selection one at a time (the LBC strips a tag it did not set, one Service reconcile at a
time). Each plan takes away a small share; together, within the brake's window, they take
away more than the policy's share of the rules owned at the window's start, and the plan
that crosses it is held until an operator releases it (docs/invariants.md, 12 and 14).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from evidence.evidence_kit import live_plan
from sg_reconciler.adapters.deployment import BrakeReleases, HeldRevokes
from sg_reconciler.core.rules import DEFAULT_OWNER
from sg_reconciler_tools.demo.play import deliver_events, reconcile, run_planner
from sg_reconciler_tools.demo.world import DemoWorld, cloudtrail_event
from sg_reconciler_tools.local import InvariantMonitor
from workflow.test_apply_plan import TIMEOUT
from workflow.world_moves import MANAGED, add_load_balancer, set_policy

EXTRA = 4  # load balancers beside the demo's NLB, each with a group of its own


def owned_from(world: DemoWorld, peer: str) -> int:
    return sum(
        1
        for r in world.node_rules()
        if r.owned_by(DEFAULT_OWNER) and r.key.peer.kind == "group" and r.key.peer.value == peer
    )


@dataclass
class Shrink:
    """What the series of runs did: each run's status (None: no execution), the extra load
    balancers' owned rules left after the series, the held sets, the invariant monitor."""

    outcomes: list[Any]
    left: list[int]
    held: list[HeldRevokes]
    released: HeldRevokes | None
    watch: InvariantMonitor
    extra: list[tuple[str, str]]


def leave_selection(world: DemoWorld, lb: str) -> Any:
    """The selection tag stripped, and its RemoveTags event planned (the schedule's runs see
    a lost one when the load balancer's slice comes round, docs/limits.md); the status of
    the execution it started (None: none)."""
    world.runtime.clients.elbv2.remove_tags(ResourceArns=[lb], TagKeys=[MANAGED])
    event = cloudtrail_event("RemoveTags", {"resourceArns": [lb], "tagKeys": [MANAGED]}, None)
    started = run_planner(world, deliver_events(world, [event]))
    return None if started is None else world.runtime.wait_for(started, TIMEOUT)["status"]


def shrink_in_steps(world: DemoWorld) -> Shrink:
    """The demo NLB and four more, each admitted by its own group (2 rules each: 12 owned),
    brake 50% from 4 rules; the four leave the selection one at a time, each planned from
    its event; then an operator releases what the brake holds, and a scheduled run."""
    runtime = world.runtime
    policy = {**json.loads(world.policy), "brake": {"max_revoke_percent": 50, "min_revokes": 4}}
    del policy["rule_source"]  # each load balancer's own groups are the sources
    set_policy(world, json.dumps(policy))
    extra = [add_load_balancer(world, i) for i in range(EXTRA)]
    assert (reconcile(world) or {}).get("status") == "SUCCEEDED"
    assert sum(1 for r in world.node_rules() if r.owned_by(DEFAULT_OWNER)) == 12
    assert all(owned_from(world, g) == 2 for _, g in extra)
    elbv2 = runtime.clients.elbv2
    releases = BrakeReleases(runtime.clients.dynamodb, runtime.ref("LockTable"))
    outcomes: list[Any] = []
    # NEW: only the demo NLB's rules stay; every state must keep them (1) and add nothing (2)
    for lb, _ in extra:
        elbv2.remove_tags(ResourceArns=[lb], TagKeys=[MANAGED])
    final_desired = live_plan(world).desired
    for lb, _ in extra:
        elbv2.add_tags(ResourceArns=[lb], Tags=[{"Key": MANAGED, "Value": "true"}])
    with InvariantMonitor(
        runtime.clients.ec2, world.node_groups.values(), None, final_desired
    ) as watch:
        for lb, _ in extra:
            outcomes.append(leave_selection(world, lb))
        left = [owned_from(world, g) for _, g in extra]
        held = releases.held()
        released = releases.release(held[0].fingerprint, "test") if held else None
        outcomes.append((reconcile(world) or {}).get("status"))
    return Shrink(outcomes, left, held, released, watch, extra)


def test_load_balancers_leaving_one_at_a_time_are_held_once_together_they_cross_the_share(
    world: DemoWorld,
) -> None:
    # When four load balancers of five leave the selection one at a time
    shrink = shrink_in_steps(world)
    # Then the first three went (2, 4, 6 of the 12 rules owned at the window's start: 50%),
    # the fourth (8 of 12, 67%) is held with a reason naming the window, each plan alone
    # taking away 2 rules (at most a third of what was left)
    assert shrink.outcomes[:3] == ["SUCCEEDED"] * 3
    assert shrink.outcomes[3] is None  # held: the plan had nothing else to do, no execution
    assert shrink.left == [0, 0, 0, 2]
    (held,) = shrink.held
    assert "8 of the 12 rules owned in the brake's window" in held.reason
    # And after the release the held revocations went
    assert shrink.released is not None and shrink.outcomes[4] == "SUCCEEDED"
    assert all(owned_from(world, g) == 0 for _, g in shrink.extra)
    assert shrink.watch.snapshots and shrink.watch.violations == []
