"""The central view on the real ASL, in 3 accounts x 2 regions: each member runs its own
stack on its own world and applies a change; in one of them AuthorizeSecurityGroupIngress is
denied and the change rolls back. Each member's reporter sends its outcomes to the
organization's bus, the central recorder keeps them, and `status` lists them: only the
member that rolled back needs attention.

What moto cannot show, and how it is stood in for: moto has one world per process and no
cross-account EventBridge delivery, so the members run one after another (each runtime is
its own account and region: `LocalRuntime(account_id=..., region=...)`), each with a bus of
the central bus's name in its own account, where a rule with the central stack's pattern
collects what the reporter put; the central account's recorder then receives all of it."""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from moto import mock_aws
from sg_reconciler_tools.cli import main
from sg_reconciler_tools.demo.play import (
    DENIED,
    TEMPLATE,
    deliver_events,
    quiet_handlers,
    reconcile,
    run_planner,
)
from sg_reconciler_tools.demo.world import DemoWorld, build_world
from sg_reconciler_tools.local import FaultInjector, LocalRuntime, moto_state
from sg_reconciler_tools.local.functions import LambdaContext
from sg_reconciler_tools.local.runtime import cold_start
from sg_reconciler_tools.local.stack import read_template

ROOT = Path(__file__).resolve().parents[2]
CENTRAL_ACCOUNT, CENTRAL_REGION = "999999999999", "eu-west-1"
BUS = "sg-reconciler-fleet"
BUS_ARN = f"arn:aws:events:{CENTRAL_REGION}:{CENTRAL_ACCOUNT}:event-bus/{BUS}"
FLEET_TABLE = "fleet"
MEMBERS = [
    (a, r)
    for a in ("111111111111", "222222222222", "333333333333")
    for r in ("eu-west-1", "us-east-1")
]
DENIED_MEMBER = ("222222222222", "us-east-1")


def central_pattern() -> dict[str, Any]:
    """The central stack's rule, as fleet.yaml declares it."""
    fleet = read_template(ROOT / "fleet.yaml")
    function = fleet["Resources"]["FleetRecorderFunction"]["Properties"]
    return dict(function["Events"]["Outcomes"]["Properties"]["Pattern"])


def load_recorder() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "fleet_recorder_app", ROOT / "functions/fleet_recorder/app.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bus_to_queue(runtime: LocalRuntime) -> str:
    """A bus named as the central one, in the member's account, whose rule (the central
    stack's pattern) delivers to a queue the test reads."""
    clients = runtime.clients
    clients.events.create_event_bus(Name=BUS)
    queue = clients.sqs.create_queue(QueueName="fleet-recorder")["QueueUrl"]
    attributes = clients.sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])
    clients.events.put_rule(
        Name="recorder", EventBusName=BUS, EventPattern=json.dumps(central_pattern())
    )
    clients.events.put_targets(
        Rule="recorder",
        EventBusName=BUS,
        Targets=[{"Id": "q", "Arn": attributes["Attributes"]["QueueArn"]}],
    )
    return str(queue)


def received(
    runtime: LocalRuntime, queue: str, expected: int, timeout: float = 30.0
) -> list[dict[str, Any]]:
    """What the bus delivered, waiting for `expected` events: an execution's status change
    reaches its rules' functions in its worker thread, after the status is set."""
    sqs = runtime.clients.sqs
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while len(events) < expected and time.monotonic() < deadline:
        for message in sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get(
            "Messages", []
        ):
            events.append(json.loads(message["Body"]))
            sqs.delete_message(QueueUrl=queue, ReceiptHandle=message["ReceiptHandle"])
        time.sleep(0.05)
    return events


def run_member(
    account: str, region: str, capsys: pytest.CaptureFixture[str]
) -> list[dict[str, Any]]:
    """One deployment: its stack, its world, a drift-repair run, then a new Service (denied
    in DENIED_MEMBER); returns what it put on the bus."""
    with LocalRuntime(
        TEMPLATE, parameters={"FleetEventBusArn": BUS_ARN}, account_id=account, region=region
    ) as runtime:
        queue = bus_to_queue(runtime)
        world: DemoWorld = build_world(runtime)
        repaired = reconcile(world)
        assert repaired and repaired["status"] == "SUCCEEDED"
        assert repaired["executionArn"].split(":")[3:5] == [region, account]
        denied = (account, region) == DENIED_MEMBER
        with FaultInjector(*([DENIED] if denied else [])):
            execution = run_planner(world, deliver_events(world, world.add_service(32500)))
            assert execution
            ended = runtime.wait_for(execution, 60)
        assert (ended["status"], ended.get("error")) == (
            ("FAILED", "RolledBack") if denied else ("SUCCEEDED", None)
        )
        events = received(runtime, queue, 2)
        assert main(["status", "--stack", runtime.stack_name, "--region", region]) == (
            3 if denied else 0
        )
        shown = capsys.readouterr().out
        assert f"{account} {region}" in shown and "applied, drift repaired" in shown
        return events


def record(events: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_TABLE_NAME", FLEET_TABLE)
    recorder = load_recorder()
    context = LambdaContext(
        "fleet-recorder", f"arn:aws:lambda:{CENTRAL_REGION}:{CENTRAL_ACCOUNT}:function:r", 256, 30
    )
    for event in events:
        recorder.handler(event, context)


def test_every_members_outcomes_reach_the_fleet_and_only_the_rolled_back_one_needs_attention(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    quiet_handlers()
    sent: list[dict[str, Any]] = []
    for account, region in MEMBERS:
        events = run_member(account, region, capsys)
        details = [e["detail"] for e in events]
        assert [(d["account"], d["region"]) for d in details] == [(account, region)] * 2
        assert [d["scheduled"] for d in details] == [True, False]
        if (account, region) == DENIED_MEMBER:
            assert details[1]["error"] == "RolledBack" and details[1]["cause"]
        sent += events

    cold_start()  # the central account's recorder: new clients, in its region
    monkeypatch.setenv("MOTO_ACCOUNT_ID", CENTRAL_ACCOUNT)
    monkeypatch.setenv("AWS_DEFAULT_REGION", CENTRAL_REGION)
    with mock_aws():
        import boto3

        boto3.client("dynamodb", region_name=CENTRAL_REGION).create_table(
            TableName=FLEET_TABLE,
            AttributeDefinitions=[{"AttributeName": "deployment", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "deployment", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
        record(sent, monkeypatch)
        assert (
            main(
                [
                    "status",
                    "--fleet-table",
                    FLEET_TABLE,
                    "--region",
                    CENTRAL_REGION,
                    "--output",
                    "json",
                ]
            )
            == 3
        )
        fleet = json.loads(capsys.readouterr().out)
        assert [(d["account"], d["region"]) for d in fleet] == sorted(MEMBERS)
        needing = [(d["account"], d["region"]) for d in fleet if d["attention"]]
        assert needing == [DENIED_MEMBER]  # no other account noticed the rollback
        assert all(d["last_drift"] for d in fleet)
        assert main(["status", "--fleet-table", FLEET_TABLE, "--region", CENTRAL_REGION]) == 3
        table = capsys.readouterr().out
        assert "6 deployment(s), 1 needing attention" in table
        assert "rolled back to the old rules" in table


def test_the_central_stack_takes_outcomes_and_forwarded_alarms_and_nothing_else() -> None:
    from sg_reconciler_tools.local.stack import translate

    pattern = central_pattern()
    outcome = {
        "source": "sg-reconciler",
        "detail-type": "SG Reconciler Execution Outcome",
        "detail": {},
    }
    alarm = {
        "source": "aws.cloudwatch",
        "detail-type": "CloudWatch Alarm State Change",
        "detail": {},
    }
    api_call = {"source": "aws.ec2", "detail-type": "AWS API Call via CloudTrail", "detail": {}}
    assert moto_state.matches_event_pattern(pattern, outcome)
    assert moto_state.matches_event_pattern(pattern, alarm)
    assert not moto_state.matches_event_pattern(pattern, api_call)
    # the sources it admits, with any other detail-type, stay out
    for source, other in [
        ("aws.cloudwatch", "CloudWatch Alarm Configuration Change"),
        ("sg-reconciler", "Some Other Event"),
    ]:
        event = {"source": source, "detail-type": other, "detail": {}}
        assert not moto_state.matches_event_pattern(pattern, event), event
    fleet = read_template(ROOT / "fleet.yaml")
    for body in fleet["Resources"].values():
        if body["Type"] == "AWS::Serverless::Function":
            body["Properties"]["CodeUri"] = "s3://b/code.zip"
        if body["Type"] == "AWS::Serverless::LayerVersion":
            body["Properties"]["ContentUri"] = "s3://b/layer.zip"
    translated = translate(
        fleet, {"OrganizationId": "o-abcdefghij"}, region=CENTRAL_REGION, account_id=CENTRAL_ACCOUNT
    )
    policy = translated["Resources"]["FleetEventBusPolicy"]["Properties"]["Statement"]
    assert policy["Condition"] == {
        "StringEquals": {"aws:PrincipalOrgID": {"Ref": "OrganizationId"}}
    }
    kinds = {body["Type"] for body in translated["Resources"].values()}
    assert "AWS::IAM::Role" in kinds and not {k for k in kinds if k.startswith("AWS::Serverless")}


def test_status_of_a_stack_that_is_not_there_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from moto import mock_aws

    with mock_aws():
        assert main(["status", "--stack", "nope", "--region", CENTRAL_REGION]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope" in err
