"""A stack of the previous release upgrades to this one and then applies a change (docs/deploying.md, "Upgrading").

The previous release's template and state machine are kept in
`tests/workflow/fixtures/previous_release/` (`git show 3d69dec^:template.yaml`, the last commit
before functions' log groups were created by the stack). The local runtime creates that
stack on moto's CloudFormation, reconciles a world with it (its functions run, so Lambda
has made `/aws/lambda/<function>` for each), then updates the stack to `template.yaml`
with UpdateStack, as `sam build && sam deploy` over it does, and runs a change.

What moto's CloudFormation lacks, modelled here: Lambda creates a function's log group at
its first invocation ("Lambda automatically creates a log group ... /aws/lambda/<function
name>", AWS Lambda Developer Guide, "Sending Lambda function logs to CloudWatch Logs"),
which moto's Lambda does not; and moto has no update for a DynamoDB table (a changed table
would not be updated or replaced there), so which properties of a stateful resource change
is read from the two templates against CloudFormation's documented update behaviour.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import boto3
import pytest
from sg_reconciler_tools.demo.play import TEMPLATE, quiet_handlers, reconcile
from sg_reconciler_tools.demo.world import DemoWorld, build_world
from sg_reconciler_tools.local import LocalRuntime
from sg_reconciler_tools.local.stack import TemplateError, read_template

ROOT = Path(__file__).resolve().parents[2]
PREVIOUS = Path(__file__).resolve().parent / "fixtures" / "previous_release" / "template.yaml"
REGION = "eu-west-1"
# The resources whose data outlives an update: the locks and brake records, the plan store,
# the policy and the owner claim (docs/deploying.md, Upgrading).
STATEFUL = ("LockTable", "PlanTable", "PolicyParameter", "OwnerClaim")
# Properties whose change makes CloudFormation replace the resource ("Update requires:
# Replacement" in the template reference of AWS::DynamoDB::Table and AWS::SSM::Parameter).
REPLACING = {
    "AWS::DynamoDB::Table": ("TableName", "KeySchema", "LocalSecondaryIndexes"),
    "AWS::SSM::Parameter": ("Name",),
}
BRAKE_RECORD = {"group_id": {"S": "brake-release#upgrade-test"}, "reason": {"S": "kept"}}


def logs() -> Any:
    return boto3.client("logs", region_name=REGION)


def create_lambdas_own_log_groups(runtime: LocalRuntime) -> list[str]:
    """What Lambda does at a function's first invocation and moto's Lambda does not: create
    `/aws/lambda/<function name>` (the functions of the previous release had no LoggingConfig)."""
    invoked = {i.logical_id for i in runtime.invocations}
    names = [f"/aws/lambda/{f.name}" for f in runtime.functions if f.logical_id in invoked]
    for name in names:
        logs().create_log_group(logGroupName=name)
    return names


def stateful_state(runtime: LocalRuntime) -> dict[str, Any]:
    """Each stateful resource's physical id, and the data the upgrade must keep."""
    clients = runtime.clients
    table = runtime.ref("LockTable")
    record = clients.dynamodb.get_item(TableName=table, Key={"group_id": BRAKE_RECORD["group_id"]})
    return {
        "ids": {logical_id: runtime.ref(logical_id) for logical_id in STATEFUL},
        "brake record": record.get("Item"),
        "policy": clients.ssm.get_parameter(Name=runtime.ref("PolicyParameter"))["Parameter"][
            "Value"
        ],
        "owner claim": clients.ssm.get_parameter(Name=runtime.ref("OwnerClaim"))["Parameter"][
            "Value"
        ],
    }


def definition(runtime: LocalRuntime) -> str:
    sfn = runtime.clients.stepfunctions
    described = sfn.describe_state_machine(stateMachineArn=runtime.ref("ApplyPlanStateMachine"))
    return str(described["definition"])


def node_ranges(world: DemoWorld) -> set[tuple[str, int, int]]:
    return {(r.group_id, r.key.from_port, r.key.to_port) for r in world.node_rules()}


def previous_release_in_use() -> tuple[LocalRuntime, DemoWorld]:
    """The previous release's stack, with a reconciled world and Lambda's own log groups."""
    runtime = LocalRuntime(PREVIOUS, handlers_root=ROOT)
    runtime.start()
    try:
        world = build_world(runtime)
        first = reconcile(world)
        assert first is not None and first["status"] == "SUCCEEDED", first
        made = create_lambdas_own_log_groups(runtime)
        assert len(made) >= 6, made  # the planner and the steps of a change ran
        table = runtime.ref("LockTable")
        runtime.clients.dynamodb.put_item(TableName=table, Item=BRAKE_RECORD)
    except BaseException:
        runtime.stop()
        raise
    return runtime, world


def test_a_stack_of_the_previous_release_upgrades_keeps_its_state_and_applies_a_change() -> None:
    quiet_handlers()
    runtime, world = previous_release_in_use()
    try:
        before = stateful_state(runtime)
        previous_template = runtime.deployed_template
        old_groups = {g["logGroupName"] for g in logs().describe_log_groups()["logGroups"]}
        assert all("READS_PER_SECOND" not in f.environment for f in runtime.functions)

        # When the stack is updated to this release
        runtime.update(TEMPLATE)

        # Then nothing stateful was replaced, and its data is all there
        assert stateful_state(runtime) == before
        for logical_id in STATEFUL:
            old = previous_template["Resources"][logical_id]
            new = runtime.deployed_template["Resources"][logical_id]
            assert new["Type"] == old["Type"]
            for prop in REPLACING[new["Type"]]:
                assert new["Properties"].get(prop) == old["Properties"].get(prop), (
                    f"{logical_id}.{prop} changes: CloudFormation would replace it"
                )
        # (an update of the policy parameter's resource would write PolicyDocument over the
        # policy the user edited since: CloudFormation sets every property it updates)
        policy = "PolicyParameter"
        assert (
            runtime.deployed_template["Resources"][policy] == previous_template["Resources"][policy]
        )
        # And the functions log to the stack's groups; Lambda's own groups stay untouched
        groups = {g["logGroupName"] for g in logs().describe_log_groups()["logGroups"]}
        assert old_groups <= groups
        assert {f"/aws/lambda/{runtime.stack_name}/{f.logical_id}" for f in runtime.functions} <= (
            groups - old_groups
        )
        # And the state machine and the functions are this release's (the two releases' ASL
        # differ only in the partition, substituted to the same definition here)
        current = (ROOT / "statemachine" / "apply_plan.asl.json").read_text()
        current = current.replace("${Partition}", "aws")
        for function in runtime.functions:
            current = current.replace(f"${{{function.logical_id}Arn}}", function.arn)
        assert json.loads(definition(runtime)) == json.loads(current)
        assert all("READS_PER_SECOND" in f.environment for f in runtime.functions)
        # And a change runs on the updated stack: the #3639 growth, authorized then revoked
        world.add_service(32500)
        applied = reconcile(world)
        assert applied is not None and applied["status"] == "SUCCEEDED", applied
        assert json.loads(applied["output"])["status"] == "applied"
        assert node_ranges(world) == {(g, 31000, 32500) for g in world.node_groups.values()}
    finally:
        runtime.stop()


def test_the_template_that_made_lambdas_log_groups_itself_fails_that_upgrade(
    tmp_path: Path,
) -> None:
    """What the test above guards against: a template naming its log groups
    /aws/lambda/<function> (as this release's first take did) cannot update that stack."""
    document = read_template(TEMPLATE)
    for logical_id, resource in document["Resources"].items():
        if resource["Type"] == "AWS::Logs::LogGroup" and logical_id.endswith("FunctionLogs"):
            function = logical_id.removesuffix("Logs")
            resource["Properties"]["LogGroupName"] = {"Fn::Sub": f"/aws/lambda/${{{function}}}"}
    broken = tmp_path / "template.yaml"
    broken.write_text(json.dumps(document))  # JSON is YAML
    shutil.copytree(ROOT / "statemachine", tmp_path / "statemachine")
    quiet_handlers()
    runtime, _ = previous_release_in_use()
    try:
        with pytest.raises(TemplateError, match="ResourceAlreadyExistsException"):
            runtime.update(broken)
    finally:
        runtime.stop()
