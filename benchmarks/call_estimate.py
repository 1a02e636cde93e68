"""Describe calls of one full inventory read, from AWS page sizes (for the benchmarks).

The reader's batching (layers/sg_reconciler/adapters/inventory.py) decides these counts;
this estimate mirrors it for account sizes no test world reaches, reading the reader's page
sizes at call time (a test shrinks them to page a small world).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sg_reconciler.adapters import inventory as reader


@dataclass(frozen=True)
class WorldSize:
    """Object counts of an account, to estimate the describe calls a full read costs."""

    load_balancers: int
    managed_load_balancers: int
    target_groups: int
    managed_target_groups: int
    instances: int
    ip_targets: int
    rule_groups: int  # groups whose rules are read
    rules: int
    groups: int  # groups described (rule groups and rule sources)
    owned_rules: int


def describe_call_estimate(size: WorldSize) -> dict[str, int]:
    """Describe calls of one full read, from AWS page sizes, assuming objects spread evenly.

    `describe_target_health` is reported apart: it has no batch form.
    """

    def paged(objects: int, per_page: int) -> int:
        return max(1, math.ceil(objects / per_page))

    def filtered(ids: int, objects: int, per_page: int) -> int:
        if ids == 0:
            return 0
        batches = math.ceil(ids / reader.FILTER_CHUNK)
        return sum(paged(math.ceil(objects / batches), per_page) for _ in range(batches))

    batched = {
        "DescribeLoadBalancers": paged(size.load_balancers, reader.ELB_PAGE_SIZE),
        "DescribeTags": math.ceil(size.load_balancers / reader.TAG_CHUNK),
        "DescribeTargetGroups": paged(size.target_groups, reader.ELB_PAGE_SIZE)
        if size.managed_load_balancers
        else 0,
        "DescribeInstances": filtered(size.instances, size.instances, reader.EC2_PAGE_SIZE),
        "DescribeNetworkInterfaces": filtered(
            size.ip_targets, size.ip_targets, reader.EC2_PAGE_SIZE
        ),
        "DescribeSecurityGroupRules": paged(size.owned_rules, reader.EC2_PAGE_SIZE)
        + filtered(size.rule_groups, size.rules, reader.EC2_PAGE_SIZE),
        "DescribeSecurityGroups": filtered(size.groups, size.groups, reader.EC2_PAGE_SIZE),
    }
    batched["batched_total"] = sum(batched.values())
    batched["DescribeTargetHealth"] = size.managed_target_groups
    return batched
