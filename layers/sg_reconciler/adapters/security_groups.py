"""Thin boto3 adapter for security-group ingress rules: describe, authorize, revoke, modify.

Every AWS error leaves as a typed error (sg_reconciler.errors). Writes are idempotent at the
level the state machine needs: authorizing a rule that exists returns its id, revoking a rule
that is gone succeeds. Revokes go by rule id only, never by consolidated permissions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from sg_reconciler.adapters.aws import typed_aws_errors
from sg_reconciler.adapters.pacing import Pacer
from sg_reconciler.adapters.rule_checks import adopt_calls, modify_needed, modify_target, revocable
from sg_reconciler.collector import paused_collector
from sg_reconciler.core.plan import Adopt
from sg_reconciler.core.rules import (
    ADOPTED_BY_TAG_KEY,
    ADOPTED_DESCRIPTION_TAG_KEY,
    OWNER_TAG_KEY,
    PLAN_TAG_KEY,
    Rule,
    RuleKey,
    ingress_rules,
)
from sg_reconciler.errors import (
    AwsCallFailed,
    NotYetVisible,
)

_FILTER_CHUNK = 200  # values per describe filter
T = TypeVar("T")

# Called with the group's live rules right before each attempt of a revoke or modify; raises
# to stop the call.
Guard = Callable[[list[Rule]], None]


def ip_permission(rule: Rule) -> dict[str, Any]:
    """One rule as an IpPermissions entry of AuthorizeSecurityGroupIngress."""
    key = rule.key
    perm: dict[str, Any] = {
        "IpProtocol": key.protocol,
        "FromPort": key.from_port,
        "ToPort": key.to_port,
    }
    described = {"Description": rule.description} if rule.description else {}
    if key.peer.kind == "cidr4":
        perm["IpRanges"] = [{"CidrIp": key.peer.value, **described}]
    elif key.peer.kind == "cidr6":
        perm["Ipv6Ranges"] = [{"CidrIpv6": key.peer.value, **described}]
    elif key.peer.kind == "prefix_list":
        perm["PrefixListIds"] = [{"PrefixListId": key.peer.value, **described}]
    else:
        perm["UserIdGroupPairs"] = [{"GroupId": key.peer.value, **described}]
    return perm


def rule_request(rule: Rule, *, described: bool = False) -> dict[str, Any]:
    """One rule as the SecurityGroupRule of ModifySecurityGroupRules; `described` sends the
    description even when empty (a rewrite back to no description)."""
    key = rule.key
    request: dict[str, Any] = {
        "IpProtocol": key.protocol,
        "FromPort": key.from_port,
        "ToPort": key.to_port,
    }
    field = {
        "cidr4": "CidrIpv4",
        "cidr6": "CidrIpv6",
        "prefix_list": "PrefixListId",
        "group": "ReferencedGroupId",
    }
    request[field[key.peer.kind]] = key.peer.value
    if rule.description or described:
        request["Description"] = rule.description
    return request


def _chunks(items: Sequence[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


class SecurityGroupRules:
    """Reads and writes the ingress rules of security groups through one EC2 client; writes
    go through the pacer when there is one (the steps), so a large change stays under EC2's
    rate limit instead of being throttled into a rollback."""

    def __init__(self, ec2: Any, pacer: Pacer | None = None) -> None:
        self.ec2, self.pacer = ec2, pacer

    def _write(self, call: Callable[[], T]) -> T:
        def typed() -> T:
            with typed_aws_errors():
                return call()

        return self.pacer.call(typed) if self.pacer is not None else typed()

    def _describe(self, filters: list[dict[str, Any]]) -> list[Rule]:
        docs: list[dict[str, Any]] = []
        with typed_aws_errors():
            for page in self.ec2.get_paginator("describe_security_group_rules").paginate(
                Filters=filters
            ):
                docs.extend(page.get("SecurityGroupRules", []))
        with paused_collector():
            return ingress_rules(docs, "described")

    def describe(self, group_ids: Sequence[str]) -> list[Rule]:
        """All ingress rules of the groups (batched by filter, paginated)."""
        rules: list[Rule] = []
        for chunk in _chunks(sorted(set(group_ids)), _FILTER_CHUNK):
            rules.extend(self._describe([{"Name": "group-id", "Values": chunk}]))
        return rules

    def tagged(
        self, group_ids: Sequence[str], owner: str, plan_id: str, tag_key: str = PLAN_TAG_KEY
    ) -> list[Rule]:
        """Rules an execution created (or, with ADOPTED_BY_TAG_KEY, adopted): found by tags,
        because a write can apply while its caller sees an error."""
        rules: list[Rule] = []
        for chunk in _chunks(sorted(set(group_ids)), _FILTER_CHUNK):
            rules.extend(
                self._describe(
                    [
                        {"Name": "group-id", "Values": chunk},
                        {"Name": f"tag:{OWNER_TAG_KEY}", "Values": [owner]},
                        {"Name": f"tag:{tag_key}", "Values": [plan_id]},
                    ]
                )
            )
        return rules

    def adopt(self, group_id: str, step: Adopt, owner: str, plan_id: str) -> None:
        """Take over an unmanaged rule in place: the owner tag (with the execution and the
        planned description, for a rollback), then the desired description. Neither call
        changes what the rule admits. Only the planned rule is taken: same key, and still
        the planned description (or ours, on a retry of this execution's step)."""
        rule_id, rule = step.rule_id, step.rule
        target = next((r for r in self.describe([group_id]) if r.rule_id == rule_id), None)
        calls = adopt_calls(group_id, target, step, owner, plan_id)
        if target is None or calls == "none":  # (adopt_calls raised on None)
            return  # already ours (adopted earlier, or made by us): nothing to take over
        if calls == "tag":
            tags = [
                {"Key": OWNER_TAG_KEY, "Value": owner},
                {"Key": ADOPTED_BY_TAG_KEY, "Value": plan_id},
                {"Key": ADOPTED_DESCRIPTION_TAG_KEY, "Value": step.was},
            ]
            self._write(lambda: self.ec2.create_tags(Resources=[rule_id], Tags=tags))
        if target.description != rule.description:
            self._rewrite(group_id, rule_id, rule)

    def hand_back(self, group_ids: Sequence[str], owner: str, plan_id: str) -> list[str]:
        """Undo this execution's adoptions: the old description back, then the tags off."""
        handed: list[str] = []
        for rule in self.tagged(group_ids, owner, plan_id, ADOPTED_BY_TAG_KEY):
            rule_id = rule.rule_id or ""
            old = rule.tag(ADOPTED_DESCRIPTION_TAG_KEY) or ""
            if rule.description != old:
                self._rewrite(
                    rule.group_id, rule_id, replace(rule, description=old), described=True
                )
            keys = (OWNER_TAG_KEY, ADOPTED_BY_TAG_KEY, ADOPTED_DESCRIPTION_TAG_KEY)
            self._write(  # called at once: the loop variables cannot move under it
                lambda: self.ec2.delete_tags(
                    Resources=[rule_id],  # noqa: B023
                    Tags=[{"Key": k} for k in keys],  # noqa: B023
                )
            )
            handed.append(rule_id)
        return sorted(handed)

    def _rewrite(self, group_id: str, rule_id: str, rule: Rule, *, described: bool = False) -> None:
        self._write(lambda: self._modify_call(group_id, rule_id, rule, described=described))

    def _modify_call(
        self, group_id: str, rule_id: str, rule: Rule, *, described: bool = False
    ) -> None:
        request = rule_request(rule, described=described)
        self.ec2.modify_security_group_rules(
            GroupId=group_id,
            SecurityGroupRules=[{"SecurityGroupRuleId": rule_id, "SecurityGroupRule": request}],
        )

    def authorize(
        self, group_id: str, rules: Sequence[Rule], owner: str, plan_id: str
    ) -> dict[RuleKey, str]:
        """Ensure the rules exist; returns the rule id of each key AWS reported.

        One call, no describe: the ids come from the response, and "Verify the new rules are
        visible" checks them all at once. Only a duplicate (a concurrent writer, or a retry of
        a call that had applied) costs a describe, to authorize what is still missing."""
        added = self._authorize(group_id, rules, owner, plan_id)
        if added is not None:
            return added
        existing = {r.key: r.rule_id or "" for r in self.describe([group_id])}
        missing = [r for r in rules if r.key not in existing]
        if missing:
            more = self._authorize(group_id, missing, owner, plan_id)
            if more is None:
                raise NotYetVisible(
                    f"{group_id}: a duplicate was reported for rules describe does not show yet"
                )
            existing.update(more)
        return {r.key: existing[r.key] for r in rules if r.key in existing}

    def _authorize(
        self, group_id: str, rules: Sequence[Rule], owner: str, plan_id: str
    ) -> dict[RuleKey, str] | None:
        """The new rules' ids by key, or None when EC2 reports a duplicate."""
        tags = [{"Key": OWNER_TAG_KEY, "Value": owner}, {"Key": PLAN_TAG_KEY, "Value": plan_id}]
        try:
            response = self._write(
                lambda: self.ec2.authorize_security_group_ingress(
                    GroupId=group_id,
                    IpPermissions=[ip_permission(r) for r in rules],
                    TagSpecifications=[{"ResourceType": "security-group-rule", "Tags": tags}],
                )
            )
        except AwsCallFailed as err:
            if err.code != "InvalidPermission.Duplicate":
                raise
            return None
        created = ingress_rules(response.get("SecurityGroupRules", []), "authorized")
        return {r.key: r.rule_id or "" for r in created}

    def revoke(
        self, group_id: str, rule_ids: Sequence[str], owner: str, guard: Guard | None = None
    ) -> list[str]:
        """Revoke the owned rules among `rule_ids` that still exist; returns the ids revoked.

        Each attempt reads the group and runs the guard before its call, the first and every
        retry after a throttled answer: a change made during the backoff (seconds) stops the
        call as one made before the first attempt does (docs/invariants.md, invariant 7)."""

        def attempt() -> list[str]:
            live = self.describe([group_id])
            ids = revocable(live, rule_ids, owner)
            if ids:
                if guard is not None:
                    guard(live)
                self.ec2.revoke_security_group_ingress(GroupId=group_id, SecurityGroupRuleIds=ids)
            return ids

        return self._write(attempt)

    def modify(
        self, group_id: str, rule_id: str, rule: Rule, owner: str, guard: Guard | None = None
    ) -> None:
        """Rewrite an owned rule in place (same id, tags kept); each attempt read and
        guarded as a revoke's is."""

        def attempt() -> None:
            live = self.describe([group_id])
            if not modify_needed(modify_target(live, rule_id, owner), rule):
                return
            if guard is not None:
                guard(live)
            self._modify_call(group_id, rule_id, rule)

        self._write(attempt)
