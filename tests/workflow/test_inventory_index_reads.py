"""A smaller version of the benchmark's scheduled execution and event-driven one-target
change (benchmarks/bench_locked_reads.py), under AWS's read buckets (`AwsReadLimits`) on the
real ASL, with the inventory index: both reach `Changes applied` with no throttled answer,
and the planner reads a slice of the account on the schedule and a few describes for the
event (docs/architecture.md, "The inventory index")."""

from __future__ import annotations

from benchmarks.bench_locked_reads import measure

TARGET_GROUPS = 24


def test_scheduled_and_event_driven_changes_read_a_slice_and_a_few_describes() -> None:
    # Given 24 target groups in the controller's layout (4 per NLB, a shared backend group),
    # reconciled once (which fills the index), ReadsPerSecond 10
    figures = measure(TARGET_GROUPS, 4, 10.0)
    scheduled, event = figures["scheduled"], figures["event"]
    # When the schedule finds a Service whose events were missed
    assert scheduled["status"] == "applied", scheduled
    planner = scheduled["planner"]["by_operation"]
    # Then it lists the account and reads the targets of the missed target group and of a
    # slice, not of every target group; under the locks nothing of ELBv2 (nothing revoked
    # takes traffic away)
    assert planner["elbv2 DescribeTargetHealth"] < TARGET_GROUPS / 4, planner
    assert scheduled["under_the_locks"]["elbv2_describes"] == 0
    # When one target is registered on a new port, with its event
    assert event["status"] == "applied", event
    # Then the planner reads the event's target group only, whatever the account's size
    assert event["planner"]["elbv2_describes"] <= 2, event["planner"]
    assert event["under_the_locks"]["elbv2_describes"] == 0
    for run in (scheduled, event):
        assert run["planner"]["throttled"] == 0 and run["under_the_locks"]["throttled"] == 0
