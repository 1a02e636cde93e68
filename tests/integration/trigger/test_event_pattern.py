"""The EventBridge rule pattern delivers other callers' successful calls and drops our own.

Checked with moto's EventBridge pattern matcher, and end to end through a rule with an SQS
target under `mock_aws`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import boto3
import pytest
from event_samples import ACCOUNT_ID, REGION, load_event
from moto import mock_aws
from moto.events.models import EventPattern
from sg_reconciler.trigger.cloudtrail import EVENT_NAMES
from sg_reconciler_tools.event_pattern import event_pattern

OWN_ROLE_ARNS = [
    "arn:aws:iam::123456789012:role/sg-reconciler-ApplyStepsRole-0A1B2C3D4E5F",
    "arn:aws:iam::123456789012:role/sg-reconciler-PlannerRole-1A2B3C4D5E6F",
]


def sample(name: str) -> dict[str, Any]:
    event: dict[str, Any] = load_event(f"eventbridge/{name}")
    return event


def as_own_role(event: dict[str, Any]) -> dict[str, Any]:
    event["detail"]["userIdentity"]["sessionContext"]["sessionIssuer"]["arn"] = OWN_ROLE_ARNS[1]
    return event


def as_iam_user(event: dict[str, Any]) -> dict[str, Any]:
    """An IAM user's console session: `sessionIssuer` is logged as an empty object."""
    event["detail"]["userIdentity"] = {
        "type": "IAMUser",
        "principalId": "AIDAEXAMPLEUSER00001",
        "arn": "arn:aws:iam::123456789012:user/bob",
        "accountId": ACCOUNT_ID,
        "userName": "bob",
        "sessionContext": {"sessionIssuer": {}, "attributes": {"mfaAuthenticated": "true"}},
    }
    return event


def as_access_key_user(event: dict[str, Any]) -> dict[str, Any]:
    """An IAM user's long-term key: no `sessionContext` at all."""
    event["detail"]["userIdentity"] = {
        "type": "IAMUser",
        "principalId": "AIDAEXAMPLEUSER00002",
        "arn": "arn:aws:iam::123456789012:user/ci",
        "accountId": ACCOUNT_ID,
        "userName": "ci",
    }
    return event


def as_failed(event: dict[str, Any]) -> dict[str, Any]:
    event["detail"]["errorCode"] = "Client.UnauthorizedOperation"
    return event


def matches(pattern: dict[str, Any], event: dict[str, Any]) -> bool:
    matcher: Any = EventPattern(json.dumps(pattern), pattern)
    return bool(matcher.matches_event(event))


def test_pattern_names_the_sources_detail_type_and_every_event_name() -> None:
    pattern = event_pattern(OWN_ROLE_ARNS)

    assert pattern["source"] == ["aws.ec2", "aws.elasticloadbalancing"]
    assert pattern["detail-type"] == ["AWS API Call via CloudTrail"]
    assert sorted(pattern["detail"]["eventName"]) == sorted(EVENT_NAMES)
    assert json.loads(json.dumps(pattern)) == pattern


@pytest.mark.parametrize("name", EVENT_NAMES)
def test_every_sample_is_delivered_and_its_own_role_twin_is_not(name: str) -> None:
    pattern = event_pattern(OWN_ROLE_ARNS)

    assert matches(pattern, sample(name))
    assert not matches(pattern, as_own_role(sample(name)))
    assert not matches(pattern, as_failed(sample(name)))


@pytest.mark.parametrize("variant", [as_iam_user, as_access_key_user], ids=["console", "key"])
def test_iam_user_events_are_delivered(variant: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    assert matches(event_pattern(OWN_ROLE_ARNS), variant(sample("AuthorizeSecurityGroupIngress")))


def test_a_bare_anything_but_would_drop_iam_user_events() -> None:
    # Why the pattern needs its `$or`: `anything-but` does not match a missing field.
    naive = event_pattern(OWN_ROLE_ARNS)
    del naive["detail"]["$or"]
    naive["detail"]["userIdentity"] = {
        "sessionContext": {"sessionIssuer": {"arn": [{"anything-but": OWN_ROLE_ARNS}]}}
    }

    assert matches(naive, sample("AuthorizeSecurityGroupIngress"))
    assert not matches(naive, as_own_role(sample("AuthorizeSecurityGroupIngress")))
    assert not matches(naive, as_iam_user(sample("AuthorizeSecurityGroupIngress")))


def test_other_events_are_not_delivered() -> None:
    pattern = event_pattern(OWN_ROLE_ARNS)
    egress = sample("AuthorizeSecurityGroupIngress")
    egress["detail"]["eventName"] = "AuthorizeSecurityGroupEgress"

    assert not matches(pattern, egress)
    assert not matches(pattern, load_event("scheduled"))


def test_without_own_roles_every_successful_call_is_delivered() -> None:
    pattern = event_pattern([])

    assert "$or" not in pattern["detail"]
    assert matches(pattern, as_own_role(sample("DeleteRule")))
    assert not matches(pattern, as_failed(sample("DeleteRule")))


def test_own_roles_are_listed_once_in_the_given_order() -> None:
    roles = [OWN_ROLE_ARNS[1], OWN_ROLE_ARNS[0], OWN_ROLE_ARNS[1]]

    pattern = event_pattern(roles)

    issuer = pattern["detail"]["$or"][1]["userIdentity"]["sessionContext"]["sessionIssuer"]
    assert issuer["arn"] == [{"anything-but": [OWN_ROLE_ARNS[1], OWN_ROLE_ARNS[0]]}]


def _receive_all(sqs: Any, queue_url: str, expected: int, timeout_s: float = 5.0) -> list[Any]:
    """Polls the queue until `expected` messages arrived or the timeout passed."""
    bodies: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(bodies) < expected and time.monotonic() < deadline:
        reply = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
        bodies.extend(json.loads(m["Body"]) for m in reply.get("Messages", []))
    return bodies


@mock_aws
def test_a_rule_with_the_pattern_routes_events_to_the_queue() -> None:
    # Given the rule from the template, with the trigger queue as its target
    events = boto3.client("events", region_name=REGION)
    sqs = boto3.client("sqs", region_name=REGION)
    queue_url = sqs.create_queue(QueueName="sg-reconciler-events")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    events.put_rule(
        Name="sg-reconciler-trigger", EventPattern=json.dumps(event_pattern(OWN_ROLE_ARNS))
    )
    events.put_targets(Rule="sg-reconciler-trigger", Targets=[{"Id": "queue", "Arn": queue_arn}])

    # When CloudTrail puts an assumed-role call, an IAM-user call, our own call and a failed call
    sent = {
        "assumed role": sample("RegisterTargets"),
        "iam user": as_iam_user(sample("AuthorizeSecurityGroupIngress")),
        "own role": as_own_role(sample("RevokeSecurityGroupIngress")),
        "failed": as_failed(sample("CreateListener")),
    }
    reply = events.put_events(
        Entries=[
            {
                "Source": e["source"],
                "DetailType": e["detail-type"],
                "Detail": json.dumps(e["detail"]),
                "Resources": e["resources"],
            }
            for e in sent.values()
        ]
    )
    assert reply["FailedEntryCount"] == 0

    # Then only the assumed-role and IAM-user events reach the queue
    delivered = _receive_all(sqs, queue_url, expected=2)
    assert sorted(d["detail"]["eventID"] for d in delivered) == sorted(
        sent[k]["detail"]["eventID"] for k in ("assumed role", "iam user")
    )
    assert all(d["detail-type"] == "AWS API Call via CloudTrail" for d in delivered)
    assert _receive_all(sqs, queue_url, expected=1, timeout_s=0.2) == []
