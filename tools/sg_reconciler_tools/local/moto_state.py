"""Readers of moto's state for the test tooling; they change nothing in moto.

The invariant monitor reads rules without an API call (no fault or request counter sees
it), the deployment reads what moto's CloudFormation engine resolved (a resource's
`!GetAtt`, a condition), which CloudFormation has no API for, and the runtime matches
events with moto's EventBridge pattern matcher, used as a library.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from sg_reconciler_tools.local.moto_hooks import ACCOUNT_ID
from sg_reconciler_tools.local.patching import require


def ec2_backend(region: str, account_id: str = ACCOUNT_ID) -> Any:
    """`moto.ec2.models.ec2_backends[account][region]`: the EC2Backend clients talk to."""
    from moto.ec2.models import ec2_backends

    return ec2_backends[account_id][region]


def security_group_rule_docs(backend: Any, group_ids: Iterable[str]) -> list[dict[str, Any]]:
    """Ingress and egress rules of groups in describe-security-group-rules shape.

    Reads `SecurityGroupBackend.groups` and the rules' tags from `TagBackend.tags` without
    an API call, so neither faults on Describe* nor request counters see the monitor.
    """
    wanted = set(group_ids)
    tags_by_resource: Mapping[str, Mapping[str, str]] = require(backend, "tags")
    docs: list[dict[str, Any]] = []
    groups = require(backend, "groups")
    for by_id in list(groups.values()):
        for group in list(by_id.values()):
            if group.id not in wanted:
                continue
            for rule in [*group.ingress_rules, *group.egress_rules]:
                docs.append(_rule_doc(rule, tags_by_resource.get(rule.id, {})))
    return docs


def _rule_doc(rule: Any, tags: Mapping[str, str]) -> dict[str, Any]:
    source = {"GroupId": rule.source_group.get("GroupId")} if rule.source_group else None
    optional = {
        "CidrIpv4": rule.cidr_ipv4,
        "CidrIpv6": rule.cidr_ipv6,
        "PrefixListId": rule.prefix_list_id,
        "ReferencedGroupInfo": source,
        "Description": rule.description,
    }
    return {
        "SecurityGroupRuleId": rule.id,
        "GroupId": rule.group_id,
        "IsEgress": bool(rule.is_egress),
        "IpProtocol": rule.ip_protocol,
        "FromPort": -1 if rule.from_port is None else int(rule.from_port),
        "ToPort": -1 if rule.to_port is None else int(rule.to_port),
        **{key: value for key, value in optional.items() if value},
        "Tags": [{"Key": k, "Value": v} for k, v in sorted(tags.items())],
    }


def cloudformation_stack(stack_name: str, region: str, account_id: str = ACCOUNT_ID) -> Any:
    """`moto.cloudformation.models.cloudformation_backends[account][region].get_stack(name)`."""
    from moto.cloudformation.models import cloudformation_backends

    backend = cloudformation_backends[account_id][region]
    getter = require(backend, "get_stack")
    return getter(stack_name)


def stack_attribute(
    stack_name: str, logical_id: str, attribute: str, region: str, account_id: str = ACCOUNT_ID
) -> Any:
    """What `!GetAtt logical_id.attribute` resolves to in a created stack.

    CloudFormation has no API for it (only Outputs); moto's engine resolves it with the
    resource model's `get_cfn_attribute`, found in the stack's
    `moto.cloudformation.parsing.ResourceMap` (`Stack.resource_map`). KeyError when the
    stack has no such resource or moto did not create it.
    """
    stack = cloudformation_stack(stack_name, region, account_id)
    resources = require(stack, "resource_map")
    if logical_id not in resources.resources:
        raise KeyError(logical_id)
    resource = resources[logical_id]
    if resource is None:
        raise KeyError(f"{logical_id} was not created")
    return require(resource, "get_cfn_attribute")(attribute)


def stack_condition(
    stack_name: str, condition: str, region: str, account_id: str = ACCOUNT_ID
) -> bool:
    """Whether a template condition holds in a created stack, as moto's engine evaluated
    it (`moto.cloudformation.parsing.ResourceMap.lazy_condition_map`)."""
    stack = cloudformation_stack(stack_name, region, account_id)
    resources = require(stack, "resource_map")
    conditions = require(resources, "lazy_condition_map")
    return bool(conditions[condition])


def matches_event_pattern(pattern: Mapping[str, Any], event: Mapping[str, Any]) -> bool:
    """EventBridge's matching, as moto implements it (`moto.events.models.EventPattern`)."""
    from moto.events.models import EventPattern

    message: Any = dict(event)
    return bool(EventPattern.load(json.dumps(pattern)).matches_event(message))
