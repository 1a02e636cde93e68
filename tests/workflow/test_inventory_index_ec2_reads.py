"""What an event-driven one-target change reads of EC2 in the planner, at two account sizes
(at most two describes for its one changed group, whatever the account's size,
docs/limits.md): the controller's layout, where every
load balancer has a group of its own beside the shared backend group, and the target
registered on a new port grows the range of its node's group.
EC2 filters take 200 values a call; with 3 a call here, a read that grew with the load
balancers (their own groups) would show between 2 and 6 of them
(docs/architecture.md, "The inventory index")."""

from __future__ import annotations

import pytest
from sg_reconciler.adapters import inventory

from benchmarks.bench_locked_reads import measure

# The rules of the node groups (DescribeSecurityGroupRules) and the node and backend groups
# (DescribeSecurityGroups): once each, the event's narrow plan and its re-plan together. The
# target's interface and the groups that hold our rules come from the index (the schedule
# keeps them), so neither DescribeInstances nor the account's owned-rules scan is called.
EVENT_EC2_DESCRIBES = 2


def test_an_event_s_ec2_describes_do_not_grow_with_the_account(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given EC2 filters of 3 values a call, and the controller's layout at 8 and 24 target
    # groups (2 and 6 NLBs with a group each), reconciled, ReadsPerSecond 10
    monkeypatch.setattr(inventory, "FILTER_CHUNK", 3)
    planner = []
    for size in (8, 24):
        # When one target is registered on a new port, with its event
        event = measure(size, 4, 10.0, scheduled_run=False)["event"]
        assert event["status"] == "applied", event
        planner.append(event["planner"])
    # Then the planner's describes are the same at both sizes, two of EC2 and a few of ELBv2
    small, large = planner
    assert small["by_operation"] == large["by_operation"], planner
    assert large["ec2_describes"] == EVENT_EC2_DESCRIBES, large["by_operation"]
    assert large["elbv2_describes"] <= 10, large["by_operation"]
