"""Benchmark: the ELBv2 describes under the locks of a revoke that takes traffic away (a
Service deleted: its NodePort no longer used), under AWS's read buckets (`AwsReadLimits`, on
a model clock), in the AWS Load Balancer Controller's layout, on this tree's code and on the
code before the revoke's closure was chosen from the inventory index (docs/architecture.md, Reads).

    .venv/bin/python -m benchmarks.bench_revoke_reads [--target-groups 1000] [--before REF]

Account: `benchmarks/bench_locked_reads.py`'s (one cluster, two node groups, the shared
backend group on every NLB, `--per-lb` NodePort target groups per NLB, the controller's one
range per node group). The inventory index is filled from one read of the account (as its
first runs would, before the read model is on), and the account reconciled. Then the top
Service is deleted (its listener and target group) with its events missed, and the
drift-repair schedule plans it: each node group's range shrinks by that port (authorize the
narrower rule, revoke the wider one), a revoke that takes traffic away. Reported: the
planner's and the steps' (refresh to the end) ELBv2 and EC2 describes, throttled answers
and model seconds, and how the execution ended.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sg_reconciler_tools.demo.play import TEMPLATE, quiet_handlers, run_planner
from sg_reconciler_tools.demo.world import DemoWorld, scheduled_event
from sg_reconciler_tools.local import LocalRuntime
from sg_reconciler_tools.local.rate_limit import AwsReadLimits, ScaledClock

from benchmarks.bench_locked_reads import (
    FIRST_PORT,
    SCALE,
    TIMEOUT,
    before_and_after_cli,
    build,
    execute,
    on_code_of,
)

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "193fdeb"  # main before the revoke's closure came from the index


def seed_index(world: DemoWorld) -> int:
    """The index as its first runs leave it: every load balancer, target group and target
    from one read of the account (moto, no read model); how many entries."""
    from sg_reconciler.adapters.index_table import IndexTable
    from sg_reconciler.adapters.inventory import AccountInventory
    from sg_reconciler.app.indexed_plan import load_view, write_entries
    from sg_reconciler.core.index_events import Version
    from sg_reconciler.core.inventory_index import (
        Entry,
        load_balancer_entry,
        target_entry,
        target_group_entry,
        target_key,
    )
    from sg_reconciler.policy import parse_policy

    runtime = world.runtime
    read = AccountInventory(
        runtime.clients.ec2, runtime.clients.elbv2, parse_policy(world.policy)
    ).read()
    at = Version.of_read(time.time())
    entries: dict[tuple[str, str], Entry] = {}
    for lb in read.load_balancers:
        entries[("lb", lb.arn)] = load_balancer_entry(lb, at)
    for tg in read.target_groups:
        entries[("tg", tg.arn)] = target_group_entry(tg, at)
        for t in tg.targets:
            key = target_key(tg.target_type, tg.vpc_id, t.target_id)
            entries[("target", key)] = target_entry(key, t.group_ids, t.instance_id, at)
    table = IndexTable(runtime.clients.dynamodb, runtime.ref("IndexTable"))
    return write_entries(table, list(entries.values()), load_view(table))


def delete_service(world: DemoWorld, port: int) -> None:
    """What the controller does when a Service goes: its listener, then its target group."""
    elbv2 = world.runtime.clients.elbv2
    tg = world.target_groups.pop(port)
    for lb in elbv2.describe_target_groups(TargetGroupArns=[tg])["TargetGroups"][0][
        "LoadBalancerArns"
    ]:
        for listener in elbv2.describe_listeners(LoadBalancerArn=lb)["Listeners"]:
            if any(a.get("TargetGroupArn") == tg for a in listener["DefaultActions"]):
                elbv2.delete_listener(ListenerArn=listener["ListenerArn"])
    elbv2.delete_target_group(TargetGroupArn=tg)


def measure(target_groups: int, per_lb: int, reads_per_second: float) -> dict[str, Any]:
    quiet_handlers()
    parameters = {"ReadsPerSecond": str(reads_per_second)}
    with LocalRuntime(TEMPLATE, parameters=parameters) as runtime:
        world = build(runtime, target_groups, per_lb)
        seeded = seed_index(world)
        first = run_planner(world, scheduled_event())
        if first is None or runtime.wait_for(first, TIMEOUT)["status"] != "SUCCEEDED":
            raise RuntimeError("the first reconcile did not succeed")
        delete_service(world, FIRST_PORT + target_groups - 1)
        with AwsReadLimits(runtime, clock=ScaledClock(SCALE)) as model:
            revoke = execute(world, model, scheduled_event())
    return {
        "target_groups": target_groups,
        "per_lb": per_lb,
        "reads_per_second": reads_per_second,
        "index_entries": seeded,
        "revoke": revoke,
    }


def measure_before(
    target_groups: int, per_lb: int, reads_per_second: float, ref: str = BEFORE
) -> dict[str, Any]:
    """`measure` on the code of `ref` (`bench_locked_reads.on_code_of`)."""
    return on_code_of(ref, "benchmarks.bench_revoke_reads", target_groups, per_lb, reads_per_second)


def main() -> None:
    before_and_after_cli(
        __doc__.splitlines()[0],
        measure,
        measure_before,
        target_groups=1000,
        reads_per_second=1.0,
        before=BEFORE,
    )


if __name__ == "__main__":
    main()
