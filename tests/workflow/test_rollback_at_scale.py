"""A large change denied in its last batch rolls back completely, and one whose revokes are
denied reports its leftovers in counts, on the real ASL (docs/architecture.md, "The plan store"; invariants 4 and
13).

Before, "Roll back the rules this execution added" handled every group in one invocation of
a 120 s function and kept every rule id it revoked in the execution state: at 300 groups 93 s
of its 120 s on the model below (0.15 s an EC2 call) and a 39 KB state; at 2,000 groups 623 s
(on AWS: a timeout, "Stopped during rollback") and 250 KB, a few groups short of Step
Functions' 256 KiB. Now it is a Map over the authorize phase's batches, each item within its
timeout, with nothing of its result in the state. The 2,000-group version is a BENCHMARKS.md
row (`python -m benchmarks.bench_rollback`).
"""

from __future__ import annotations

from typing import Any

from sg_reconciler.core.pacing import pacing_for
from sg_reconciler_tools.demo.large_world import build_large_world, deny_authorize_in, group_rules
from sg_reconciler_tools.demo.play import TEMPLATE, quiet_handlers, run_planner
from sg_reconciler_tools.demo.world import scheduled_event
from sg_reconciler_tools.local import Fault, FaultInjector, LocalRuntime
from sg_reconciler_tools.local.model_time import InvocationClock, makespan

TIMEOUT = 900
WRITES_PER_SECOND = 5.0


def denied_in_the_last_batch(groups: int) -> dict[str, Any]:
    """A first reconcile of `groups` x 5 NodePorts whose last group's authorize is denied."""
    quiet_handlers()
    with LocalRuntime(TEMPLATE, parameters={"WritesPerSecond": "5"}) as runtime:
        world = build_large_world(runtime, groups=groups)
        before = group_rules(world)
        deny = deny_authorize_in(sorted(world.node_groups)[-1])
        try:
            with InvocationClock(runtime) as clock:
                execution = run_planner(world, scheduled_event())
                assert execution is not None, "the change must start an execution"
                described = runtime.wait_for(execution, TIMEOUT)
        finally:
            deny.undo()
        entered = [n for n, kind in runtime.history(execution) if kind.endswith("StateEntered")]
        items = [i for i in clock.of("RollBackFunction") if "batch" in i.event]
        return {
            "described": described,
            "entered": entered,
            "as_before": group_rules(world) == before,
            "largest_state": runtime.largest_state(execution),
            "items": items,
            "timeout": next(
                f.timeout_seconds for f in runtime.functions if f.logical_id == "RollBackFunction"
            ),
        }


def test_a_large_change_denied_in_its_last_batch_is_rolled_back_with_a_flat_state() -> None:
    # Given changes of 20 and of 300 groups (100 and 1,500 new rules) whose authorize is
    # denied in the group that sorts last, so in the authorize phase's last batch
    small = denied_in_the_last_batch(20)
    large = denied_in_the_last_batch(300)
    for run in (small, large):
        # Then each ends "Rolled back to the old rules" with every group exactly as before
        assert run["described"]["status"] == "FAILED"
        assert run["described"]["error"] == "RolledBack", run["described"].get("cause")
        assert run["entered"][-1] == "Rolled back to the old rules"
        assert "Sum up the rollback" in run["entered"]
        assert run["as_before"]
    assert "revoked the 1495 rule(s) this execution had added" in large["described"]["cause"]
    # and the largest state is the same size give or take the batch numbers (before: every
    # revoked rule id was kept, about 40 KB at 1,425 rules)
    (small_bytes, _), (large_bytes, state) = small["largest_state"], large["largest_state"]
    assert large_bytes < small_bytes + 512, (large["largest_state"], small["largest_state"])
    assert large_bytes < 4 * 1024, state
    # And the rollback ran as one paced item per batch of up to 20 groups, each well within
    # its function's timeout on the model (EC2 calls 0.15 s, the pacer at 5 writes a second)
    items = large["items"]
    assert len(items) >= 300 // 20
    assert max(i.seconds for i in items) < large["timeout"] / 2, [i.seconds for i in items]
    # (the whole rollback takes about as long as its writes at the deployment's rate)
    concurrency = pacing_for(WRITES_PER_SECOND).concurrency
    writes = sum(i.calls["RevokeSecurityGroupIngress"] for i in items)
    assert writes == 299
    assert makespan([i.seconds for i in items], concurrency) < 2 * writes / WRITES_PER_SECOND


def test_a_large_change_whose_revokes_are_denied_reports_its_leftovers_in_counts() -> None:
    quiet_handlers()
    with LocalRuntime(TEMPLATE) as runtime:
        # Given 60 node groups reconciled, then a NodePort Service deleted (one stale rule in
        # every group) while every revoke is denied
        world = build_large_world(runtime, groups=60)
        first = run_planner(world, scheduled_event())
        assert first is not None
        assert runtime.wait_for(first, TIMEOUT)["status"] == "SUCCEEDED"
        elbv2 = runtime.clients.elbv2
        (listener,) = [
            item
            for item in elbv2.describe_listeners(LoadBalancerArn=world.load_balancer_arn)[
                "Listeners"
            ]
            if item["Port"] == 8000
        ]
        elbv2.delete_listener(ListenerArn=listener["ListenerArn"])
        target_group = listener["DefaultActions"][0]["TargetGroupArn"]
        elbv2.delete_target_group(TargetGroupArn=target_group)
        denied = Fault("ec2", "RevokeSecurityGroupIngress", "UnauthorizedOperation", count=10_000)
        with FaultInjector(denied):
            execution = run_planner(world, scheduled_event())
            assert execution is not None
            described = runtime.wait_for(execution, TIMEOUT)
        # Then it stops with its stale rules left, checked in three batches of 20 groups, and
        # its cause counts them all and names ten (before: every id, in the state and cause)
        assert described["error"] == "RevokeIncomplete", described.get("cause")
        cause = described["cause"]
        assert "every desired rule of the changed groups is in place" in cause
        assert "60 stale rule(s) left" in cause and ", ... and 50 more;" in cause
        checks = [
            name
            for name, kind in runtime.history(execution)
            if kind == "TaskStateEntered" and name == "Check a batch of groups for leftovers"
        ]
        assert len(checks) == 3
        size, state = runtime.largest_state(execution)
        assert size < 4 * 1024, (size, state)
