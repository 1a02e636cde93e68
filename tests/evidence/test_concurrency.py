"""Concurrency: twenty executions at once over overlapping sets of groups.

Four node groups; new Services whose targets span different subsets of them; then twenty
triggers at once, each a plan for another scope (every single group, pair and triple, the
whole set, and five pairs again), all started before the first ends. The lock table must
serialize them: no deadlock (every execution ends within the timeout, none gives up
waiting), the critical sections on one group never overlap (from each execution's history:
from entering "Refresh the plan under the locks", which follows taking every lock, to
entering "Release the group locks"), no state between calls breaks an invariant, and the
final state is the desired one.

Time is scaled, the one place the evidence suite really sleeps: a Retry backoff of s seconds
(a waiting "Lock the groups" retries on LockBusy with 2 s x 1.5^n, capped at 30 s, jittered,
40 attempts: some 10 to 20 minutes in AWS) sleeps s/10 here, about 60-120 s of patience
against executions that take a second or two here (tens of seconds in AWS), and five or
more on a machine busy with other work: at s/20 a waiter behind ten such executions on one
group gave up (CI at 8ca8d39, beside another test session). Without any sleep, a waiter
would burn its 40 attempts in a few seconds of CPU and give up: LockBusy.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from evidence.evidence_kit import (
    MACHINE,
    handler_variables_kept,
    held_locks,
    monitor_for,
    plan_steps,
)
from sg_reconciler.adapters.inventory import AccountInventory
from sg_reconciler.app.live_plan import compute_live_plan
from sg_reconciler.core.plan import Plan
from sg_reconciler.core.scope import Scope
from sg_reconciler.policy import parse_policy
from sg_reconciler_tools.demo.play import TEMPLATE, quiet_handlers, reconcile
from sg_reconciler_tools.demo.world import CLUSTER_TAG, IMAGE_ID, DemoWorld, build_world
from sg_reconciler_tools.local import LocalRuntime

TIME_SCALE = 1 / 10
TIMEOUT = 240.0
TRIGGERS = 20


def add_node_group(world: DemoWorld, name: str, subnet: str) -> None:
    """Another node group with the cluster tag and two nodes."""
    ec2 = world.runtime.clients.ec2
    group = ec2.create_security_group(
        GroupName=f"eks-demo-{name}",
        Description=name,
        VpcId=world.vpc_id,
        TagSpecifications=[
            {"ResourceType": "security-group", "Tags": [{"Key": CLUSTER_TAG, "Value": "owned"}]}
        ],
    )["GroupId"]
    reservation = ec2.run_instances(
        ImageId=IMAGE_ID, MinCount=2, MaxCount=2, SecurityGroupIds=[group], SubnetId=subnet
    )
    world.node_groups[name] = group
    world.instances += [i["InstanceId"] for i in reservation["Instances"]]


@pytest.fixture(scope="module")
def world() -> Iterator[DemoWorld]:
    quiet_handlers()
    with LocalRuntime(TEMPLATE) as runtime, handler_variables_kept(runtime):
        built = build_world(runtime)
        add_node_group(built, "nodes-c", built.subnet_ids[0])
        add_node_group(built, "nodes-d", built.subnet_ids[1])
        reconcile(built)
        yield built


def nodes_of(world: DemoWorld, *names: str) -> list[str]:
    """The instances of some node groups (two per group, in creation order)."""
    order = ["nodes-a", "nodes-b", "nodes-c", "nodes-d"]
    return [i for n in names for i in world.instances[2 * order.index(n) : 2 * order.index(n) + 2]]


def critical_section(world: DemoWorld, arn: str) -> tuple[float, float] | None:
    """(locked, releasing) timestamps, or None when the execution never held its locks."""
    locked = releasing = None
    for event in world.runtime.events(arn):
        details = event.get("stateEnteredEventDetails") or {}
        if details.get("name") == "Refresh the plan under the locks" and locked is None:
            locked = event["timestamp"].timestamp()
        if details.get("name") == "Release the group locks" and releasing is None:
            releasing = event["timestamp"].timestamp()
    if locked is None:
        return None
    assert releasing is not None, f"{arn} locked its groups and never released them"
    return locked, releasing


def test_twenty_overlapping_executions_serialize_per_group_and_converge(
    world: DemoWorld,
) -> None:
    runtime = world.runtime
    clients = runtime.clients
    groups = world.node_groups
    # Given Services whose targets span different subsets of the four node groups
    world.add_service(32500, nodes_of(world, "nodes-a", "nodes-c"))
    world.add_service(32600, nodes_of(world, "nodes-b", "nodes-d"))
    world.add_service(32700, nodes_of(world, "nodes-c", "nodes-d"))
    world.add_service(32800, nodes_of(world, "nodes-a", "nodes-b", "nodes-c", "nodes-d"))
    policy = parse_policy(world.policy)
    full = compute_live_plan(AccountInventory(clients.ec2, clients.elbv2, policy), policy, None)
    assert isinstance(full.result, Plan) and set(full.result.groups) == set(groups.values())
    # And twenty plans for overlapping scopes, computed before any of them runs
    names = sorted(groups)
    scopes = [
        *([n] for n in names),
        *(list(c) for c in itertools.combinations(names, 2)),
        *(list(c) for c in itertools.combinations(names, 3)),
        names,
        *(list(c) for c in itertools.combinations(names, 2)),
    ][:TRIGGERS]
    plans: list[tuple[str, dict[str, Any], set[str]]] = []
    for index, scope in enumerate(scopes):
        ids = frozenset(groups[n] for n in scope)
        live = compute_live_plan(
            AccountInventory(clients.ec2, clients.elbv2, policy), policy, Scope(group_ids=ids)
        )
        assert isinstance(live.result, Plan) and live.result.steps, scope
        name = f"c{index:02d}-{live.result.plan_id()}"[:80]
        payload = {"plan_id": name, "plan": live.result.to_dict()}
        plans.append((name, payload, set(live.result.groups)))
    assert len(plans) == TRIGGERS

    def scaled_sleep(seconds: float) -> None:
        threading.Event().wait(seconds * TIME_SCALE)

    # When all twenty start at once
    with (
        runtime.retry_sleeps.subscribe(scaled_sleep),
        monitor_for(world, full.desired, list(groups.values())) as watch,
    ):
        arns = [runtime.start_execution(MACHINE, payload, name) for name, payload, _ in plans]
        deadline = time.monotonic() + TIMEOUT
        done = [runtime.wait_for(arn, max(1.0, deadline - time.monotonic()), 0.1) for arn in arns]

    # Then none deadlocked or gave up: each applied its change or found it already applied
    failed = {
        d["name"]: [
            (e["type"], {k: v for k, v in e.items() if k.endswith("EventDetails")})
            for e in runtime.events(d["executionArn"])
            if "Failed" in e["type"]
        ]
        for d in done
        if d["status"] != "SUCCEEDED"
    }
    assert not failed, failed
    applied = [d for d in done if json.loads(d["output"]).get("status") == "applied"]
    assert applied, "no execution applied anything"
    # And no two executions were ever inside their critical sections on one group at once
    scope_of = {arn: p[2] for arn, p in zip(arns, plans, strict=True)}
    windows = {arn: critical_section(world, arn) for arn in arns}
    overlaps = []
    for a, b in itertools.combinations(arns, 2):
        wa, wb = windows[a], windows[b]
        if wa and wb and scope_of[a] & scope_of[b] and wa[0] < wb[1] and wb[0] < wa[1]:
            overlaps.append((a.rsplit(":", 1)[1], b.rsplit(":", 1)[1], wa, wb))
    assert not overlaps, overlaps
    assert all(windows.values()), "every execution held its locks once"
    # And every state between calls kept the invariants, and the end is the desired state
    watch.assert_clean()
    assert len(watch.snapshots) >= len(full.result.steps)
    assert held_locks(runtime) == []
    assert plan_steps(world) == 0
    desired = {(r.group_id, r.key.from_port, r.key.to_port) for r in full.desired}
    now = {(r.group_id, r.key.from_port, r.key.to_port) for r in world.node_rules()}
    assert now == desired
