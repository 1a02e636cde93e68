"""The in-memory FakeRules (tests/fakes.py) behaves as SecurityGroupRules on moto does: one
scenario of writes, guards and errors runs on both and leaves the same transcript (rule ids
replaced by the order they first appear in), so the fake-backed tests of tests/unit/app hold for
the adapter too."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import boto3
import pytest
from fakes import FakeRules
from moto import mock_aws
from sg_reconciler.adapters.security_groups import SecurityGroupRules, ip_permission
from sg_reconciler.core.plan import Adopt
from sg_reconciler.core.ports import RuleStore
from sg_reconciler.core.rules import (
    ADOPTED_BY_TAG_KEY,
    OWNER_TAG_KEY,
    PLAN_TAG_KEY,
    Rule,
    rule_from_dict,
)
from sg_reconciler.errors import ReconcilerError

OWNER = "sg-reconciler"
Put = Callable[[Rule], str]  # adds an unmanaged rule, returns its id


def rule(group: str, port: int, description: str = "") -> Rule:
    return rule_from_dict(
        {
            "GroupId": group,
            "IpProtocol": "tcp",
            "FromPort": port,
            "ToPort": port,
            "CidrIpv4": "10.1.0.0/16",
            "Description": description,
        }
    )


class Transcript:
    def __init__(self) -> None:
        self.lines: list[Any] = []
        self.ids: dict[str, str] = {}

    def id(self, rule_id: str | None) -> str:
        return self.ids.setdefault(rule_id or "", f"#{len(self.ids)}")

    def rules(self, rules: list[Rule]) -> list[tuple[Any, ...]]:
        return sorted(
            (
                self.id(r.rule_id),
                str(r.key).split(" ", 1)[1],
                r.description,
                r.tag(OWNER_TAG_KEY),
                r.tag(PLAN_TAG_KEY),
                r.tag(ADOPTED_BY_TAG_KEY),
            )
            for r in rules
        )

    def call(self, label: str, call: Callable[[], Any]) -> Any:
        try:
            result = call()
        except ReconcilerError as err:
            self.lines.append((label, "raised", type(err).__name__))
            return None
        self.lines.append((label, self.shown(result)))
        return result

    def shown(self, result: Any) -> Any:
        if isinstance(result, dict):
            return sorted((str(k).split(" ", 1)[1], self.id(v)) for k, v in result.items())
        if isinstance(result, list) and result and isinstance(result[0], Rule):
            return self.rules(result)
        if isinstance(result, list):
            return [self.id(i) for i in result]
        return result


def scenario(store: RuleStore, put: Put, group: str, gone: str) -> list[Any]:
    t = Transcript()
    r1, r2 = rule(group, 80), rule(group, 81)
    first = t.call("authorize r1", lambda: store.authorize(group, [r1], OWNER, "plan-1"))
    t.call("authorize r1 r2", lambda: store.authorize(group, [r1, r2], OWNER, "plan-2"))
    t.call("tagged plan-1", lambda: store.tagged([group], OWNER, "plan-1"))
    t.call("tagged plan-2", lambda: store.tagged([group], OWNER, "plan-2"))
    theirs = put(rule(group, 82, "theirs"))
    t.id(theirs)
    r1_id = next(iter(first.values()))
    t.call("revoke theirs", lambda: store.revoke(group, [theirs], OWNER))

    def refuse(live: list[Rule]) -> None:
        t.lines.append(("guard saw", t.rules(live)))
        raise ReconcilerError("the guard refused")

    t.call("revoke r1 guarded", lambda: store.revoke(group, [r1_id], OWNER, refuse))
    t.call("revoke r1", lambda: store.revoke(group, [r1_id, "sgr-0123456789abcdef0"], OWNER))
    t.call("revoke r1 again", lambda: store.revoke(group, [r1_id], OWNER))
    (r2_now,) = store.tagged([group], OWNER, "plan-2")
    r2_id = r2_now.rule_id or ""
    t.call("modify r2", lambda: store.modify(group, r2_id, replace(r2, description="x"), OWNER))
    t.call(
        "modify r2 again", lambda: store.modify(group, r2_id, replace(r2, description="x"), OWNER)
    )
    t.call("modify theirs", lambda: store.modify(group, theirs, rule(group, 82, "y"), OWNER))
    mine = rule(group, 82, "mine")
    step = Adopt(group, theirs, mine, "theirs")
    other_key = Adopt(group, theirs, rule(group, 83), "theirs")
    t.call(
        "adopt described otherwise", lambda: store.adopt(group, replace(step, was="x"), OWNER, "p")
    )
    t.call("adopt theirs", lambda: store.adopt(group, step, OWNER, "plan-3"))
    t.call("adopt theirs again", lambda: store.adopt(group, step, OWNER, "plan-3"))
    t.call("adopt other key", lambda: store.adopt(group, other_key, OWNER, "p"))
    t.call("adopt as another", lambda: store.adopt(group, step, "other", "plan-4"))
    t.call("describe", lambda: store.describe([group, gone]))
    t.call("hand back", lambda: store.hand_back([group], OWNER, "plan-3"))
    t.call("hand back again", lambda: store.hand_back([group], OWNER, "plan-3"))
    t.call("describe after", lambda: store.describe([group]))
    t.call("authorize gone", lambda: store.authorize(gone, [rule(gone, 80)], OWNER, "plan-5"))
    t.call("adopt gone", lambda: store.adopt(gone, replace(step, group_id=gone), OWNER, "plan-5"))
    t.call("revoke gone", lambda: store.revoke(gone, [theirs], OWNER))
    return t.lines


@pytest.fixture
def ec2() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("ec2", region_name="eu-west-1")


def test_the_fake_leaves_the_transcript_the_adapter_leaves_on_moto(ec2: Any) -> None:
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    group = ec2.create_security_group(GroupName="a", Description="a", VpcId=vpc)["GroupId"]
    gone = ec2.create_security_group(GroupName="b", Description="b", VpcId=vpc)["GroupId"]
    ec2.delete_security_group(GroupId=gone)
    adapter = SecurityGroupRules(ec2)

    def put_on_moto(new: Rule) -> str:
        ec2.authorize_security_group_ingress(GroupId=group, IpPermissions=[ip_permission(new)])
        return next(r.rule_id or "" for r in adapter.describe([group]) if r.key == new.key)

    fake = FakeRules()
    fake.add_group(group)

    def put_in_memory(new: Rule) -> str:
        return fake.put(new).rule_id or ""

    on_moto = scenario(adapter, put_on_moto, group, gone)
    in_memory = scenario(fake, put_in_memory, group, gone)

    assert in_memory == on_moto
