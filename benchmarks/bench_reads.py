"""Benchmark: AWS calls of an event-driven change that adds one target, narrow read against
full read, as the planner makes them (moto; no local runtime).

    .venv/bin/python -m benchmarks.bench_reads [--load-balancers 100]

Account: N managed NLBs, each with a group of its own and one instance target group whose
two targets are in a node group (one per 20 load balancers), reconciled. The event registers a third node on a new
port in one target group: the narrow read (core/narrow.py) reads that target group's peer
closure (here: itself); the full read, every target group's health. The refresh under the
locks reads the same way, so an execution makes these reads twice.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
from collections import Counter
from typing import Any

import boto3
from moto import mock_aws
from sg_reconciler.adapters.inventory import AccountInventory
from sg_reconciler.app.live_plan import LivePlan, compute_live_plan
from sg_reconciler.core.plan import Authorize, Plan
from sg_reconciler.core.policy import Policy
from sg_reconciler.core.rules import DEFAULT_OWNER, OWNER_TAG_KEY, rule_to_dict
from sg_reconciler.core.scope import Scope
from sg_reconciler.policy import parse_policy
from sg_reconciler_tools.local import moto_hooks

REGION = "us-east-1"
MANAGED: Any = [{"Key": "sg-reconciler/managed", "Value": "true"}]
LBS_PER_NODE_GROUP = 20


class Account:
    """The module docstring's account, reconciled by a first full plan (moto must be on)."""

    def __init__(self, load_balancers: int, backend: bool) -> None:
        self.ec2 = boto3.client("ec2", region_name=REGION)
        self.elbv2 = boto3.client("elbv2", region_name=REGION)
        ec2, elbv2 = self.ec2, self.elbv2
        self.vpc = ec2.create_vpc(CidrBlock="10.2.0.0/16")["Vpc"]["VpcId"]
        self.subnet = ec2.create_subnet(
            VpcId=self.vpc, CidrBlock="10.2.0.0/20", AvailabilityZone=f"{REGION}a"
        )["Subnet"]["SubnetId"]
        shared = self.group("backend")
        # Node groups of LBS_PER_NODE_GROUP load balancers each, so no group passes the quota.
        self.nodes: list[list[str]] = []
        for k in range(-(-load_balancers // LBS_PER_NODE_GROUP)):
            group = self.group(f"nodes{k}")
            launched = ec2.run_instances(
                ImageId="ami-12c6146b",
                MinCount=3,
                MaxCount=3,
                SecurityGroupIds=[group],
                SubnetId=self.subnet,
            )["Instances"]
            self.nodes.append([i["InstanceId"] for i in launched])
        source: dict[str, Any] = {"kind": "load_balancer_groups"}
        if backend:
            source = {"kind": "backend_group", "group_id": shared}
        self.policy: Policy = parse_policy(f"rule_source: {source}")
        self.target_groups: list[str] = []
        for n in range(load_balancers):
            own = self.group(f"lb{n}")
            lb = elbv2.create_load_balancer(
                Name=f"lb{n}",
                Subnets=[self.subnet],
                Type="network",
                SecurityGroups=[own, shared] if backend else [own],
                Tags=MANAGED,
            )["LoadBalancers"][0]["LoadBalancerArn"]
            tg = elbv2.create_target_group(
                Name=f"tg{n}", Protocol="TCP", Port=31000 + n, VpcId=self.vpc
            )["TargetGroups"][0]["TargetGroupArn"]
            elbv2.create_listener(
                LoadBalancerArn=lb,
                Protocol="TCP",
                Port=80,
                DefaultActions=[{"Type": "forward", "TargetGroupArn": tg}],
            )
            elbv2.register_targets(
                TargetGroupArn=tg, Targets=[{"Id": i} for i in self.instances(n)[:2]]
            )
            self.target_groups.append(tg)
        first = self.plan(Scope.everything())
        assert isinstance(first.result, Plan) and first.result.steps
        self.authorize(first.result)

    def instances(self, n: int) -> list[str]:
        """The nodes of load balancer `n`'s target group: two targets and a spare."""
        return self.nodes[n // LBS_PER_NODE_GROUP]

    def group(self, name: str) -> str:
        return str(
            self.ec2.create_security_group(GroupName=name, Description=name, VpcId=self.vpc)[
                "GroupId"
            ]
        )

    def plan(self, scope: Scope, narrow: Scope | None = None) -> LivePlan:
        return compute_live_plan(
            AccountInventory(self.ec2, self.elbv2, self.policy), self.policy, scope, narrow=narrow
        )

    def authorize(self, plan: Plan) -> None:
        """The first plan's rules, one call each (moto gives every permission of a call the
        first one's description)."""
        tags: Any = [
            {
                "ResourceType": "security-group-rule",
                "Tags": [{"Key": OWNER_TAG_KEY, "Value": DEFAULT_OWNER}],
            }
        ]
        for step in plan.steps:
            assert isinstance(step, Authorize)
            for rule in step.rules:
                doc = rule_to_dict(rule, with_identity=False)
                permission: Any = {
                    "IpProtocol": doc["IpProtocol"],
                    "FromPort": doc["FromPort"],
                    "ToPort": doc["ToPort"],
                    "UserIdGroupPairs": [
                        {
                            "GroupId": doc["ReferencedGroupInfo"]["GroupId"],
                            "Description": doc["Description"],
                        }
                    ],
                }
                self.ec2.authorize_security_group_ingress(
                    GroupId=step.group_id,
                    IpPermissions=[permission],
                    TagSpecifications=tags,
                )


def count_calls(*clients: Any) -> Counter[str]:
    """API calls per "service operation", through botocore's event hooks."""
    calls: Counter[str] = Counter()
    lock = threading.Lock()  # target health is read by a few threads

    def hook(model: Any, **_: Any) -> None:
        with lock:
            calls[f"{model.service_model.service_name} {model.name}"] += 1

    for client in clients:
        client.meta.events.register("before-call", hook)
    return calls


def event_calls(load_balancers: int) -> dict[str, Any]:
    patches = moto_hooks.patch_ec2_fidelity()  # as the tests run moto (rule descriptions)
    try:
        with mock_aws():
            return _event_calls(load_balancers)
    finally:
        for patch in reversed(patches):
            patch.undo()


def _event_calls(load_balancers: int) -> dict[str, Any]:
    account = Account(load_balancers, backend=False)
    n = 0
    tg = account.target_groups[n]
    account.elbv2.register_targets(
        TargetGroupArn=tg, Targets=[{"Id": account.instances(n)[2], "Port": 32500}]
    )
    event = Scope(target_group_arns=frozenset({tg}))
    figures: dict[str, Any] = {"load_balancers": load_balancers}
    plans: dict[str, Any] = {}
    for name, narrow in (("narrow", event), ("full", None)):
        calls = count_calls(account.ec2, account.elbv2)
        live = account.plan(event, narrow=narrow)
        assert isinstance(live.result, Plan), live.result
        plans[name] = live.result.steps
        figures[name] = {
            "ec2_describes": sum(n for op, n in calls.items() if op.startswith("ec2 ")),
            "elbv2_calls": sum(n for op, n in calls.items() if op.startswith("elbv2 ")),
            "by_operation": dict(sorted(calls.items())),
        }
        for client in (account.ec2, account.elbv2):
            client.meta.events.unregister("before-call")
    assert len(plans["narrow"]) == 1 and plans["narrow"][0] in plans["full"], plans
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load-balancers", type=int, default=100)
    args = parser.parse_args()
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        os.environ.setdefault(name, value)
    print(json.dumps(event_calls(args.load_balancers), indent=2))
