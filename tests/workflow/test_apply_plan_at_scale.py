"""Plans of any size (invariant 13) and writes paced at EC2's rate limit, on the real ASL.

A first reconcile of a cluster with many node groups runs to "Changes applied" with every
state small and the same size whatever the number of groups; under a simulated EC2 token
bucket the change is paced and applied, not throttled into a rollback. The full-size runs
are BENCHMARKS.md rows: 500 groups under the bucket (`make bench`), and the
acceptance run of 10,000 rule changes over 2,000 groups (`python -m benchmarks.bench_scale --first-reconcile 2000`),
of which the 64-group reconcile here is the smaller version.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from sg_reconciler_tools.demo.large_world import LargeWorld, build_large_world
from sg_reconciler_tools.demo.play import TEMPLATE, quiet_handlers, run_planner
from sg_reconciler_tools.demo.world import scheduled_event
from sg_reconciler_tools.local import LocalRuntime
from sg_reconciler_tools.local.rate_limit import Ec2RateLimit

TIMEOUT = 300


def first_reconcile(world: LargeWorld) -> dict[str, Any]:
    execution = run_planner(world, scheduled_event())
    assert execution is not None, "the first reconcile must start an execution"
    return world.runtime.wait_for(execution, TIMEOUT)


def owned_rules(world: LargeWorld) -> int:
    ec2 = world.runtime.clients.ec2
    pages = ec2.get_paginator("describe_security_group_rules").paginate(
        Filters=[{"Name": "tag-key", "Values": ["sg-reconciler/owner"]}]
    )
    return sum(len(page["SecurityGroupRules"]) for page in pages)


@pytest.fixture
def runtime(request: pytest.FixtureRequest) -> Iterator[LocalRuntime]:
    quiet_handlers()
    parameters = getattr(request, "param", None) or {}
    with LocalRuntime(TEMPLATE, parameters=parameters) as started:
        yield started


def reconcile_fresh(groups: int) -> tuple[dict[str, Any], tuple[int, str], int, str]:
    """A first reconcile of `groups` x 5 NodePorts on a fresh runtime: how it ended, its
    largest state (bytes, state), the owned rules afterwards and its last state."""
    quiet_handlers()
    with LocalRuntime(TEMPLATE) as runtime:
        world = build_large_world(runtime, groups=groups)
        described = first_reconcile(world)
        arn = described["executionArn"]
        entered = [name for name, kind in runtime.history(arn) if kind.endswith("StateEntered")]
        return described, runtime.largest_state(arn), owned_rules(world), entered[-1]


def test_state_size_does_not_grow_with_the_number_of_groups() -> None:
    # Given first reconciles of 4 and of 64 groups (20 and 320 rule changes)
    small, small_state, _, small_end = reconcile_fresh(4)
    large, large_state, owned, large_end = reconcile_fresh(64)
    # Then both are applied, and the largest state is the same size give or take the batch
    # numbers (before: about 816 bytes more per rule change, 320 changes crossed 256 KiB)
    for described, end in ((small, small_end), (large, large_end)):
        assert described["status"] == "SUCCEEDED", described.get("cause")
        assert json.loads(described["output"])["status"] == "applied"
        assert end == "Changes applied"
    assert owned == 64 * 5
    assert large_state[0] < small_state[0] + 512, (large_state, small_state)
    assert large_state[0] < 8 * 1024, large_state


@pytest.mark.parametrize("runtime", [{"WritesPerSecond": "5"}], indirect=True)
def test_a_change_larger_than_ec2s_burst_is_paced_and_applied(runtime: LocalRuntime) -> None:
    # Given 150 groups to change in one execution: three times EC2's burst of 50 writes
    world = build_large_world(runtime, groups=150, ports=1)
    with Ec2RateLimit(runtime, capacity=50, refill_per_second=5.0) as limit:
        described = first_reconcile(world)
    # Then it is applied, paced near the floor (writes past the burst over the refill)
    assert described["status"] == "SUCCEEDED", described.get("cause")
    assert owned_rules(world) == 150 and limit.stats.writes == 150
    assert limit.floor() <= limit.stats.seconds <= 1.5 * limit.floor() + 10, limit.stats
    # and throttled answers, if any, are few: the pacer keeps under the refill
    assert limit.stats.throttled <= 10, limit.stats
