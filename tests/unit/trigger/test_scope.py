"""Each trigger maps to the scope it affects, or is ignored with a reason and one log line."""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable
from typing import Any

import pytest
from event_samples import ACCOUNT_ID, REGION, event_names, load_event
from sg_reconciler.core.scope import Scope
from sg_reconciler.trigger.classify import (
    Ignored,
    Parsed,
    Relevant,
    load_balancer_arn_of,
    parse_record,
    parse_sqs_record,
)
from sg_reconciler.trigger.cloudtrail import EVENT_NAMES

OWN_ROLE_ARN = "arn:aws:iam::123456789012:role/sg-reconciler-ApplyStepsRole-0A1B2C3D4E5F"
OWN_ROLES = frozenset({OWN_ROLE_ARN, "arn:aws:iam::123456789012:role/sg-reconciler-PlannerRole-1"})

ELB = "arn:aws:elasticloadbalancing:eu-west-1:123456789012"
NLB = f"{ELB}:loadbalancer/net/k8s-shop-frontend-7d5f1a2b3c/0a1b2c3d4e5f6001"
ALB = f"{ELB}:loadbalancer/app/k8s-shop-ingress-4e5f6a7b8c/1a2b3c4d5e6f7001"
TG_FRONTEND = f"{ELB}:targetgroup/k8s-shop-frontend-31001/5e6f708192a3b001"
TG_FRONTEND_V2 = f"{ELB}:targetgroup/k8s-shop-frontend-31002/5e6f708192a3b002"
TG_API = f"{ELB}:targetgroup/k8s-shop-api-31080/6f708192a3b4c001"
NODE_SG, NLB_SG, NEW_SG, EXTRA_SG = (f"sg-0a1b2c3d4e5f6000{n}" for n in (1, 2, 3, 4))
I1, I2 = "i-0a1b2c3d4e5f60001", "i-0a1b2c3d4e5f60002"


def _scope(
    groups: set[str] | None = None,
    lbs: set[str] | None = None,
    tgs: set[str] | None = None,
    instances: set[str] | None = None,
    regrouped: set[str] | None = None,
) -> Scope:
    return Scope(
        frozenset(groups or ()),
        frozenset(lbs or ()),
        frozenset(tgs or ()),
        frozenset(instances or ()),
        regrouped_instances=frozenset(regrouped or ()),
    )


# Written from the samples by hand, not from the code under test.
EXPECTED: dict[str, Scope] = {
    "AuthorizeSecurityGroupIngress": _scope(groups={NODE_SG}),
    "RevokeSecurityGroupIngress": _scope(groups={NODE_SG}),
    "ModifySecurityGroupRules": _scope(groups={NODE_SG}),
    "UpdateSecurityGroupRuleDescriptionsIngress": _scope(groups={NODE_SG}),
    "CreateSecurityGroup": _scope(groups={NEW_SG}),
    "DeleteSecurityGroup": _scope(groups={NEW_SG}),
    "ModifyNetworkInterfaceAttribute": Scope.everything(),
    # An instance's groups changed: they, and the instance read fresh whatever the index holds
    "ModifyInstanceAttribute": _scope(groups={NODE_SG, EXTRA_SG}, instances={I1}, regrouped={I1}),
    # A destination group's tag: only the group (an instance's tags select nothing)
    "CreateTags": _scope(groups={EXTRA_SG}),
    "DeleteTags": _scope(groups={EXTRA_SG}),
    "CreateLoadBalancer": _scope(groups={NLB_SG}, lbs={NLB}),
    "DeleteLoadBalancer": _scope(lbs={NLB}),
    "SetSecurityGroups": _scope(groups={NLB_SG, EXTRA_SG}, lbs={NLB}),
    "SetSubnets": _scope(lbs={NLB}),
    "SetIpAddressType": _scope(lbs={NLB}),
    "CreateTargetGroup": _scope(tgs={TG_FRONTEND}),
    "ModifyTargetGroup": _scope(lbs={NLB}, tgs={TG_FRONTEND}),
    "ModifyTargetGroupAttributes": _scope(tgs={TG_FRONTEND}),
    "DeleteTargetGroup": _scope(tgs={TG_FRONTEND_V2}),
    "CreateListener": _scope(lbs={NLB}, tgs={TG_FRONTEND}),
    "ModifyListener": _scope(lbs={NLB}, tgs={TG_FRONTEND_V2}),
    "DeleteListener": _scope(lbs={NLB}),
    "CreateRule": _scope(lbs={ALB}, tgs={TG_API}),
    "ModifyRule": _scope(lbs={ALB}, tgs={TG_API}),
    "DeleteRule": _scope(lbs={ALB}),
    "RegisterTargets": _scope(tgs={TG_FRONTEND}, instances={I1, I2}),
    "DeregisterTargets": _scope(tgs={TG_FRONTEND}, instances={I2}),
    "AddTags": _scope(lbs={NLB}),
    "RemoveTags": _scope(tgs={TG_FRONTEND}),
}


def parse(body: str | dict[str, Any], own: frozenset[str] = OWN_ROLES) -> Parsed:
    return parse_record(body, account_id=ACCOUNT_ID, region=REGION, own_role_arns=own)


def parse_sqs(record: dict[str, Any]) -> Parsed:
    message_id, parsed = parse_sqs_record(
        record, 0, account_id=ACCOUNT_ID, region=REGION, own_role_arns=OWN_ROLES
    )
    assert message_id == record["messageId"]
    return parsed


def sample(name: str) -> dict[str, Any]:
    event: dict[str, Any] = load_event(f"eventbridge/{name}")
    return event


def ignored(result: Parsed) -> Ignored:
    assert isinstance(result, Ignored), result
    return result


def test_expectations_cover_every_event_name() -> None:
    assert set(EXPECTED) == set(EVENT_NAMES) == set(event_names("eventbridge"))


@pytest.mark.parametrize("name", EVENT_NAMES)
def test_each_sample_yields_its_scope_in_every_delivery_form(name: str) -> None:
    event = sample(name)
    expected = Relevant(event["id"], name, EXPECTED[name])
    record = load_event(f"sqs/{name}")["Records"][0]

    assert parse(event) == expected
    assert parse(json.dumps(event)) == expected
    assert parse(record["body"]) == expected
    assert parse_sqs(record) == expected  # as the planner reads an SQS batch


def test_scheduled_event_asks_for_everything() -> None:
    event = load_event("scheduled")

    assert parse(event) == Relevant(event["id"], "Scheduled Event", Scope.everything())


# ---------------------------------------------------------------- who made the call


def _as_own_role(event: dict[str, Any]) -> None:
    issuer = event["detail"]["userIdentity"]["sessionContext"]["sessionIssuer"]
    issuer["arn"] = OWN_ROLE_ARN


def _as_iam_user_with_empty_issuer(event: dict[str, Any]) -> None:
    event["detail"]["userIdentity"] = {
        "type": "IAMUser",
        "principalId": "AIDAEXAMPLEUSER00001",
        "arn": "arn:aws:iam::123456789012:user/bob",
        "accountId": ACCOUNT_ID,
        "accessKeyId": "ASIAEXAMPLEUSERKEY01",
        "userName": "bob",
        "sessionContext": {
            "sessionIssuer": {},
            "attributes": {"creationDate": "2026-11-29T17:00:00Z", "mfaAuthenticated": "true"},
        },
    }


def _as_iam_user_with_access_key(event: dict[str, Any]) -> None:
    event["detail"]["userIdentity"] = {
        "type": "IAMUser",
        "principalId": "AIDAEXAMPLEUSER00002",
        "arn": "arn:aws:iam::123456789012:user/ci",
        "accountId": ACCOUNT_ID,
        "accessKeyId": "AKIAEXAMPLEUSERKEY02",
        "userName": "ci",
    }


@pytest.mark.parametrize("name", EVENT_NAMES)
def test_the_reconcilers_own_calls_yield_nothing(name: str) -> None:
    event = sample(name)
    _as_own_role(event)

    result = ignored(parse(event))

    assert result.event_id == event["id"]
    assert "own role" in result.reason and OWN_ROLE_ARN in result.reason


@pytest.mark.parametrize(
    "as_user",
    [_as_iam_user_with_empty_issuer, _as_iam_user_with_access_key],
    ids=["console", "key"],
)
@pytest.mark.parametrize("name", ["AuthorizeSecurityGroupIngress", "RegisterTargets"])
def test_iam_user_calls_are_not_mistaken_for_own_calls(
    name: str, as_user: Callable[[dict[str, Any]], None]
) -> None:
    event = sample(name)
    as_user(event)

    assert parse(event) == Relevant(event["id"], name, EXPECTED[name])


def test_another_role_is_not_own_even_with_a_similar_name() -> None:
    event = sample("RevokeSecurityGroupIngress")
    issuer = event["detail"]["userIdentity"]["sessionContext"]["sessionIssuer"]
    issuer["arn"] = OWN_ROLE_ARN + "-other"

    assert isinstance(parse(event), Relevant)


# ---------------------------------------------------------------- events that are dropped


def _mutated(name: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    event = sample(name)
    change(event)
    return event


DROPPED: dict[str, tuple[dict[str, Any], str]] = {
    "failed call": (
        _mutated(
            "AuthorizeSecurityGroupIngress",
            lambda e: e["detail"].update(
                errorCode="Client.RulesPerSecurityGroupLimitExceeded",
                errorMessage="The maximum number of rules per security group has been reached.",
                responseElements=None,
            ),
        ),
        "failed with Client.RulesPerSecurityGroupLimitExceeded",
    ),
    "dry run": (
        _mutated(
            "RevokeSecurityGroupIngress",
            lambda e: e["detail"].update(errorCode="Client.DryRunOperation"),
        ),
        "failed with Client.DryRunOperation",
    ),
    "other account": (
        _mutated("RegisterTargets", lambda e: e.update(account="210987654321")),
        "account 210987654321",
    ),
    "other region": (
        _mutated("CreateListener", lambda e: e.update(region="us-east-1")),
        "region us-east-1",
    ),
    "unknown event name": (
        _mutated(
            "AuthorizeSecurityGroupIngress",
            lambda e: e["detail"].update(eventName="AuthorizeSecurityGroupEgress"),
        ),
        "unsupported event name AuthorizeSecurityGroupEgress",
    ),
    "other detail-type": (
        _mutated(
            "ModifyInstanceAttribute",
            lambda e: e.update({"detail-type": "EC2 Instance State-change Notification"}),
        ),
        "detail-type EC2 Instance State-change Notification",
    ),
    "classic load balancer": (
        _mutated("CreateLoadBalancer", lambda e: e["detail"].update(apiVersion="2012-06-01")),
        "classic load balancer",
    ),
    "tags of other resources": (
        _mutated(
            "CreateTags",
            lambda e: e["detail"].update(
                requestParameters={"resourcesSet": {"items": [{"resourceId": I1}]}}
            ),
        ),
        "changes nothing",
    ),
    "instance attribute other than groups": (
        _mutated(
            "ModifyInstanceAttribute",
            lambda e: e["detail"].update(
                requestParameters={"instanceId": I1, "instanceType": {"value": "m7g.large"}}
            ),
        ),
        "changes nothing",
    ),
    "interface attribute other than groups": (
        _mutated(
            "ModifyNetworkInterfaceAttribute",
            lambda e: e["detail"].update(
                requestParameters={
                    "networkInterfaceId": "eni-0a1b2c3d4e5f60001",
                    "sourceDestCheck": {"value": False},
                }
            ),
        ),
        "changes nothing",
    ),
    "tags on a listener only": (
        _mutated(
            "AddTags",
            lambda e: e["detail"]["requestParameters"].update(
                resourceArns=[f"{ELB}:listener/net/x/0a1b2c3d4e5f6001/2b3c4d5e6f708001"]
            ),
        ),
        "changes nothing",
    ),
    "missing required parameter": (
        _mutated("DeleteTargetGroup", lambda e: e["detail"].update(requestParameters={})),
        "malformed DeleteTargetGroup event: detail.DeleteTargetGroup.requestParameters.targetGroupArn",
    ),
    "null request parameters": (
        _mutated("RegisterTargets", lambda e: e["detail"].update(requestParameters=None)),
        "malformed RegisterTargets event",
    ),
    "missing userIdentity": (
        _mutated("AuthorizeSecurityGroupIngress", lambda e: e["detail"].pop("userIdentity")),
        "malformed CloudTrail detail: userIdentity",
    ),
}


@pytest.mark.parametrize("case", DROPPED, ids=list(DROPPED))
def test_dropped_events_are_ignored_with_a_reason(case: str) -> None:
    event, reason = DROPPED[case]

    result = ignored(parse(copy.deepcopy(event)))

    assert result.event_id == event["id"]
    assert reason in result.reason


@pytest.mark.parametrize("field", ["id", "source", "account", "region", "detail-type", "detail"])
def test_an_event_missing_an_envelope_field_is_malformed(field: str) -> None:
    # Given an event without one of the fields every EventBridge event has
    event = sample("AuthorizeSecurityGroupIngress")
    event_id = event["id"]
    del event[field]

    result = ignored(parse(event))

    # Then it is ignored as malformed, naming the field (under its id when it has one)
    assert result.reason == f"malformed event: {field}: Field required"
    assert result.event_id == (None if field == "id" else event_id)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("", "not JSON"),
        ('{"version": "0", "id": "x", "detail-type": "AWS API', "not JSON"),
        ("[1, 2]", "JSON list"),
        ("null", "JSON NoneType"),
        ("[" * 100_000 + "]" * 100_000, "not JSON"),
    ],
    ids=["empty", "truncated", "list", "null", "too deep"],
)
def test_unreadable_bodies_are_ignored_without_an_id(body: str, reason: str) -> None:
    result = ignored(parse(body))

    assert result.event_id is None
    assert reason in result.reason


def test_each_ignored_event_logs_one_line_and_relevant_events_none(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="sg_reconciler.trigger.classify")
    own = sample("CreateRule")
    _as_own_role(own)

    parse(sample("CreateRule"))
    assert caplog.records == []
    parse(own)
    parse("not json")

    assert [r.levelno for r in caplog.records] == [logging.INFO, logging.INFO]
    assert vars(caplog.records[0])["event_id"] == own["id"]
    assert "own role" in vars(caplog.records[0])["reason"]


def test_an_unexpected_error_is_ignored_and_logged_not_raised(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(detail: object) -> Scope:
        raise RuntimeError("bug in a scope rule")

    monkeypatch.setattr("sg_reconciler.trigger.classify.scope_of", broken)
    caplog.set_level(logging.INFO, logger="sg_reconciler.trigger.classify")

    result = ignored(parse(sample("DeleteRule")))

    assert "RuntimeError: bug in a scope rule" in result.reason
    assert [(r.levelno, bool(r.exc_info)) for r in caplog.records] == [(logging.ERROR, True)]


# ---------------------------------------------------------------- narrowing and widening


def test_authorize_by_group_name_without_response_cannot_be_narrowed() -> None:
    event = sample("AuthorizeSecurityGroupIngress")
    params = event["detail"]["requestParameters"]
    params["groupName"] = params.pop("groupId")
    event["detail"]["responseElements"] = None

    assert parse(event) == Relevant(
        event["id"], "AuthorizeSecurityGroupIngress", Scope.everything()
    )


def test_authorize_by_group_name_is_narrowed_by_the_rules_it_returned() -> None:
    event = sample("AuthorizeSecurityGroupIngress")
    params = event["detail"]["requestParameters"]
    params["groupName"] = params.pop("groupId")

    assert parse(event) == Relevant(
        event["id"], "AuthorizeSecurityGroupIngress", _scope(groups={NODE_SG})
    )


def test_modify_security_group_rules_with_several_updates() -> None:
    event = sample("ModifySecurityGroupRules")
    request = event["detail"]["requestParameters"]["ModifySecurityGroupRulesRequest"]
    update = request["SecurityGroupRule"]
    request["SecurityGroupRule"] = [
        update,
        {**update, "SecurityGroupRuleId": "sgr-0a1b2c3d4e5f60012"},
    ]

    assert parse(event) == Relevant(
        event["id"], "ModifySecurityGroupRules", _scope(groups={NODE_SG})
    )


def test_revoke_by_rule_ids_names_its_group() -> None:
    event = sample("RevokeSecurityGroupIngress")
    event["detail"]["requestParameters"] = {
        "groupId": NODE_SG,
        "securityGroupRuleIds": {"items": [{"securityGroupRuleId": "sgr-0a1b2c3d4e5f60011"}]},
    }

    assert parse(event) == Relevant(
        event["id"], "RevokeSecurityGroupIngress", _scope(groups={NODE_SG})
    )


def test_ip_and_lambda_targets_name_no_instance() -> None:
    event = sample("RegisterTargets")
    event["detail"]["requestParameters"]["targets"] = [
        {"id": "10.0.12.34", "port": 8080},
        {"id": "arn:aws:lambda:eu-west-1:123456789012:function:shop-api"},
        {"id": I2, "port": 31001},
    ]

    assert parse(event) == Relevant(
        event["id"], "RegisterTargets", _scope(tgs={TG_FRONTEND}, instances={I2})
    )


def test_a_listener_arn_of_unknown_shape_widens_to_everything() -> None:
    event = sample("DeleteListener")
    event["detail"]["requestParameters"]["listenerArn"] = "arn:aws:elasticloadbalancing:odd"

    assert parse(event) == Relevant(event["id"], "DeleteListener", Scope.everything())


def test_create_target_group_without_response_cannot_be_narrowed() -> None:
    event = sample("CreateTargetGroup")
    event["detail"]["responseElements"] = None

    assert parse(event) == Relevant(event["id"], "CreateTargetGroup", Scope.everything())


@pytest.mark.parametrize(
    ("arn", "expected"),
    [
        (NLB, NLB),
        (f"{ELB}:listener/net/k8s-shop-frontend-7d5f1a2b3c/0a1b2c3d4e5f6001/2b3c4d5e6f708001", NLB),
        (f"{ELB}:listener-rule/app/k8s-shop-ingress-4e5f6a7b8c/1a2b3c4d5e6f7001/3c4d/4d5e", ALB),
        (
            "arn:aws-cn:elasticloadbalancing:cn-north-1:123456789012:listener/gwy/g/0a1b/2b3c",
            "arn:aws-cn:elasticloadbalancing:cn-north-1:123456789012:loadbalancer/gwy/g/0a1b",
        ),
        (TG_FRONTEND, None),
        (f"{ELB}:listener/net/k8s-shop-frontend-7d5f1a2b3c/0a1b2c3d4e5f6001", None),
        (f"{ELB}:listener/net//0a1b2c3d4e5f6001/2b3c4d5e6f708001", None),
        ("arn:aws:ec2:eu-west-1:123456789012:security-group/sg-0a1b2c3d4e5f60001", None),
        ("", None),
    ],
)
def test_load_balancer_arn_of(arn: str, expected: str | None) -> None:
    assert load_balancer_arn_of(arn) == expected


# ---------------------------------------------------------------- batches


def test_a_batch_of_50_events_merges_into_one_scope() -> None:
    # Given 50 SQS records cycling through every narrow sample (each delivered twice or more)
    narrow = [n for n in EVENT_NAMES if not EXPECTED[n].full]
    records = [load_event(f"sqs/{narrow[i % len(narrow)]}")["Records"][0] for i in range(50)]

    # When each record is parsed and the relevant scopes merged
    results = [parse_sqs(r) for r in records]
    merged = Scope.merge(r.scope for r in results if isinstance(r, Relevant))

    # Then nothing is ignored and the merged scope is the union of all expected scopes
    assert all(isinstance(r, Relevant) for r in results)
    assert merged == Scope.merge(EXPECTED[n] for n in narrow)
    assert not merged.full
    assert len(merged.group_ids) == 4 and len(merged.target_group_arns) == 3


def test_one_wide_event_makes_the_whole_batch_everything() -> None:
    bodies = [sample("RegisterTargets"), sample("ModifyNetworkInterfaceAttribute")]

    merged = Scope.merge(r.scope for r in map(parse, bodies) if isinstance(r, Relevant))

    assert merged.full


def test_the_burst_sample_merges_into_the_release_scope() -> None:
    records = load_event("sqs/burst")["Records"]

    results = [parse_sqs(r) for r in records]

    assert all(isinstance(r, Relevant) for r in results)
    relevant = [r for r in results if isinstance(r, Relevant)]
    assert len({r.event_id for r in relevant}) == len(relevant) - 1  # one duplicate delivery
    assert Scope.merge(r.scope for r in relevant) == _scope(
        groups={NODE_SG}, lbs={NLB}, tgs={TG_FRONTEND}, instances={I1, I2}
    )


def test_a_rules_owner_tag_changed_by_hand_replans_everything() -> None:
    # A rule id names no group, and the owner tag decides what is ours: re-plan it all
    event = _mutated(
        "DeleteTags",
        lambda e: e["detail"].update(
            requestParameters={"resourcesSet": {"items": [{"resourceId": "sgr-0a1b2c3d4e5f60011"}]}}
        ),
    )
    assert parse(event) == Relevant(event["id"], "DeleteTags", Scope.everything())
