"""The inventory index on the real ASL (docs/architecture.md, The inventory index): events dropped, delivered out
of order or made by a service, the index emptied, and a verification that finds drift; in
each, the invariant monitor sees no loss of traffic that both the old and the new rules
allow, and the account converges. Also what an event-driven one-target change reads in the
planner: the same few ELBv2 describes whatever the account's size
(docs/architecture.md, "The inventory index")."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from sg_reconciler.adapters.index_table import IndexTable
from sg_reconciler.app.indexed_plan import load_view
from sg_reconciler.core.inventory_index import IndexView
from sg_reconciler_tools.demo.play import deliver_events, reconcile, run_planner
from sg_reconciler_tools.demo.world import IMAGE_ID, DemoWorld, cloudtrail_event
from sg_reconciler_tools.local import InvariantMonitor
from workflow.read_counts import counted_reads
from workflow.test_apply_plan import TIMEOUT, live_plan
from workflow.test_locked_reads import add_other_cluster


def index(world: DemoWorld) -> IndexTable:
    return IndexTable(world.runtime.clients.dynamodb, world.runtime.ref("IndexTable"))


def view(world: DemoWorld) -> IndexView:
    return load_view(index(world))


def registered(world: DemoWorld, tg: str) -> set[tuple[str, int | None]]:
    entry = view(world).target_groups[tg]
    return {(m.target_id, m.port) for m in entry.members if m.present}


def covers(world: DemoWorld, port: int, node: str | None = None) -> bool:
    """Whether the node groups (of `node`, or all) admit `port` from the backend group."""
    rules = world.node_rules()
    groups = set(world.node_groups.values())
    if node is not None:
        (reservation,) = world.runtime.clients.ec2.describe_instances(InstanceIds=[node])[
            "Reservations"
        ]
        groups &= {g["GroupId"] for g in reservation["Instances"][0]["SecurityGroups"]}
    assert groups, "no node group to judge: `all` would hold over nothing"
    return all(
        any(r.group_id == g and r.key.from_port <= port <= r.key.to_port for r in rules)
        for g in groups
    )


@contextmanager
def watched(world: DemoWorld) -> Iterator[InvariantMonitor]:
    """The node groups between their rules now and the desired rules of the account now."""
    with InvariantMonitor(
        world.runtime.clients.ec2, world.node_groups.values(), None, live_plan(world).desired
    ) as monitor:
        yield monitor
    monitor.assert_clean()


def event(name: str, tg: str, targets: list[tuple[str, int]], at: datetime) -> dict[str, Any]:
    made = cloudtrail_event(
        name, {"targetGroupArn": tg, "targets": [{"id": i, "port": p} for i, p in targets]}, None
    )
    made["detail"]["eventTime"] = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    return made


def plan_and_run(world: DemoWorld, batch: dict[str, Any]) -> dict[str, Any] | None:
    arn = run_planner(world, batch)
    if arn is None:
        return None
    described = world.runtime.wait_for(arn, TIMEOUT)
    assert described["status"] == "SUCCEEDED", described.get("cause")
    return described


def test_the_first_reconcile_fills_the_index(world: DemoWorld) -> None:
    found = view(world)
    assert set(found.target_groups) == set(world.target_groups.values())
    assert world.load_balancer_arn in found.load_balancers
    assert set(world.instances) <= set(found.targets)
    assert all(e.verified is not None for e in found.target_groups.values())


def test_a_service_registering_a_target_on_a_new_port_is_applied(world: DemoWorld) -> None:
    # Given a target registered on a new port by Auto Scaling (a service, not a role)
    tg, port = world.target_groups[31000], 32400
    world.runtime.clients.elbv2.register_targets(
        TargetGroupArn=tg, Targets=[{"Id": world.instances[0], "Port": port}]
    )
    made = event("RegisterTargets", tg, [(world.instances[0], port)], datetime.now(UTC))
    made["detail"]["userIdentity"] = {
        "type": "AWSService",
        "invokedBy": "autoscaling.amazonaws.com",
    }
    # When its event is planned
    with watched(world):
        plan_and_run(world, deliver_events(world, [made]))
    # Then the index holds it and the node group admits the port
    assert (world.instances[0], port) in registered(world, tg)
    assert covers(world, port, world.instances[0])


def test_a_deregistration_delivered_before_its_registration_leaves_the_target_out(
    world: DemoWorld,
) -> None:
    # Given a target registered on a new port and deregistered a minute later
    tg, port, node = world.target_groups[31450], 32600, world.instances[1]
    elbv2 = world.runtime.clients.elbv2
    elbv2.register_targets(TargetGroupArn=tg, Targets=[{"Id": node, "Port": port}])
    elbv2.deregister_targets(TargetGroupArn=tg, Targets=[{"Id": node, "Port": port}])
    now = datetime.now(UTC)
    register = event("RegisterTargets", tg, [(node, port)], now - timedelta(minutes=1))
    deregister = event("DeregisterTargets", tg, [(node, port)], now)
    before = sorted((r.group_id, r.key.from_port, r.key.to_port) for r in world.node_rules())
    # When CloudTrail delivers the deregistration first, each in its own batch
    with watched(world):
        plan_and_run(world, deliver_events(world, [deregister]))
        plan_and_run(world, deliver_events(world, [register]))
    # Then the target stays out of the index and no rule opens its port
    assert (node, port) not in registered(world, tg)
    assert (
        sorted((r.group_id, r.key.from_port, r.key.to_port) for r in world.node_rules()) == before
    )
    assert not covers(world, port, node)


def test_a_dropped_event_is_repaired_by_the_schedule_s_verification(world: DemoWorld) -> None:
    # Given a target registered on a new port whose event never arrives
    tg, port, node = world.target_groups[32000], 32700, world.instances[2]
    world.runtime.clients.elbv2.register_targets(
        TargetGroupArn=tg, Targets=[{"Id": node, "Port": port}]
    )
    # When the schedule runs: each run verifies a slice (the oldest first)
    runs = 0
    with watched(world):
        while not covers(world, port, node) and runs <= 2 * len(world.target_groups):
            time.sleep(1.1)  # versions count seconds: each run's verification is its own
            reconcile(world)
            runs += 1
    # Then within a pass or two over the target groups the drift is found, the index repaired
    # and the rule authorized
    assert covers(world, port, node), f"not repaired after {runs} scheduled runs"
    assert (node, port) in registered(world, tg)


def test_an_emptied_index_is_filled_again_and_the_change_applied(world: DemoWorld) -> None:
    # Given the index table emptied (a restore, an operator's reset)
    assert index(world).clear() > 0
    # When a Service is added, with its events
    events = world.add_service(32650)
    with watched(world):
        plan_and_run(world, deliver_events(world, events))
    # Then the change is applied and the index holds every target group again
    assert covers(world, 32650)
    assert set(view(world).target_groups) == set(world.target_groups.values())


def test_an_event_reads_the_same_few_target_groups_whatever_the_account_size(
    world: DemoWorld,
) -> None:
    # Given the demo cluster beside another one, at two account sizes, reconciled
    counts = []
    for size in (1, 6):  # a rule per port at both (rule_budget 10): the change only adds
        add_other_cluster(world, size if not counts else size - 1)
        reconcile(world)
        # When a new node of the other cluster is registered in one of its target groups
        # on a new port (a new node: moto keeps one port per instance and target group)
        elbv2, ec2 = world.runtime.clients.elbv2, world.runtime.clients.ec2
        tg = next(
            t["TargetGroupArn"]
            for t in elbv2.describe_target_groups()["TargetGroups"]
            if t["TargetGroupName"] == "other-0"
        )
        port = 30500 + 10 * len(counts)  # not adjacent: no range merges, only an addition
        nodes = ec2.describe_security_groups(
            Filters=[{"Name": "group-name", "Values": ["other-nodes"]}]
        )["SecurityGroups"][0]["GroupId"]
        node = ec2.run_instances(
            ImageId=IMAGE_ID,
            MinCount=1,
            MaxCount=1,
            SecurityGroupIds=[nodes],
            SubnetId=world.subnet_ids[0],
        )["Instances"][0]["InstanceId"]
        elbv2.register_targets(TargetGroupArn=tg, Targets=[{"Id": node, "Port": port}])
        with counted_reads(world, under_the_locks=False) as seen:
            plan_and_run(
                world,
                deliver_events(
                    world, [event("RegisterTargets", tg, [(node, port)], datetime.now(UTC))]
                ),
            )
        # Then the planner reads a few ELBv2 describes, the same at both sizes
        counts.append((seen.total("elbv2"), seen.total("ec2")))
        assert seen.total("elbv2") <= 10, seen.calls
    assert counts[0] == counts[1], counts
