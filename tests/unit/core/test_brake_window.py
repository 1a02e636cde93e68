"""The brake's window (invariant 14): removals let through earlier in the window count with
a plan's own, against the rules owned at the window's start, per deployment and binding."""

from __future__ import annotations

from sg_reconciler.core.brake import (
    DEPLOYMENT,
    BrakeFacts,
    WindowCount,
    binding_scope,
    by_scope,
    check_brake,
)
from sg_reconciler.core.plan import Plan, Revoke
from sg_reconciler.core.rules import OWNER_TAG_KEY, Rule, rule_from_dict

OWNER = "sg-reconciler"
EDGE = binding_scope("edge")


def rule(group: str, port: int, rule_id: str) -> Rule:
    return rule_from_dict(
        {
            "GroupId": group,
            "IpProtocol": "tcp",
            "FromPort": port,
            "ToPort": port,
            "ReferencedGroupInfo": {"GroupId": "sg-lb"},
            "SecurityGroupRuleId": rule_id,
            "Tags": [{"Key": OWNER_TAG_KEY, "Value": OWNER}],
        }
    )


# The window started with 20 owned rules (10 in sg-a, binding edge; 10 in sg-b); 8 went
# earlier in it (4 from each group), 12 are left: ports 1-6 in sg-a, 11-16 in sg-b
CURRENT = [
    rule("sg-a" if p <= 10 else "sg-b", p, f"sgr-{p}") for p in (*range(1, 7), *range(11, 17))
]
GONE_A = frozenset(f"sgr-{p}" for p in range(7, 11))
GONE_B = frozenset(f"sgr-{p}" for p in range(17, 21))
SCOPES = {EDGE: frozenset({"sg-a"})}
WINDOW = {DEPLOYMENT: WindowCount(100, 20, GONE_A | GONE_B), EDGE: WindowCount(100, 10, GONE_A)}


def facts(window: dict[str, WindowCount]) -> BrakeFacts:
    owned = {scope: len(rules) for scope, rules in by_scope(CURRENT, SCOPES).items()}
    return BrakeFacts(
        owned_rules=len(CURRENT),
        selected_load_balancers=3,
        groups_with_targets=frozenset(),
        min_revokes=4,
        window=window,
        scopes=SCOPES,
        owned_now=owned,
    )


def revoking(*ports: int) -> Plan:
    return Plan(tuple(Revoke("sg-b" if p > 10 else "sg-a", (f"sgr-{p}",)) for p in ports))


def desired_without(*ports: int) -> list[Rule]:
    return [Rule(r.key) for r in CURRENT if r.key.from_port not in ports]


def test_a_small_plan_alone_goes_and_with_the_windows_earlier_removals_is_held() -> None:
    plan, desired = revoking(11, 12, 13), desired_without(11, 12, 13)
    # Alone: 3 of the 12 owned now (25%)
    assert check_brake(plan, CURRENT, desired, OWNER, facts({})) is None
    # With the 8 let through earlier in the window: 11 of the 20 at its start (55%)
    verdict = check_brake(plan, CURRENT, desired, OWNER, facts(WINDOW))
    assert verdict is not None and verdict.reason.startswith(
        "deployment: with this plan, 11 of the 20"
    )


def test_a_plan_counted_again_under_the_lock_counts_its_rules_once() -> None:
    # The window holds this plan's 3 revokes (counted when it was planned) and 4 earlier
    # ones from sg-b: 7 of the 16 at the window's start (44%), where counting the plan's
    # revokes twice would make 10 of 16 (62%) and hold it
    plan, desired = revoking(11, 12, 13), desired_without(11, 12, 13)
    recorded = {
        DEPLOYMENT: WindowCount(100, 16, frozenset({"sgr-11", "sgr-12", "sgr-13"}) | GONE_B)
    }
    assert check_brake(plan, CURRENT, desired, OWNER, facts(recorded)) is None


def test_rules_added_during_the_window_raise_its_base() -> None:
    # The window started with 2 rules; 12 are owned now and 8 went: the base is 20
    plan, desired = revoking(11, 12, 13), desired_without(11, 12, 13)
    grown = {DEPLOYMENT: WindowCount(100, 2, GONE_A | GONE_B)}
    verdict = check_brake(plan, CURRENT, desired, OWNER, facts(grown))
    assert verdict is not None and "11 of the 20 rules" in verdict.reason


def test_a_binding_is_held_on_its_own_share_when_the_deployments_is_small() -> None:
    # 2 more from sg-a: 6 of the binding's 10 (60%), 10 of the deployment's 20 (50%, not over)
    plan, desired = revoking(1, 2), desired_without(1, 2)
    verdict = check_brake(plan, CURRENT, desired, OWNER, facts(WINDOW))
    assert verdict is not None
    assert verdict.reason.startswith("binding edge: with this plan, 6 of the 10")
    assert "deployment:" not in verdict.reason
