"""The PermissionsBoundary parameter reaches every role the stack creates, and none when empty.

Deployed on moto's CloudFormation (the stack's conditions and `AWS::NoValue` resolved by
its engine), then read back through IAM: what an organization's guardrail would see.
"""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from sg_reconciler_tools.demo.play import TEMPLATE
from sg_reconciler_tools.local import LocalRuntime

BOUNDARY = "arn:aws:iam::123456789012:policy/org-boundary"
FLEET_BUS = "arn:aws:events:eu-west-1:999999999999:event-bus/sg-reconciler-fleet"


def roles_of(runtime: LocalRuntime) -> dict[str, dict[str, Any]]:
    """Each role the stack created, by logical id, as IAM's GetRole returns it."""
    iam: Any = boto3.client("iam", region_name="eu-west-1")
    prefix = f"{runtime.stack_name}-"
    found: dict[str, dict[str, Any]] = {}
    for page in iam.get_paginator("list_roles").paginate():
        for role in page["Roles"]:
            if role["RoleName"].startswith(prefix):
                logical_id = role["RoleName"][len(prefix) :].rsplit("-", 1)[0]
                found[logical_id] = iam.get_role(RoleName=role["RoleName"])["Role"]
    return found


@pytest.mark.parametrize("boundary", [BOUNDARY, ""], ids=["set", "empty"])
def test_every_role_has_the_boundary_when_it_is_set_and_none_when_empty(boundary: str) -> None:
    # with a fleet bus, so that the fleet's roles (made only then) are created and checked too
    parameters = {"PermissionsBoundary": boundary, "FleetEventBusArn": FLEET_BUS}
    with LocalRuntime(TEMPLATE, parameters=parameters) as runtime:
        declared = {
            logical_id
            for logical_id, resource in runtime.deployed_template["Resources"].items()
            if resource["Type"] == "AWS::IAM::Role"
        }
        roles = roles_of(runtime)
    # every function's role, the state machine's (SAM makes them) and the fleet forwarder's
    assert len(declared) == 12 and "ApplyPlanStateMachineRole" in declared
    assert "FleetForwardingRole" in declared
    assert set(roles) == declared
    for logical_id, role in roles.items():
        if boundary:
            assert role.get("PermissionsBoundary") == {
                "PermissionsBoundaryType": "PermissionsBoundaryPolicy",
                "PermissionsBoundaryArn": BOUNDARY,
            }, logical_id
        else:
            assert "PermissionsBoundary" not in role, logical_id
