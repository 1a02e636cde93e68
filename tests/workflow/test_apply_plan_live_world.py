"""The world moving under a plan, on the real ASL: the live guard, the re-plan after the
settle, and the brake. Each test judges real flows (a concrete source and port), not only
the plan: the backend group (the NLB's second group) must keep reaching the nodes."""

from __future__ import annotations

import json
from typing import Any

from sg_reconciler.core.plan import Plan, Revoke
from sg_reconciler.core.rules import Peer, ingress_rules
from sg_reconciler.core.traffic import Traffic
from sg_reconciler.policy import parse_policy
from sg_reconciler.reconcile import compute_live_plan
from sg_reconciler_tools.demo.play import reconcile
from sg_reconciler_tools.demo.world import DemoWorld
from workflow.test_apply_plan import TIMEOUT, grow, live_plan, ranges, start, states

TCP = 6


def admits(world: DemoWorld, group_id: str, port: int) -> bool:
    """Flow check: the backend group (carried by the NLB) reaches `port` on the group now."""
    docs = world.runtime.clients.ec2.describe_security_group_rules(
        Filters=[{"Name": "group-id", "Values": [group_id]}]
    )["SecurityGroupRules"]
    traffic = Traffic.of(ingress_rules(docs, "live"))
    return traffic.allows(group_id, Peer("group", world.backend_group), TCP, port)


def before_revoke(world: DemoWorld, act: Any) -> None:
    """Run `act` once, right before the first revoke step (after the visibility check)."""
    done: list[bool] = []

    def listener(function: str, event: Any) -> None:
        steps = event.get("item", {}).get("steps", []) if isinstance(event, dict) else []
        if (
            function == "ApplyStepsFunction"
            and not done
            and any(s.get("action") == "revoke" for s in steps)
        ):
            done.append(True)
            act()

    world.runtime.before_invoke(listener)


def once(world: DemoWorld, act: Any) -> None:
    """Run `act` once, when the first Wait state starts (the settle)."""
    done: list[bool] = []

    def listener(_seconds: float) -> None:
        if not done:
            done.append(True)
            act()

    world.runtime.waits.subscribe(listener)


def new_rule_id(world: DemoWorld, group_id: str) -> str:
    return next(
        r.rule_id or ""
        for r in world.node_rules()
        if r.group_id == group_id and (r.key.from_port, r.key.to_port) == (31000, 32500)
    )


def test_an_outside_writer_revoking_our_new_rule_after_the_verify_stops_the_revoke(
    world: DemoWorld,
) -> None:
    # Given the #3639 change, and someone who revokes our new rule in one node group right
    # after "Verify the new rules are visible"
    live = grow(world)
    victim = sorted(world.node_groups.values())[0]
    ec2 = world.runtime.clients.ec2
    before_revoke(
        world,
        lambda: ec2.revoke_security_group_ingress(
            GroupId=victim, SecurityGroupRuleIds=[new_rule_id(world, victim)]
        ),
    )
    # When the execution runs
    described = world.runtime.wait_for(start(world, live), TIMEOUT)
    # Then the guard makes no call: the old rule stays, the backend still reaches the nodes
    assert described["status"] == "FAILED" and described["error"] == "RevokeIncomplete"
    assert (victim, 31000, 32000) in ranges(world)
    assert admits(world, victim, 31500)
    # and the cause says what is actually left, never "keeps every new rule"
    assert "WouldLoseTraffic" in described["cause"]
    assert "keep every new rule" not in described["cause"]
    assert "desired traffic not allowed now" in described["cause"]
    assert victim in described["cause"]


def test_an_outside_writer_narrowing_our_new_rule_after_the_verify_stops_the_revoke(
    world: DemoWorld,
) -> None:
    live = grow(world)
    victim = sorted(world.node_groups.values())[0]
    ec2 = world.runtime.clients.ec2

    def narrow() -> None:
        ec2.modify_security_group_rules(
            GroupId=victim,
            SecurityGroupRules=[
                {
                    "SecurityGroupRuleId": new_rule_id(world, victim),
                    "SecurityGroupRule": {
                        "IpProtocol": "tcp",
                        "FromPort": 31000,
                        "ToPort": 31200,
                        "ReferencedGroupId": world.backend_group,
                    },
                }
            ],
        )

    before_revoke(world, narrow)
    described = world.runtime.wait_for(start(world, live), TIMEOUT)
    assert described["status"] == "FAILED" and described["error"] == "RevokeIncomplete"
    assert (victim, 31000, 32000) in ranges(world)
    assert admits(world, victim, 31800)  # outside the narrowed rule: the old rule still admits it


def test_the_desired_state_changing_during_the_settle_leaves_the_revokes_to_the_next_run(
    world: DemoWorld,
) -> None:
    # Given the #3639 change, and another Service created while the new rules settle
    live = grow(world)
    once(world, lambda: world.add_service(33000))
    # When the execution runs
    described = world.runtime.wait_for(start(world, live), TIMEOUT)
    # Then nothing is revoked (the new plan wants a rule that does not exist yet) and the
    # console says so; every node group keeps a rule that admits the backend
    assert described["status"] == "SUCCEEDED", described.get("cause")
    output = json.loads(described["output"])
    assert (
        output["status"] == "revokes_deferred" and "changed during the settle" in output["reason"]
    )
    assert "Revokes left to the next run" in states(world, described["executionArn"])
    for group in world.node_groups.values():
        assert (group, 31000, 32000) in ranges(world) and admits(world, group, 31500)
    # And the next run converges
    reconcile(world)
    assert not live_plan(world).result.steps  # type: ignore[union-attr]


def test_a_rule_wanted_again_during_the_settle_is_not_revoked(world: DemoWorld) -> None:
    # Given the #3639 change, and the new Service deleted again while the rules settle
    live = grow(world)
    elbv2: Any = world.runtime.clients.elbv2
    tg = world.target_groups[32500]
    once(
        world,
        lambda: elbv2.deregister_targets(
            TargetGroupArn=tg, Targets=[{"Id": i, "Port": 32500} for i in world.instances]
        ),
    )
    described = world.runtime.wait_for(start(world, live), TIMEOUT)
    # Then the old rule, wanted again, stays; only rules stale in both plans would go
    assert described["status"] == "SUCCEEDED", described.get("cause")
    for group in world.node_groups.values():
        assert (group, 31000, 32000) in ranges(world)


def test_an_empty_desired_state_is_held_by_the_brake(world: DemoWorld) -> None:
    # Given a converged world whose load balancer loses the selector tag (the LBC strips
    # tags it does not know): the policy now selects nothing
    clients = world.runtime.clients
    policy = parse_policy(world.policy)
    for key in policy.load_balancers.tags:
        clients.elbv2.remove_tags(ResourceArns=[world.load_balancer_arn], TagKeys=[key])
    # When it is planned
    live = compute_live_plan(clients.ec2, clients.elbv2, policy, None, partial=True)
    # Then the plan revokes nothing and says why (before: it revoked every owned rule)
    assert isinstance(live.result, Plan)
    assert not any(isinstance(s, Revoke) for s in live.result.steps)
    assert "selects no load balancer" in live.result.held
    assert live.brake is not None and live.brake.fingerprint in live.result.notes[-1]
    # And an operator's release of exactly that set lets it go
    released = compute_live_plan(
        clients.ec2,
        clients.elbv2,
        policy,
        None,
        partial=True,
        released=lambda fingerprint: fingerprint == live.brake.fingerprint,  # type: ignore[union-attr]
    )
    assert isinstance(released.result, Plan) and released.released
    assert any(isinstance(s, Revoke) for s in released.result.steps)
