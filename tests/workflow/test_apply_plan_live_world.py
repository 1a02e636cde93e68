"""The world moving under a plan, on the real ASL: the live guard, the re-plan after the
settle, and the brake. Each test judges real flows (a concrete source and port), not only
the plan: the backend group (the NLB's second group) must keep reaching the nodes."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from botocore.exceptions import ClientError
from sg_reconciler.core.plan import Modify, Plan
from sg_reconciler.policy import parse_policy, parse_policy_document
from sg_reconciler_tools.cli import main
from sg_reconciler_tools.demo.play import reconcile
from sg_reconciler_tools.demo.world import DemoWorld
from sg_reconciler_tools.local.deployment import REGION
from sg_reconciler_tools.local.runtime import FunctionFailed
from workflow.test_apply_plan import (
    TIMEOUT,
    grow,
    live_plan,
    monitor,
    ranges,
    start,
    states,
)
from workflow.world_moves import admits, at_the_settle, before_revoke, new_rule_id, set_policy


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
        victim,
        lambda: ec2.revoke_security_group_ingress(
            GroupId=victim, SecurityGroupRuleIds=[new_rule_id(world, victim, 32500)]
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
                    "SecurityGroupRuleId": new_rule_id(world, victim, 32500),
                    "SecurityGroupRule": {
                        "IpProtocol": "tcp",
                        "FromPort": 31000,
                        "ToPort": 31200,
                        "ReferencedGroupId": world.backend_group,
                    },
                }
            ],
        )

    before_revoke(world, victim, narrow)
    described = world.runtime.wait_for(start(world, live), TIMEOUT)
    assert described["status"] == "FAILED" and described["error"] == "RevokeIncomplete"
    assert (victim, 31000, 32000) in ranges(world)
    assert admits(world, victim, 31800)  # outside the narrowed rule: the old rule still admits it


def test_the_desired_state_changing_during_the_settle_leaves_the_revokes_to_the_next_run(
    world: DemoWorld,
) -> None:
    # Given the #3639 change, and another Service created while the new rules settle
    live = grow(world)
    at_the_settle(world, lambda: world.add_service(33000))
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
    at_the_settle(
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


def test_an_empty_desired_state_is_held_by_the_brake_until_an_operator_releases_it(
    world: DemoWorld, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a converged world whose load balancer loses the selector tag (the LBC strips
    # tags it does not know): the policy now selects nothing
    clients = world.runtime.clients
    owned_before = sorted(ranges(world))
    for key in parse_policy_document(world.policy).load_balancers.tags:
        clients.elbv2.remove_tags(ResourceArns=[world.load_balancer_arn], TagKeys=[key])
    # When the scheduled run plans it (the planner Lambda, then any execution)
    described = reconcile(world)
    # Then nothing is revoked (before: every owned rule was) and the backend still reaches
    # every node group
    assert described is None or described["status"] == "SUCCEEDED"
    assert sorted(ranges(world)) == owned_before
    assert all(admits(world, g, 31500) for g in world.node_groups.values())
    # And the brake recorded what it holds, for the operator to see
    table = ["release-brake", "--lock-table", world.runtime.physical_name("LockTable")]
    table += ["--region", REGION]
    assert main(table) == 0
    listed = capsys.readouterr().out
    assert listed.startswith("held ") and "selects no load balancer" in listed
    fingerprint = listed.split()[1]
    # When an operator releases a set the brake does not hold: one line, exit 2, nothing written
    assert main([*table, "--fingerprint", "0" * 16, "--by", "alice"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "holds no revocations with fingerprint" in error
    assert fingerprint in error
    assert not any("brake-release#" in k for k in lock_keys(world))
    # When they release the held set (who: the caller's identity), the next run revokes it
    assert main([*table, "--fingerprint", fingerprint]) == 0
    assert f"released {fingerprint} for one day, by arn:aws:" in capsys.readouterr().out
    reconcile(world)
    assert not [r for r in world.node_rules() if r.owned_by(parse_policy(world.policy).owner)]


def lock_keys(world: DemoWorld) -> list[str]:
    table = world.runtime.physical_name("LockTable")
    items = world.runtime.clients.dynamodb.scan(TableName=table)["Items"]
    # group locks only (the janitor's "stopped#" records and the brake's share the table)
    return [item["group_id"]["S"] for item in items if item["group_id"]["S"].startswith("sg-")]


def fill(world: DemoWorld, group_id: str, permissions: list[dict[str, Any]]) -> None:
    """Rules someone else owns (no owner tag), one port each from 1000 up."""
    for port, permission in enumerate(permissions, start=1000):
        world.runtime.clients.ec2.authorize_security_group_ingress(
            GroupId=group_id,
            IpPermissions=[{"IpProtocol": "tcp", "FromPort": port, "ToPort": port, **permission}],
        )


def test_ipv4_and_ipv6_rules_are_counted_apart_so_make_before_break_still_fits(
    world: DemoWorld,
) -> None:
    # Given a node group holding 58 IPv4 and 58 IPv6 rules of others next to our backend rule
    # (a group reference counts in both families: 59 and 59 of 60 each, 117 rules in all)
    group = sorted(world.node_groups.values())[0]
    fill(world, group, [{"IpRanges": [{"CidrIp": f"10.9.{i}.0/24"}]} for i in range(58)])
    fill(world, group, [{"Ipv6Ranges": [{"CidrIpv6": f"2001:db8:{i:x}::/48"}]} for i in range(58)])
    # When the #3639 change is planned and run (AWS's count: the new rule makes 60 and 60)
    live = grow(world)
    assert isinstance(live.result, Plan)
    assert not any(isinstance(s, Modify) for s in live.result.steps), live.result.to_dict()
    described = world.runtime.wait_for(start(world, live), TIMEOUT)
    # Then it is applied authorize-first (before: every rule counted once, 117 of 60, so the
    # group was over its quota and the change was refused)
    assert described["status"] == "SUCCEEDED", described.get("cause")
    assert (group, 31000, 32500) in ranges(world) and admits(world, group, 32500)


def test_a_prefix_list_rule_weighs_its_max_entries_so_a_full_group_is_changed_in_place(
    world: DemoWorld,
) -> None:
    # Given a node group whose IPv4 quota is full: a prefix list of MaxEntries 50, 9 CIDR
    # rules of others and our backend rule (11 rules, 60 IPv4 units)
    ec2 = world.runtime.clients.ec2
    group = sorted(world.node_groups.values())[0]
    offices = ec2.create_managed_prefix_list(
        PrefixListName="offices", AddressFamily="IPv4", MaxEntries=50
    )["PrefixList"]["PrefixListId"]
    fill(world, group, [{"PrefixListIds": [{"PrefixListId": offices}]}])
    fill(world, group, [{"IpRanges": [{"CidrIp": f"10.8.{i}.0/24"}]} for i in range(9)])
    with pytest.raises(ClientError, match="RulesPerSecurityGroupLimitExceeded"):
        fill(world, group, [{"IpRanges": [{"CidrIp": "10.7.0.0/24"}]}])  # AWS: the group is full
    # When the #3639 change is planned and run
    live = grow(world)
    assert isinstance(live.result, Plan)
    in_place = [s for s in live.result.steps if isinstance(s, Modify)]
    # Then the full group's rule is widened in place, with no extra slot (before: 11 of 60,
    # so authorize-first, which AWS refuses: rolled back on every run, never converged)
    assert [s.rule.group_id for s in in_place] == [group]
    with monitor(world, live) as watch:
        described = world.runtime.wait_for(start(world, live), TIMEOUT)
    assert described["status"] == "SUCCEEDED", described.get("cause")
    watch.assert_clean()
    assert (group, 31000, 32500) in ranges(world) and admits(world, group, 32500)


def test_two_stacks_in_one_account_cannot_share_an_owner(world: DemoWorld) -> None:
    # Given this stack's claim on its owner name
    ssm = world.runtime.clients.ssm
    claim = world.runtime.ref("OwnerClaim")
    assert claim == "/sg-reconciler/owners/sg-reconciler"
    # When a second stack with the same owner is deployed, its claim cannot be created
    with pytest.raises(ClientError, match="ParameterAlreadyExists"):
        ssm.put_parameter(Name=claim, Value="arn:aws:cloudformation:stack/b", Type="String")
    # And when the claim is taken over by hand, this stack refuses to run: no execution,
    # no write (before: both stacks revoked each other's rules on every scheduled run)
    ssm.put_parameter(Name=claim, Value="arn:aws:cloudformation:stack/b", Overwrite=True)
    before = sorted(ranges(world))
    world.add_service(32500)
    with pytest.raises(FunctionFailed, match="claimed by arn:aws:cloudformation:stack/b"):
        reconcile(world)
    assert sorted(ranges(world)) == before


def test_a_policy_naming_another_owner_is_refused_before_any_call(world: DemoWorld) -> None:
    # Given a policy that names another deployment's owner
    set_policy(world, json.dumps({**json.loads(world.policy), "owner": "staging"}))
    before = sorted(ranges(world))
    world.add_service(32500)
    # When the schedule runs, the planner refuses in one line and nothing is written
    with pytest.raises(FunctionFailed, match="owner 'staging' is not this deployment's owner"):
        reconcile(world)
    assert sorted(ranges(world)) == before


def test_an_execution_stopped_by_hand_frees_its_locks_without_waiting_for_the_lease(
    world: DemoWorld,
) -> None:
    # Given the #3639 change, stopped by hand while its new rules settle (locks held)
    live = grow(world)
    sfn = world.runtime.clients.stepfunctions
    held_at_the_settle: list[list[str]] = []
    execution: list[str] = []

    def stop() -> None:
        held_at_the_settle.append(lock_keys(world))
        sfn.stop_execution(executionArn=execution[0], cause="stopped by an operator")

    at_the_settle(world, stop)
    execution.append(start(world, live))
    described = world.runtime.wait_for(execution[0], TIMEOUT)
    # Then it ends ABORTED, and its locks are gone well before their lease (900 s) ends
    assert described["status"] == "ABORTED"
    assert sorted(held_at_the_settle[0]) == sorted(world.node_groups.values())
    deadline = time.monotonic() + 10
    while lock_keys(world) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lock_keys(world) == []
    # And the groups are a safe superset: the old and the new rules, backend admitted
    for group in world.node_groups.values():
        assert admits(world, group, 31500) and admits(world, group, 32500)
    # And the next run takes the locks at once and converges
    reconcile(world)
    assert not live_plan(world).result.steps  # type: ignore[union-attr]
