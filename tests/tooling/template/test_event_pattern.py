"""The deployed EventBridge rule and the planner's own-role list agree with the code.

`template.yaml` spells out the rule pattern (CloudFormation cannot call Python), so these
tests pin it to `event_pattern()` and to the planner's `OWN_ROLE_ARNS`, read from the
stack the local runtime creates (SAM translated the template, moto's CloudFormation
resolved every !GetAtt). If a function that makes the calls the rule listens for is added
without its role in both places, its own writes would trigger new plans (invariant 8):
`test_every_function_that_makes_trigger_calls_is_an_own_role` catches that, reading the
functions' roles and their policies from IAM.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sg_reconciler.trigger.cloudtrail import EVENT_NAMES
from sg_reconciler_tools.event_pattern import event_pattern
from sg_reconciler_tools.local import LocalRuntime

TEMPLATE_PATH = Path(__file__).resolve().parents[3] / "template.yaml"
WRITER_FUNCTIONS = ("ApplyStepsFunction", "RollBackFunction")
# The IAM service prefixes of the API calls the rule listens for.
EVENT_ACTION_PREFIXES = ("ec2", "elasticloadbalancing")


@pytest.fixture(scope="module")
def runtime() -> Iterator[LocalRuntime]:
    with LocalRuntime(TEMPLATE_PATH) as local:
        yield local


def role_arn(runtime: LocalRuntime, function_id: str) -> str:
    """The execution role the function was deployed with (its `Role`, else SAM's `<Id>Role`)."""
    configuration = runtime.clients.lambda_.get_function_configuration(
        FunctionName=runtime.ref(function_id)
    )
    return str(configuration["Role"])


def planner_own_roles(runtime: LocalRuntime) -> list[str]:
    (planner,) = [spec for spec in runtime.functions if spec.logical_id == "PlannerFunction"]
    return planner.environment["OWN_ROLE_ARNS"].split(",")


def allowed_actions(runtime: LocalRuntime, function_id: str) -> set[str]:
    """Every action the inline policies of the function's deployed role allow."""
    iam = _iam(runtime)
    role = role_arn(runtime, function_id).rsplit("/", 1)[1]
    actions: set[str] = set()
    for name in iam.list_role_policies(RoleName=role)["PolicyNames"]:
        document: Any = iam.get_role_policy(RoleName=role, PolicyName=name)["PolicyDocument"]
        if isinstance(document, str):  # moto answers with the text, AWS's SDK decodes it
            document = json.loads(document)
        for statement in document.get("Statement") or []:
            if statement.get("Effect", "Allow") != "Allow":
                continue
            assert "NotAction" not in statement, f"{function_id}: a NotAction grant hides calls"
            granted = statement.get("Action", [])
            actions.update([granted] if isinstance(granted, str) else granted)
    return actions


def grants_any(actions: set[str], wanted: set[str]) -> bool:
    """Whether a grant covers one of `wanted`, as IAM matches actions: wildcards (`*`, `?`)
    and any case."""
    return any(fnmatch.fnmatchcase(w.lower(), a.lower()) for a in actions for w in wanted)


def _iam(runtime: LocalRuntime) -> Any:
    import boto3

    return boto3.client("iam", region_name=runtime.ref("AWS::Region"))


def test_the_rule_pattern_is_event_pattern_of_the_writer_roles(runtime: LocalRuntime) -> None:
    own = [role_arn(runtime, function_id) for function_id in WRITER_FUNCTIONS]
    rule = runtime.clients.events.describe_rule(Name=runtime.physical_name("CloudTrailEventRule"))

    assert json.loads(rule["EventPattern"]) == event_pattern(own)
    # Resolution really happened: the ARNs are this stack's roles, not unresolved !GetAtt.
    assert all(arn.startswith("arn:aws:iam::") and "FunctionRole-" in arn for arn in own)
    assert len(set(own)) == len(WRITER_FUNCTIONS)


def test_the_planner_ignores_the_same_roles_the_rule_filters(runtime: LocalRuntime) -> None:
    own = [role_arn(runtime, function_id) for function_id in WRITER_FUNCTIONS]
    assert planner_own_roles(runtime) == own


def test_every_function_that_makes_trigger_calls_is_an_own_role(runtime: LocalRuntime) -> None:
    """A function allowed to make a call the rule listens for must be filtered, or it loops."""
    trigger_actions = {f"{p}:{name}" for p in EVENT_ACTION_PREFIXES for name in EVENT_NAMES}
    writers = {
        spec.logical_id
        for spec in runtime.functions
        if grants_any(allowed_actions(runtime, spec.logical_id), trigger_actions)
    }
    assert writers == set(WRITER_FUNCTIONS)
    assert {role_arn(runtime, f) for f in writers} == set(planner_own_roles(runtime))
    assert "ec2:AuthorizeSecurityGroupIngress" in allowed_actions(runtime, "ApplyStepsFunction")


def test_a_wildcard_grant_counts_as_the_calls_it_covers() -> None:
    wanted = {"ec2:AuthorizeSecurityGroupIngress"}
    assert grants_any({"ec2:*SecurityGroupIngress"}, wanted)
    assert grants_any({"EC2:authorize*"}, wanted)
    assert not grants_any({"ec2:Describe*", "ec2:RevokeSecurityGroupIngress"}, wanted)
