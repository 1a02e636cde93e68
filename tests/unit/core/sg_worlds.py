"""Rule documents for the named cases, in describe-security-group-rules shape."""

from __future__ import annotations

from typing import Any

from sg_reconciler.core.plan import Plan, Refusal
from sg_reconciler.core.planner import Limits, make_plan
from sg_reconciler.core.rules import Rule, ingress_rules
from unit.core.sg_judge import OWNER, OWNER_TAG, Doc

NODES = "sg-0node0000000000001"
BACKEND = "sg-0backend000000001"


def rule(
    group: str,
    ports: tuple[int, int] | None = None,
    *,
    protocol: str = "tcp",
    rule_id: str | None = None,
    owner: str | None = None,
    description: str = "",
    **peer: Any,
) -> Doc:
    """One rule; existing when it has an id, owned when it has an owner."""
    doc: Doc = {"GroupId": group, "IsEgress": False, "IpProtocol": protocol}
    if ports is not None:
        doc["FromPort"], doc["ToPort"] = ports
    else:
        doc["FromPort"] = doc["ToPort"] = -1
    doc.update(peer or {"ReferencedGroupInfo": {"GroupId": BACKEND}})
    if description:
        doc["Description"] = description
    if rule_id:
        doc["SecurityGroupRuleId"] = rule_id
    if owner:
        doc["Tags"] = [{"Key": OWNER_TAG, "Value": owner}]
    return doc


def owned(group: str, ports: tuple[int, int] | None, rule_id: str, **kw: Any) -> Doc:
    return rule(group, ports, rule_id=rule_id, owner=OWNER, **kw)


def parse(docs: list[Doc]) -> list[Rule]:
    return ingress_rules(docs, "test")


def plan_for(current: list[Doc], desired: list[Doc], quota: int = 60) -> Plan | Refusal:
    return make_plan(parse(current), parse(desired), OWNER, Limits(quota))


def lbc_3639() -> tuple[list[Doc], list[Doc]]:
    """LBC issue #3639: the shared backend rule grows from 31000-32000 to 31000-32500."""
    current = [
        owned(NODES, (31000, 32000), "sgr-nodeports", description="NodePorts"),
        rule(NODES, (22, 22), rule_id="sgr-ssh", CidrIpv4="10.0.0.0/16", description="ssh"),
    ]
    desired = [rule(NODES, (31000, 32500), description="NodePorts")]
    return current, desired
