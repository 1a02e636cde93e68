"""From a trigger (an SQS record carrying an EventBridge event) to the Scope it affects.

`parse_record` is the only entry point the planner needs: it never raises. Events that
must not start work (failed calls, calls by the reconciler's own roles, other accounts or
regions, unknown or malformed events) come back as `Ignored` with a reason and one log
line, so one odd message never fails an SQS batch. Relevant events map to the narrowest
`Scope` the event allows; when the event does not say enough to narrow it (a group named
only by name, an ARN of an unknown shape), the scope is everything, since a full
re-plan is always correct and only costs time.

`event_pattern` is the EventBridge rule that feeds the queue; it drops the reconciler's
own calls and failed calls before they cost a Lambda run (invariant 8: no feedback loop).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.parser import parse
from pydantic import ValidationError

from sg_reconciler.core.index_events import TargetChange, Version
from sg_reconciler.core.scope import Scope
from sg_reconciler.errors import validation_message as _first_error
from sg_reconciler.trigger.envelopes import EventBridgeEnvelope, SqsMessage

if TYPE_CHECKING:
    from sg_reconciler.trigger.cloudtrail import (
        Action,
        AuthorizeSecurityGroupIngressDetail,
        CloudTrailDetail,
        CreateListenerDetail,
        CreateLoadBalancerDetail,
        CreateTagsDetail,
        DeleteTagsDetail,
        ModifyInstanceAttributeDetail,
        ModifyListenerDetail,
        RulesResponse,
        SetSecurityGroupsDetail,
        TargetsParameters,
    )

# The drift-repair schedule's events (an EventBridge schedule rule): no CloudTrail in them.
SCHEDULE_SOURCE = "aws.events"
SCHEDULED_DETAIL_TYPE = "Scheduled Event"

logger = logging.getLogger(__name__)

_MAX_REASON = 300


@dataclass(frozen=True)
class Relevant:
    """An event that asks for a re-plan of `scope` (`event_id` is the EventBridge id)."""

    event_id: str
    event_name: str
    scope: Scope
    # RegisterTargets / DeregisterTargets: the targets and ports, for the inventory index
    changes: tuple[TargetChange, ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class Ignored:
    """An event that starts no work, and why (`event_id` is None when it could not be read)."""

    event_id: str | None
    reason: str


Parsed = Relevant | Ignored


def parse_record(
    body: str | Mapping[str, Any],
    *,
    account_id: str,
    region: str,
    own_role_arns: frozenset[str],
) -> Parsed:
    """Classify one trigger: an EventBridge event as JSON text or dict.

    Never raises: anything unreadable becomes `Ignored`, logged once at INFO.
    """
    try:
        parsed = _parse(body, account_id=account_id, region=region, own_role_arns=own_role_arns)
    except Exception as exc:  # the batch must survive any event; the traceback shows the bug
        parsed = Ignored(None, _short(f"unexpected error: {type(exc).__name__}: {exc}"))
        logger.exception(
            "ignored event: %s", parsed.reason, extra={"event_id": None, "reason": parsed.reason}
        )
        return parsed
    if isinstance(parsed, Ignored):
        logger.info(
            "ignored event %s: %s",
            parsed.event_id,
            parsed.reason,
            extra={"event_id": parsed.event_id, "reason": parsed.reason},
        )
    return parsed


def parse_sqs_record(
    record: object,
    index: int,
    *,
    account_id: str,
    region: str,
    own_role_arns: frozenset[str],
) -> tuple[str, Parsed]:
    """One record of an SQS batch and its body classified: (message id, what it is). A
    record that is not an SQS message with a text body (only a hand invoke sends one) is
    ignored like any unreadable trigger, under its message id if that is text, else its
    position."""
    if not isinstance(record, dict):  # `parse` would read a string as JSON text
        return str(index), _not_sqs(f"a {type(record).__name__}, not an object")
    try:
        message = parse(event=record, model=SqsMessage)
    except ValidationError as exc:
        found = record.get("messageId")
        return (found if isinstance(found, str) else str(index)), _not_sqs(_first_error(exc))
    return message.messageId, parse_record(
        message.body, account_id=account_id, region=region, own_role_arns=own_role_arns
    )


def _not_sqs(why: str) -> Ignored:
    ignored = Ignored(None, _short(f"not an SQS record: {why}"))
    logger.info("ignored SQS record: %s", ignored.reason, extra={"reason": ignored.reason})
    return ignored


def scope_of(detail: CloudTrailDetail) -> Scope:
    """What a successful call changed, as a Scope; an empty Scope means nothing we manage."""
    from sg_reconciler.trigger import cloudtrail as ct

    match detail:
        case ct.AuthorizeSecurityGroupIngressDetail():
            return _authorize(detail)
        case (
            ct.RevokeSecurityGroupIngressDetail()
            | ct.UpdateSecurityGroupRuleDescriptionsIngressDetail()
        ):
            return _groups_or_everything([detail.requestParameters.groupId])
        case ct.ModifySecurityGroupRulesDetail():
            request = detail.requestParameters.ModifySecurityGroupRulesRequest
            return _groups_or_everything([request.GroupId])
        case ct.CreateSecurityGroupDetail():
            created = detail.responseElements
            return _groups_or_everything([created.groupId if created is not None else None])
        case ct.DeleteSecurityGroupDetail():
            return _groups_or_everything([detail.requestParameters.groupId])
        case ct.ModifyNetworkInterfaceAttributeDetail():
            # The event names the interface's new groups but not the ones it left, and a
            # Scope has no interface field: only a full re-plan finds the stale rules.
            return Scope() if detail.requestParameters.groupSet is None else Scope.everything()
        case ct.ModifyInstanceAttributeDetail():
            return _instance_groups(detail)
        case ct.CreateTagsDetail() | ct.DeleteTagsDetail():
            return _ec2_tags(detail)
        case ct.CreateLoadBalancerDetail():
            return _create_load_balancer(detail)
        case ct.DeleteLoadBalancerDetail() | ct.SetSubnetsDetail() | ct.SetIpAddressTypeDetail():
            return Scope(load_balancer_arns=_ids([detail.requestParameters.loadBalancerArn]))
        case ct.SetSecurityGroupsDetail():
            return _set_security_groups(detail)
        case ct.CreateTargetGroupDetail():
            described = detail.responseElements.targetGroups if detail.responseElements else []
            arns = _ids(tg.targetGroupArn for tg in described)
            return Scope(target_group_arns=arns) if arns else Scope.everything()
        case ct.ModifyTargetGroupDetail():
            described = detail.responseElements.targetGroups if detail.responseElements else []
            return Scope(
                load_balancer_arns=_ids(lb for tg in described for lb in tg.loadBalancerArns),
                target_group_arns=_ids([detail.requestParameters.targetGroupArn]),
            )
        case ct.DeleteTargetGroupDetail() | ct.ModifyTargetGroupAttributesDetail():
            return Scope(target_group_arns=_ids([detail.requestParameters.targetGroupArn]))
        case ct.CreateListenerDetail():
            return _create_listener(detail)
        case ct.ModifyListenerDetail():
            return _modify_listener(detail)
        case ct.DeleteListenerDetail():
            return _with_load_balancer(detail.requestParameters.listenerArn, Scope())
        case ct.CreateRuleDetail():
            return _rule_actions(
                detail.requestParameters.listenerArn,
                detail.requestParameters.actions,
                detail.responseElements,
            )
        case ct.ModifyRuleDetail():
            return _rule_actions(
                detail.requestParameters.ruleArn,
                detail.requestParameters.actions,
                detail.responseElements,
            )
        case ct.DeleteRuleDetail():
            return _with_load_balancer(detail.requestParameters.ruleArn, Scope())
        case ct.RegisterTargetsDetail() | ct.DeregisterTargetsDetail():
            return _targets(detail.requestParameters)
        case ct.AddTagsDetail() | ct.RemoveTagsDetail():
            return _tagged(detail.requestParameters.resourceArns)
    # An event name without a case is a programming error; a full re-plan stays correct.
    return Scope.everything()


# ---------------------------------------------------------------- internals

_INSTANCE_ID = re.compile(r"^i-[0-9a-f]{8,17}$")
# arn:<partition>:elasticloadbalancing:<region>:<account>:<kind>/<path>
_ELB_ARN = re.compile(r"^arn:aws[a-z-]*:elasticloadbalancing:[a-z0-9-]+:\d{12}:([a-z-]+)/(.+)$")
# Path segments after the kind: loadbalancer/<type>/<name>/<id>, listener/<type>/<name>/<lb-id>/<id>,
# listener-rule/<type>/<name>/<lb-id>/<listener-id>/<id>.
_LB_PATH_SEGMENTS = {"loadbalancer": 3, "listener": 4, "listener-rule": 5}


def _parse(
    body: str | Mapping[str, Any],
    *,
    account_id: str,
    region: str,
    own_role_arns: frozenset[str],
) -> Parsed:
    raw = _load(body)
    if isinstance(raw, Ignored):
        return raw
    event_id = raw.get("id") if isinstance(raw.get("id"), str) else None

    try:
        envelope = parse(event=raw, model=EventBridgeEnvelope)
    except ValidationError as exc:
        return Ignored(event_id, _short(f"malformed event: {_first_error(exc)}"))
    event_id = envelope.id
    if envelope.account != account_id:
        return Ignored(event_id, f"event for account {envelope.account}, not {account_id}")
    if envelope.region != region:
        return Ignored(event_id, f"event for region {envelope.region}, not {region}")
    if envelope.source == SCHEDULE_SOURCE and envelope.detail_type == SCHEDULED_DETAIL_TYPE:
        return Relevant(event_id, SCHEDULED_DETAIL_TYPE, Scope.everything())
    # The CloudTrail models are loaded by the first CloudTrail event: a scheduled run, the
    # planner's cold start after a quiet spell, needs none of them.
    from sg_reconciler.trigger import cloudtrail as ct

    if envelope.detail_type != ct.CLOUDTRAIL_DETAIL_TYPE:
        return Ignored(
            event_id,
            _short(
                f"unsupported event: source {envelope.source}, detail-type {envelope.detail_type}"
            ),
        )
    try:
        detail = ct.CloudTrailDetail.model_validate(raw["detail"])
    except ValidationError as exc:
        return Ignored(event_id, _short(f"malformed CloudTrail detail: {_first_error(exc)}"))

    name = detail.eventName
    issuer = detail.userIdentity.issuer_arn
    if issuer is not None and issuer in own_role_arns:
        return Ignored(event_id, f"{name} made by the reconciler's own role {issuer}")
    if detail.errorCode is not None:
        return Ignored(event_id, _short(f"{name} failed with {detail.errorCode}"))
    if name not in ct.EVENT_NAMES:
        return Ignored(event_id, _short(f"unsupported event name {name}"))
    if name in ct.ELB_EVENT_NAMES and detail.apiVersion == ct.CLASSIC_ELB_API_VERSION:
        return Ignored(event_id, f"{name} on a classic load balancer, which is not managed")

    try:
        # The one model for this eventName (what CloudTrailEvent's union routes to), so that a
        # cold start builds only the models of the events it sees; errors read as the union's.
        typed = ct.DETAIL_MODELS[name].model_validate(raw["detail"])
    except ValidationError as exc:
        where = ("detail", name)
        return Ignored(event_id, _short(f"malformed {name} event: {_first_error(exc, at=where)}"))
    scope = scope_of(typed)
    if not scope:
        return Ignored(event_id, f"{name} changes nothing the reconciler manages")
    return Relevant(event_id, name, scope, _target_changes(typed))


def _load(body: str | Mapping[str, Any]) -> dict[str, Any] | Ignored:
    """An event as JSON text or a dict (SQS records are read by `parse_sqs_record`)."""
    value: Any = body
    if isinstance(value, str | bytes):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError) as exc:
            return Ignored(None, _short(f"body is not JSON: {exc}"))
    if not isinstance(value, Mapping):
        return Ignored(None, f"body is a JSON {type(value).__name__}, not an object")
    return dict(value)


def _groups_or_everything(group_ids: Iterable[str | None]) -> Scope:
    """The named groups; a call that names none (default-VPC calls by group name) cannot be narrowed."""
    groups = _ids(group_ids)
    return Scope(group_ids=groups) if groups else Scope.everything()


def _authorize(detail: AuthorizeSecurityGroupIngressDetail) -> Scope:
    added = detail.responseElements.securityGroupRuleSet.items if detail.responseElements else []
    return _groups_or_everything([detail.requestParameters.groupId, *(r.groupId for r in added)])


def _instance_groups(detail: ModifyInstanceAttributeDetail) -> Scope:
    params = detail.requestParameters
    if params.groupSet is None:  # another attribute (type, user data, ...)
        return Scope()
    instance = _ids([params.instanceId])
    return Scope(
        group_ids=_ids(g.groupId for g in params.groupSet.items),
        instance_ids=instance,
        regrouped_instances=instance,
    )


def _create_load_balancer(detail: CreateLoadBalancerDetail) -> Scope:
    described = detail.responseElements.loadBalancers if detail.responseElements else []
    arns = _ids(lb.loadBalancerArn for lb in described)
    if not arns:
        return Scope.everything()
    groups = _ids(detail.requestParameters.securityGroups)
    groups |= _ids(g for lb in described for g in lb.securityGroups)
    return Scope(group_ids=groups, load_balancer_arns=arns)


def _set_security_groups(detail: SetSecurityGroupsDetail) -> Scope:
    params = detail.requestParameters
    groups = _ids(params.securityGroups)
    if detail.responseElements is not None:
        groups |= _ids(detail.responseElements.securityGroupIds)
    return Scope(group_ids=groups, load_balancer_arns=_ids([params.loadBalancerArn]))


def _create_listener(detail: CreateListenerDetail) -> Scope:
    params = detail.requestParameters
    listeners = detail.responseElements.listeners if detail.responseElements else []
    return Scope(
        load_balancer_arns=_ids(
            [params.loadBalancerArn, *(li.loadBalancerArn for li in listeners)]
        ),
        target_group_arns=_forwarded(params.defaultActions)
        | _forwarded(a for li in listeners for a in li.defaultActions),
    )


def _modify_listener(detail: ModifyListenerDetail) -> Scope:
    params = detail.requestParameters
    listeners = detail.responseElements.listeners if detail.responseElements else []
    return _with_load_balancer(
        params.listenerArn,
        Scope(
            load_balancer_arns=_ids(li.loadBalancerArn for li in listeners),
            target_group_arns=_forwarded(params.defaultActions)
            | _forwarded(a for li in listeners for a in li.defaultActions),
        ),
    )


def _rule_actions(arn: str, actions: list[Action], response: RulesResponse | None) -> Scope:
    rules = response.rules if response is not None else []
    forwarded = _forwarded(actions) | _forwarded(a for r in rules for a in r.actions)
    return _with_load_balancer(arn, Scope(target_group_arns=forwarded))


def _targets(params: TargetsParameters) -> Scope:
    """The target group, plus instance targets (IP and Lambda targets name no instance)."""
    return Scope(
        target_group_arns=_ids([params.targetGroupArn]),
        instance_ids=_ids(t.id for t in params.targets if _INSTANCE_ID.match(t.id)),
    )


def _target_changes(detail: CloudTrailDetail) -> tuple[TargetChange, ...]:
    """What a (de)registration says, versioned by the event (whoever made it: a person, the
    controller, or a service such as Auto Scaling or ECS)."""
    from sg_reconciler.trigger import cloudtrail as ct

    if not isinstance(detail, ct.RegisterTargetsDetail | ct.DeregisterTargetsDetail):
        return ()
    version = Version.of_event(detail.eventTime, detail.eventID)
    if version is None:
        return ()
    params = detail.requestParameters
    return (
        TargetChange(
            params.targetGroupArn,
            isinstance(detail, ct.RegisterTargetsDetail),
            tuple((t.id, t.port) for t in params.targets),
            version,
        ),
    )


def _ec2_tags(detail: CreateTagsDetail | DeleteTagsDetail) -> Scope:
    """A group's tags decide whether it is a destination; a rule's owner tag whether it is
    ours (a rule id names no group: re-plan everything). Other resources' tags do not count."""
    ids = [r.resourceId or "" for r in detail.requestParameters.resourcesSet.items]
    if any(i.startswith("sgr-") for i in ids):
        return Scope.everything()
    return Scope(group_ids=_ids(i for i in ids if i.startswith("sg-")))


def _tagged(resource_arns: list[str]) -> Scope:
    """Tags select what the policy covers; only load balancer and target group tags count."""
    return Scope(
        load_balancer_arns=_ids(a for a in resource_arns if _arn_kind(a) == "loadbalancer"),
        target_group_arns=_ids(a for a in resource_arns if _arn_kind(a) == "targetgroup"),
    )


def _ids(values: Iterable[str | None]) -> frozenset[str]:
    return frozenset(v for v in values if v)


def _forwarded(actions: Iterable[Action]) -> frozenset[str]:
    return frozenset(arn for action in actions for arn in action.target_group_arns())


def _arn_kind(arn: str) -> str | None:
    match = _ELB_ARN.match(arn)
    return match.group(1) if match else None


def load_balancer_arn_of(arn: str) -> str | None:
    """The load balancer ARN a load balancer, listener or listener-rule ARN belongs to."""
    match = _ELB_ARN.match(arn)
    if match is None:
        return None
    kind, path = match.groups()
    segments = path.split("/")
    if _LB_PATH_SEGMENTS.get(kind) != len(segments) or not all(segments):
        return None
    prefix = arn[: match.start(1)]
    return f"{prefix}loadbalancer/{'/'.join(segments[:3])}"


def _with_load_balancer(arn: str, scope: Scope) -> Scope:
    """Adds the listener's or rule's load balancer; an ARN we cannot read widens to everything."""
    lb = load_balancer_arn_of(arn)
    if lb is None:
        return Scope.everything()
    return scope | Scope(load_balancer_arns=frozenset({lb}))


def _short(text: str) -> str:
    return text if len(text) <= _MAX_REASON else text[: _MAX_REASON - 1] + "…"
