"""The sample events are complete, consistent with each other, and parse into the right models."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import pytest
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel, SqsModel
from event_samples import (
    ACCOUNT_ID,
    ADMIN_ROLE_ARN,
    LOAD_BALANCER_CONTROLLER_ROLE_ARN,
    REGION,
    event_names,
    event_text,
    load_event,
)
from sg_reconciler.trigger import cloudtrail
from sg_reconciler.trigger.cloudtrail import (
    CLOUDTRAIL_DETAIL_TYPE,
    EC2_EVENT_NAMES,
    EVENT_NAMES,
    CloudTrailEvent,
)

ARN = re.compile(r"arn:aws:([a-z0-9-]+):([a-z0-9-]*):(\d*):[A-Za-z0-9/_.@:-]+")


def test_every_event_name_has_one_eventbridge_and_one_sqs_sample() -> None:
    assert event_names("eventbridge") == sorted(EVENT_NAMES)
    assert event_names("sqs") == sorted([*EVENT_NAMES, "burst"])


@pytest.mark.parametrize("name", EVENT_NAMES)
def test_eventbridge_sample_parses_into_the_model_of_its_event_name(name: str) -> None:
    sample = load_event(f"eventbridge/{name}")
    event = CloudTrailEvent.model_validate(sample)

    EventBridgeModel.model_validate(sample)  # every field EventBridge sends, not only ours
    assert type(event.detail) is getattr(cloudtrail, f"{name}Detail")
    assert event.detail.eventName == name
    assert event.detail_type == CLOUDTRAIL_DETAIL_TYPE
    assert event.source == ("aws.ec2" if name in EC2_EVENT_NAMES else "aws.elasticloadbalancing")
    assert (event.account, event.region) == (ACCOUNT_ID, REGION)
    assert (event.detail.awsRegion, event.detail.recipientAccountId) == (REGION, ACCOUNT_ID)
    assert event.detail.errorCode is None
    identity = event.detail.userIdentity
    assert identity.type == "AssumedRole"
    assert identity.issuer_arn in {LOAD_BALANCER_CONTROLLER_ROLE_ARN, ADMIN_ROLE_ARN}


@pytest.mark.parametrize("name", EVENT_NAMES)
def test_sqs_sample_carries_the_eventbridge_sample_as_its_body(name: str) -> None:
    message = SqsModel.model_validate(load_event(f"sqs/{name}"))

    assert len(message.Records) == 1
    record = message.Records[0]
    assert isinstance(record.body, str)
    assert json.loads(record.body) == load_event(f"eventbridge/{name}")
    assert record.md5OfBody == hashlib.md5(record.body.encode()).hexdigest()
    assert record.eventSource == "aws:sqs"
    assert record.awsRegion == REGION
    assert record.eventSourceARN.startswith(f"arn:aws:sqs:{REGION}:{ACCOUNT_ID}:")


def test_burst_is_one_sqs_event_with_several_known_eventbridge_records() -> None:
    message = SqsModel.model_validate(load_event("sqs/burst"))

    assert len(message.Records) > 3
    assert len({r.messageId for r in message.Records}) == len(message.Records)
    for record in message.Records:
        assert isinstance(record.body, str)
        event = CloudTrailEvent.model_validate_json(record.body)
        assert json.loads(record.body) == load_event(f"eventbridge/{event.detail.eventName}")
        assert record.md5OfBody == hashlib.md5(record.body.encode()).hexdigest()


def test_scheduled_sample_is_a_scheduled_event_from_aws_events() -> None:
    event = EventBridgeModel.model_validate(load_event("scheduled"))

    assert (event.source, event.detail_type) == ("aws.events", "Scheduled Event")
    assert (event.account, event.region, event.detail) == (ACCOUNT_ID, REGION, {})
    assert event.resources[0].startswith(f"arn:aws:events:{REGION}:{ACCOUNT_ID}:rule/")


def _all_samples() -> list[str]:
    names = [f"eventbridge/{n}" for n in EVENT_NAMES] + [f"sqs/{n}" for n in EVENT_NAMES]
    return [*names, "sqs/burst", "scheduled"]


@pytest.mark.parametrize("name", _all_samples())
def test_samples_live_in_one_fake_world(name: str) -> None:
    text = event_text(name).replace('\\"', '"')  # SQS bodies are JSON strings

    for service, region, account in ARN.findall(text):
        assert account in {"", ACCOUNT_ID}, f"{service} ARN in account {account}"
        assert region in {"", REGION}, f"{service} ARN in region {region}"
    for group_id in re.findall(r"sg-[0-9a-f]+", text):
        assert re.fullmatch(r"sg-0a1b2c3d4e5f6000\d", group_id), group_id
    assert set(re.findall(r'"[a-z]{2}-[a-z]+-\d"', text)) <= {f'"{REGION}"'}


def test_load_event_returns_a_fresh_copy_and_rejects_unknown_names() -> None:
    first: dict[str, Any] = load_event("scheduled")
    first["account"] = "999999999999"

    assert load_event("scheduled")["account"] == ACCOUNT_ID
    with pytest.raises(FileNotFoundError):
        load_event("eventbridge/NoSuchEvent")
