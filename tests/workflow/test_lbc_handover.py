"""A hand-over from the AWS Load Balancer Controller, make-before-break, on the real ASL.

The controller owns its shared backend rules by their description; when its rule management
is turned off it revokes every rule that still carries that description. Before, a desired
rule equal to a controller rule was left to the controller (the planner saw it as satisfied
by an unmanaged rule and never made its own), so turning the controller off opened a gap.
Now the run adopts it in place (owner tag, then our description: same id, same key) and
authorizes the other desired rules first; a flow check watches every state between calls.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sg_reconciler.adapters.inventory import AccountInventory
from sg_reconciler.app.live_plan import compute_live_plan
from sg_reconciler.app.steps import verify_rules
from sg_reconciler.core.rules import ADOPTED_BY_TAG_KEY, Rule
from sg_reconciler.errors import NotYetVisible
from sg_reconciler.policy import LBC_SHARED_DESCRIPTION, parse_policy
from sg_reconciler_tools.cli import main
from sg_reconciler_tools.demo.play import TEMPLATE, quiet_handlers, reconcile
from sg_reconciler_tools.demo.world import DemoWorld, build_world
from sg_reconciler_tools.local import Fault, FaultInjector, InvariantMonitor, LocalRuntime
from sg_reconciler_tools.local.deployment import REGION
from workflow.world_moves import admits, set_policy

KUBELET = 10250


@pytest.fixture
def lbc_world() -> Iterator[DemoWorld]:
    """The #3639 world as the controller left it: in each node group its shared backend rule
    tcp 31000-32000, and in one group a rule for a Service deleted since (tcp 30000-30001)."""
    quiet_handlers()
    with LocalRuntime(TEMPLATE) as runtime:
        world = build_world(runtime)
        for group_id in world.node_groups.values():
            controller_rule(world, group_id, 31000, 32000)
        controller_rule(world, first_group(world), 30000, 30001)
        yield world


def first_group(world: DemoWorld) -> str:
    return sorted(world.node_groups.values())[0]


def controller_rule(world: DemoWorld, group_id: str, lo: int, hi: int) -> str:
    pair = {"GroupId": world.backend_group, "Description": LBC_SHARED_DESCRIPTION}
    return world.runtime.clients.ec2.authorize_security_group_ingress(
        GroupId=group_id,
        IpPermissions=[
            {"IpProtocol": "tcp", "FromPort": lo, "ToPort": hi, "UserIdGroupPairs": [pair]}
        ],
    )["SecurityGroupRules"][0]["SecurityGroupRuleId"]


def handover_policy(world: DemoWorld) -> str:
    """The demo's policy (one min..max range, as the controller) with adoption on, and one
    rule the controller never had: the kubelet port from the backend group."""
    doc = json.loads(world.policy)
    doc["adopt_descriptions"] = [LBC_SHARED_DESCRIPTION]
    doc["static_rules"] = [
        {
            "group_id": first_group(world),
            "from_port": KUBELET,
            "to_port": KUBELET,
            "source_group_id": world.backend_group,
        }
    ]
    return json.dumps(doc)


def rules_by_id(world: DemoWorld) -> dict[str, Rule]:
    return {r.rule_id or "": r for r in world.node_rules()}


def check(world: DemoWorld, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, Any]:
    """`sg-reconciler adopt --live` against the local runtime, as JSON."""
    policy = tmp_path / "policy.json"
    policy.write_text(handover_policy(world))
    code = main(
        ["adopt", "--live", "--policy", str(policy), "--region", REGION, "--output", "json"]
    )
    return code, json.loads(capsys.readouterr().out)


def controller_stops(world: DemoWorld) -> list[str]:
    """What the controller does when its rule management is turned off: it revokes every rule
    that still carries its description."""
    ec2 = world.runtime.clients.ec2
    gone = []
    for group_id in world.node_groups.values():
        ids = [
            r.rule_id or ""
            for r in world.node_rules()
            if r.group_id == group_id and r.description == LBC_SHARED_DESCRIPTION
        ]
        if ids:
            ec2.revoke_security_group_ingress(GroupId=group_id, SecurityGroupRuleIds=ids)
            gone += ids
    return gone


def test_the_lbcs_rules_are_adopted_in_place_and_the_rest_authorized_first(
    lbc_world: DemoWorld, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    world = lbc_world
    set_policy(world, handover_policy(world))
    owner = parse_policy(world.policy).owner
    before = rules_by_id(world)
    adoptable = {i for i, r in before.items() if (r.key.from_port, r.key.to_port) == (31000, 32000)}
    # Given the hand-over's first check: two rules to adopt, one to authorize, not ready
    code, report = check(world, tmp_path, capsys)
    assert code == 3 and report["ready"] is False
    assert {s["rule_id"] for s in report["to_adopt"]} == adoptable
    assert [(r["FromPort"], r["ToPort"]) for r in report["to_authorize"]] == [(KUBELET, KUBELET)]
    assert [(r["FromPort"], r["ToPort"]) for r in report["left_to_owner"]] == [(30000, 30001)]
    # When the scheduled run plans and executes it, with every state between calls watched
    clients = world.runtime.clients
    parsed = parse_policy(handover_policy(world))
    desired = compute_live_plan(
        AccountInventory(clients.ec2, clients.elbv2, parsed), parsed
    ).desired
    with InvariantMonitor(clients.ec2, world.node_groups.values(), None, desired) as watch:
        described = reconcile(world)
    assert described is not None and described["status"] == "SUCCEEDED", described
    assert json.loads(described["output"])["summary"]["rules_adopted"] == 2
    # Then no state lost a flow, nothing unmanaged was revoked or rewritten (tags only added)
    assert watch.violations == [], watch.summary()
    operations = [s.operation for s in watch.snapshots]
    assert "RevokeSecurityGroupIngress" not in operations
    # (each adoption tags the rule before it rewrites its description: the monitor would
    # report a description change on a rule without the owner tag as an ownership violation)
    assert sorted(operations) == sorted(
        ["AuthorizeSecurityGroupIngress", *["CreateTags", "ModifySecurityGroupRules"] * 2]
    )
    # and the controller's equal rules are ours: same ids, same keys, our description, tagged
    after = rules_by_id(world)
    for rule_id in adoptable:
        assert after[rule_id].key == before[rule_id].key
        assert after[rule_id].owned_by(owner) and after[rule_id].tag(ADOPTED_BY_TAG_KEY)
        assert after[rule_id].description != LBC_SHARED_DESCRIPTION
    # And the check says ready; the controller's own leftover stays its business
    code, report = check(world, tmp_path, capsys)
    assert code == 0 and report["ready"] is True and len(report["adopted"]) == 2
    beyond = {(f["IpProtocol"], f["FromPort"], f["ToPort"]) for f in report["beyond_desired"]}
    assert ("tcp", 30000, 30001) in beyond
    # When the controller's rule management is turned off, it revokes only what is its own,
    # and the backend group still reaches every node group (before: both ranges went)
    assert controller_stops(world) == [i for i in before if i not in adoptable]
    assert all(admits(world, g, 31500) for g in world.node_groups.values())
    assert admits(world, first_group(world), KUBELET)
    assert reconcile(world) is None  # converged: the next run has nothing to do


def test_a_failed_hand_over_gives_the_adopted_rules_back_exactly(
    lbc_world: DemoWorld,
) -> None:
    world = lbc_world
    set_policy(world, handover_policy(world))
    before = rules_by_id(world)
    # When the kubelet rule's authorization is denied (after the adoptions ran)
    denied = Fault("ec2", "AuthorizeSecurityGroupIngress", "UnauthorizedOperation", count=5)
    with FaultInjector(denied):
        described = reconcile(world)
    # Then the execution rolls back and every controller rule is exactly as it was:
    # description, tags (none of ours) and key, under the same id
    assert described is not None and described["status"] == "FAILED"
    assert described["error"] == "RolledBack", described
    assert rules_by_id(world) == before
    assert "handed back the 2 rule(s) it had adopted" in described["cause"]


def test_adopt_live_is_not_ready_while_the_adopting_run_could_still_hand_the_rules_back(
    lbc_world: DemoWorld,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given the hand-over's run, whose new rules never show as visible after the settle
    world = lbc_world
    set_policy(world, handover_policy(world))
    before = rules_by_id(world)
    real = verify_rules.verify

    def lagging(event: dict[str, Any], *rest: Any) -> dict[str, Any]:
        if event.get("mode") == "visible":
            raise NotYetVisible("describe still lags")
        return real(event, *rest)

    monkeypatch.setattr(verify_rules, "verify", lagging)
    during: list[tuple[int, Any]] = []
    clients = world.runtime.clients
    parsed = parse_policy(handover_policy(world))
    desired = compute_live_plan(
        AccountInventory(clients.ec2, clients.elbv2, parsed), parsed
    ).desired
    # When the operator checks during the settle, the rules adopted and the kubelet rule in
    with (
        world.runtime.waits.subscribe(
            lambda _s: during.append(check(world, tmp_path, capsys)) if not during else None
        ),
        InvariantMonitor(clients.ec2, world.node_groups.values(), None, desired) as watch,
    ):
        described = reconcile(world)
    # Then it is not ready and names the execution it waits for (before: ready, exit 0)
    assert described is not None and described["error"] == "RolledBack"
    name = described["executionArn"].rsplit(":", 1)[1]
    ((code, report),) = during
    assert len(report["adopted"]) == 2 and report["to_adopt"] == []
    assert report["to_authorize"] == [] and report["cut"] == []  # only the run holds it back
    assert code == 3 and report["ready"] is False
    assert [w.split(" ")[0] for w in report["waiting_for"]] == [name]
    assert "rollback hands the adopted rules back" in report["waiting_for"][0]
    # And after the rollback handed the rules back, it is still not ready: adopt again
    assert rules_by_id(world) == before
    code, report = check(world, tmp_path, capsys)
    assert code == 3 and report["waiting_for"] == [] and len(report["to_adopt"]) == 2
    assert watch.violations == []
