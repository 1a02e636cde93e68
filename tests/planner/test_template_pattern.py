"""The template's EventBridge rule and the planner's own-role list agree with the code.

`template.yaml` spells out the rule pattern (CloudFormation cannot call Python), so these
tests pin it to `event_pattern()` and to the planner's `OWN_ROLE_ARNS`, with !GetAtt
resolved by the local runtime's template loader. If a function that makes the calls the
rule listens for is added without its role in both places, its own writes would trigger
new plans (invariant 8): the last test catches that.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sg_reconciler.trigger.cloudtrail import EVENT_NAMES
from sg_reconciler_tools.event_pattern import event_pattern
from sg_reconciler_tools.local import Template

TEMPLATE_PATH = Path(__file__).resolve().parents[2] / "template.yaml"
WRITER_FUNCTIONS = ("ApplyStepsFunction", "RollBackFunction")
# The IAM service prefixes of the API calls the rule listens for.
EVENT_ACTION_PREFIXES = ("ec2", "elasticloadbalancing")


@pytest.fixture(scope="module")
def template() -> Template:
    return Template.load(TEMPLATE_PATH)


def role_arn(template: Template, function_id: str) -> str:
    """The execution role of a function: its `Role` property, else SAM's implicit `<Id>Role`."""
    role = template.properties(function_id).get("Role")
    if role is not None:
        return str(template.resolve(role))
    return template.get_att(f"{function_id}Role", "Arn")


def planner_own_roles(template: Template) -> list[str]:
    variables = template.resolve(template.properties("PlannerFunction")["Environment"])
    return str(variables["Variables"]["OWN_ROLE_ARNS"]).split(",")


def allowed_actions(template: Template, function_id: str) -> set[str]:
    """Every action granted by the function's inline policy statements."""
    actions: set[str] = set()
    for policy in template.properties(function_id).get("Policies") or []:
        if not isinstance(policy, dict):
            continue
        for statement in policy.get("Statement") or []:
            if statement.get("Effect", "Allow") != "Allow":
                continue
            granted = statement.get("Action", [])
            actions.update([granted] if isinstance(granted, str) else granted)
    return actions


def test_the_rule_pattern_is_event_pattern_of_the_writer_roles(template: Template) -> None:
    own = [role_arn(template, function_id) for function_id in WRITER_FUNCTIONS]
    resolved: dict[str, Any] = template.resolve(template.properties("CloudTrailEventRule"))

    assert resolved["EventPattern"] == event_pattern(own)
    # Resolution really happened: the ARNs are this stack's roles, not unresolved !GetAtt.
    assert all(arn.startswith("arn:aws:iam::") and arn.endswith("Role") for arn in own)
    assert len(set(own)) == len(WRITER_FUNCTIONS)


def test_the_planner_ignores_the_same_roles_the_rule_filters(template: Template) -> None:
    own = [role_arn(template, function_id) for function_id in WRITER_FUNCTIONS]
    assert planner_own_roles(template) == own


def test_every_function_that_makes_trigger_calls_is_an_own_role(template: Template) -> None:
    """A function allowed to make a call the rule listens for must be filtered, or it loops."""
    trigger_actions = {f"{p}:{name}" for p in EVENT_ACTION_PREFIXES for name in EVENT_NAMES}
    writers = {
        function_id
        for function_id in template.of_type("AWS::Serverless::Function")
        if allowed_actions(template, function_id) & trigger_actions
    }
    assert writers == set(WRITER_FUNCTIONS)
    assert {role_arn(template, f) for f in writers} == set(planner_own_roles(template))
    assert "ec2:AuthorizeSecurityGroupIngress" in allowed_actions(template, "ApplyStepsFunction")
