"""Benchmark: the planner with the inventory index at an account's size, under AWS's read
buckets (`AwsReadLimits`, on a model clock), as docs/architecture.md, The inventory index, describes.

    .venv/bin/python -m benchmarks.bench_index [--target-groups 100] [--per-lb 4]
        [--reads-per-second 1]

Account: `bench_locked_reads.build` (one cluster, two node groups, the controller's shared
backend group on every NLB), `--per-lb` target groups per NLB: 4 is the controller's layout,
1 a group per load balancer. Then, at the read pace:
- fill: scheduled runs from an empty index until it holds every target group (how many);
- steady state: the index aged as 48 runs of a 15-minute schedule leave it within the
  default 12-hour verification period (the newest slice 15 minutes old, the oldest within
  the period), then a Service whose events were missed: the scheduled execution to the end
  (its planner's ELBv2 describes are the listing, the slice and the missed target group);
- event: one target registered on a new port, with its event: the execution to the end.
Each gives ELBv2 and EC2 describes, throttled answers and model seconds, for the planner
(against its timeout) and under the locks; the world's build time in wall seconds.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from dataclasses import replace
from typing import Any

from sg_reconciler.adapters.index_table import IndexTable
from sg_reconciler.app.indexed_plan import load_view
from sg_reconciler.core.index_events import Version
from sg_reconciler.core.inventory_index import KINDS, slice_size
from sg_reconciler_tools.demo.play import TEMPLATE, quiet_handlers, run_planner
from sg_reconciler_tools.demo.world import DemoWorld, scheduled_event
from sg_reconciler_tools.local import LocalRuntime
from sg_reconciler_tools.local.rate_limit import AwsReadLimits, ScaledClock

from benchmarks.bench_locked_reads import (
    FIRST_PORT,
    SCALE,
    TIMEOUT,
    build,
    execute,
    new_port_event,
    service,
)

SCHEDULE_SECONDS = 900.0  # the drift-repair schedule's rate (template.yaml)
PERIOD_SECONDS = 43_200.0  # VerificationPeriodSeconds' default
PLANNER_TIMEOUT = 300.0  # PlannerFunction's Timeout (template.yaml)
MAX_FILL_RUNS = 60


def index_of(world: DemoWorld) -> IndexTable:
    return IndexTable(world.runtime.clients.dynamodb, world.runtime.ref("IndexTable"))


def fill(world: DemoWorld, model: AwsReadLimits) -> dict[str, Any]:
    """Scheduled runs from an empty index until it holds every target group."""
    wanted = set(world.target_groups.values())
    start = dict(model.stats.calls)
    began = model.now()
    runs = 0
    while runs < MAX_FILL_RUNS:
        runs += 1
        arn = run_planner(world, scheduled_event())
        if arn is not None and world.runtime.wait_for(arn, TIMEOUT)["status"] != "SUCCEEDED":
            raise RuntimeError(f"fill run {runs} did not succeed")
        if wanted <= set(load_view(index_of(world)).target_groups):
            break
    calls = {k: n - start.get(k, 0) for k, n in model.stats.calls.items()}
    return {
        "runs": runs,
        "elbv2_describes": sum(n for k, n in calls.items() if k.startswith("elbv2 ")),
        "seconds": round(model.now() - began, 1),
    }


def age(world: DemoWorld, period: float = PERIOD_SECONDS) -> int:
    """Age the index as the schedule leaves it in steady state: the target groups and load
    balancers verified in slices, one per 15-minute run, the newest slice one run ago and the
    oldest still within the period (a few seconds of room); the interfaces one run ago. How
    many entries were rewritten."""
    index = index_of(world)
    now = time.time()
    runs = period / SCHEDULE_SECONDS
    step = (period - SCHEDULE_SECONDS - 60.0) / max(1.0, runs - 1)  # the oldest: 60 s of room
    written = 0
    for kind in KINDS:
        entries = sorted(index.entries(kind), key=lambda e: e.key)
        per = slice_size(len(entries), period, SCHEDULE_SECONDS) if kind != "target" else 0
        for n, entry in enumerate(entries):
            slot = n // per if per else 0
            verified = Version.of_read(now - SCHEDULE_SECONDS - slot * step)
            if index.put(replace(entry, verified=verified), entry.version):
                written += 1
    return written


def measure(target_groups: int, per_lb: int, reads_per_second: float) -> dict[str, Any]:
    quiet_handlers()
    parameters = {"ReadsPerSecond": str(reads_per_second)}
    with LocalRuntime(TEMPLATE, parameters=parameters) as runtime:
        began = time.monotonic()
        world = build(runtime, target_groups, per_lb)
        built = time.monotonic() - began
        with AwsReadLimits(runtime, clock=ScaledClock(SCALE)) as model:
            filled = fill(world, model)
            aged = age(world)
            top = FIRST_PORT + target_groups
            service(world, world.load_balancer_arn, top, 80 + per_lb)  # its events missed
            scheduled = execute(world, model, scheduled_event())
            event = new_port_event(world, model, top + 1)
    health = scheduled["planner"]["by_operation"].get("elbv2 DescribeTargetHealth", 0)
    slice_read = max(1, health - 1)  # besides the missed target group
    return {
        "target_groups": target_groups,
        "per_lb": per_lb,
        "load_balancers": math.ceil(target_groups / per_lb),
        "reads_per_second": reads_per_second,
        "build_seconds": round(built, 1),
        "fill": filled,
        "aged_entries": aged,
        "scheduled": scheduled,
        "scheduled_elbv2": scheduled["planner"]["elbv2_describes"]
        + scheduled["under_the_locks"]["elbv2_describes"],
        "period_hours": round(
            math.ceil((target_groups + 1) / slice_read) * SCHEDULE_SECONDS / 3600, 1
        ),
        "event": event,
        "planner_timeout": PLANNER_TIMEOUT,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target-groups", type=int, default=100)
    parser.add_argument("--per-lb", type=int, default=4)
    parser.add_argument("--reads-per-second", type=float, default=1.0)
    args = parser.parse_args()
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        os.environ.setdefault(name, value)
    figures = measure(args.target_groups, args.per_lb, args.reads_per_second)
    print(json.dumps(figures, separators=(",", ":")))


if __name__ == "__main__":
    main()
