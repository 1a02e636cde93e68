"""`compute_live_plan` reads the account through the InventoryReader port: on a fake
inventory, the live plan is computed with no client at all."""

from __future__ import annotations

import json

from fakes import FakeInventory
from sg_reconciler.app.live_plan import compute_live_plan
from sg_reconciler.core.account import Inventory, SecurityGroup
from sg_reconciler.core.plan import Authorize, Plan
from sg_reconciler.core.scope import Scope
from sg_reconciler.policy import parse_policy

GROUP = "sg-0123456789abcdef0"
STATIC = {"group_id": GROUP, "from_port": 443, "to_port": 443, "cidr_ipv4": "10.0.0.0/16"}
POLICY = parse_policy(json.dumps({"static_rules": [STATIC]}))


def test_the_live_plan_reads_through_the_given_reader() -> None:
    reader = FakeInventory(Inventory(groups={GROUP: SecurityGroup(GROUP, vpc_id="vpc-1")}))

    live = compute_live_plan(reader, POLICY, Scope.everything())

    assert reader.reads == 1
    assert isinstance(live.result, Plan)
    (step,) = live.result.steps
    assert isinstance(step, Authorize) and step.group_id == GROUP
    assert [str(r.key) for r in step.rules] == [f"{GROUP} tcp 443 from 10.0.0.0/16"]


def test_a_missing_group_is_noted_once_saying_what_it_is_to_the_policy() -> None:
    # Given a read that did not find the static rules' group nor an owned rule's group
    owned_gone = "sg-0000000000000dead"
    found = Inventory(missing_groups=frozenset({GROUP, owned_gone}))
    two_rules = parse_policy(json.dumps({"static_rules": [STATIC, {**STATIC, "from_port": 22}]}))

    live = compute_live_plan(FakeInventory(found), two_rules, Scope.everything())

    # Then each is named in one note: the static rules' by its role, the other's by its read
    assert [n for n in live.notes if GROUP in n] == [
        f"{GROUP} (static rule group) does not exist (deleted?): left out of the plan"
    ]
    assert [n for n in live.notes if owned_gone in n] == [
        f"{owned_gone} (read for its rules) does not exist (deleted?): left out of the plan"
    ]
