"""The central view on the real ASL: a member's executions end (one applied, one rolled back
because AuthorizeSecurityGroupIngress is denied), its reporter sends each outcome to the
organization's bus, the central recorder keeps them, and `status` lists them.

What moto cannot show, and how it is stood in for: one local runtime runs one account and
region per process, so the member runs here in one account and the central stack's recorder
is called with what the bus received (the bus is real: the reporter's PutEvents reach it and
a rule with the central stack's pattern delivers them to a queue, as EventBridge would to
the recorder); five more deployments' outcomes go through the same recorder."""

from __future__ import annotations

import importlib.util
import json
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
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
from sg_reconciler_tools.local import FaultInjector, LocalRuntime
from sg_reconciler_tools.local.functions import LambdaContext
from sg_reconciler_tools.local.stack import read_template

ROOT = Path(__file__).resolve().parents[2]
ACCOUNT, REGION = "123456789012", "eu-west-1"
BUS = "sg-reconciler-fleet"
BUS_ARN = f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/{BUS}"
FLEET_TABLE = "fleet"


def central_pattern() -> dict[str, Any]:
    """The central stack's rule, as fleet.yaml declares it."""
    fleet = read_template(ROOT / "fleet.yaml")
    return fleet["Resources"]["FleetRecorderFunction"]["Properties"]["Events"]["Outcomes"][
        "Properties"
    ]["Pattern"]


def load_recorder() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "fleet_recorder_app", ROOT / "functions/fleet_recorder/app.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def member() -> Iterator[DemoWorld]:
    quiet_handlers()
    with LocalRuntime(TEMPLATE, parameters={"FleetEventBusArn": BUS_ARN}) as runtime:
        clients = runtime.clients
        clients.events.create_event_bus(Name=BUS)
        queue = clients.sqs.create_queue(QueueName="fleet-recorder")["QueueUrl"]
        queue_arn = clients.sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        clients.events.put_rule(
            Name="recorder", EventBusName=BUS, EventPattern=json.dumps(central_pattern())
        )
        clients.events.put_targets(
            Rule="recorder", EventBusName=BUS, Targets=[{"Id": "q", "Arn": queue_arn}]
        )
        clients.dynamodb.create_table(
            TableName=FLEET_TABLE,
            AttributeDefinitions=[{"AttributeName": "deployment", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "deployment", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
        world = build_world(runtime)
        world.queue_url_for_fleet = queue  # type: ignore[attr-defined]
        yield world


def received(world: DemoWorld, expected: int, timeout: float = 30.0) -> list[dict[str, Any]]:
    """What the bus delivered, waiting for `expected` events: an execution's status change
    reaches its rules' functions in its worker thread, after the status is set."""
    sqs = world.runtime.clients.sqs
    queue = world.queue_url_for_fleet  # type: ignore[attr-defined]
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


def record(events: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    monkeypatch.setenv("FLEET_TABLE_NAME", FLEET_TABLE)
    recorder = load_recorder()
    context = LambdaContext("fleet-recorder", "arn:aws:lambda:eu-west-1:1:function:r", 256, 30)
    return [recorder.handler(event, context) for event in events]


def test_each_outcome_reaches_the_fleet_table_and_status_names_the_one_to_look_at(
    member: DemoWorld, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    applied = reconcile(member)  # the schedule finds the world unreconciled: drift
    assert applied and applied["status"] == "SUCCEEDED"
    with FaultInjector(DENIED):
        execution = run_planner(member, deliver_events(member, member.add_service(32500)))
        assert execution
        denied = member.runtime.wait_for(execution, 60)
    assert denied["status"] == "FAILED" and denied["error"] == "RolledBack"

    events = received(member, 2)
    assert [e["detail"]["status"] for e in events] == ["SUCCEEDED", "FAILED"]
    assert events[0]["detail"]["scheduled"] and not events[1]["detail"]["scheduled"]
    assert events[1]["detail"]["error"] == "RolledBack" and events[1]["detail"]["cause"]
    results = record(events, monkeypatch)
    assert results[-1]["attention"] == [
        f"last execution {denied['name']}: rolled back to the old rules"
    ]

    # Five more deployments (3 accounts x 2 regions in all) report through the same recorder.
    others = [
        (a, r) for a in ("111111111111", "222222222222", ACCOUNT) for r in (REGION, "us-east-1")
    ]
    more = [
        {
            "source": "sg-reconciler",
            "detail-type": "SG Reconciler Execution Outcome",
            "detail": {**events[0]["detail"], "account": a, "region": r},
        }
        for a, r in others
        if (a, r) != (ACCOUNT, REGION)
    ]
    record(more, monkeypatch)

    assert (
        main(["status", "--fleet-table", FLEET_TABLE, "--region", REGION, "--output", "json"]) == 3
    )
    fleet = json.loads(capsys.readouterr().out)
    assert len(fleet) == 6
    needing = [(d["account"], d["region"]) for d in fleet if d["attention"]]
    assert needing == [(ACCOUNT, REGION)]  # no other account noticed the rollback
    assert all(d["last_drift"] for d in fleet)

    assert main(["status", "--stack", member.runtime.stack_name, "--region", REGION]) == 3
    shown = capsys.readouterr().out
    assert "rolled back to the old rules" in shown and "applied, drift repaired" in shown
    assert f"last execution {denied['name']}" in shown


def test_the_central_stack_takes_outcomes_and_forwarded_alarms_and_nothing_else() -> None:
    from sg_reconciler_tools.local import moto_hooks
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
    assert moto_hooks.matches_event_pattern(pattern, outcome)
    assert moto_hooks.matches_event_pattern(pattern, alarm)
    assert not moto_hooks.matches_event_pattern(pattern, api_call)
    fleet = read_template(ROOT / "fleet.yaml")
    for body in fleet["Resources"].values():
        if body["Type"] == "AWS::Serverless::Function":
            body["Properties"]["CodeUri"] = "s3://b/code.zip"
        if body["Type"] == "AWS::Serverless::LayerVersion":
            body["Properties"]["ContentUri"] = "s3://b/layer.zip"
    translated = translate(
        fleet, {"OrganizationId": "o-abcdefghij"}, region=REGION, account_id=ACCOUNT
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
        assert main(["status", "--stack", "nope", "--region", REGION]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope" in err
