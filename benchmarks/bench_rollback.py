"""A large change denied in its last batch, rolled back on the real ASL (docs/architecture.md, "The plan store").

A first reconcile of GROUPS node groups x 5 NodePorts (the large world) whose authorize is
denied in the group that sorts last (so in the authorize phase's last batch) must end
"Rolled back to the old rules" with every group exactly as before. Reported: how it ended,
the largest execution state (from the execution's history, as Step Functions counts it
against its 256 KiB), and the rollback's model time (`local/model_time.py`: each EC2 call
0.15 s, each DynamoDB call 0.01 s, the write pacer's waits at WritesPerSecond 5, a Map's
items three at a time) against its function's timeout.

Run: .venv/bin/python -m benchmarks.bench_rollback [--groups 2000]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from sg_reconciler.core.pacing import pacing_for
from sg_reconciler_tools.demo.large_world import build_large_world, deny_authorize_in, group_rules
from sg_reconciler_tools.demo.play import TEMPLATE, quiet_handlers, run_planner
from sg_reconciler_tools.demo.world import scheduled_event
from sg_reconciler_tools.local import LocalRuntime
from sg_reconciler_tools.local.model_time import InvocationClock, longest, makespan

WRITES_PER_SECOND = 5.0
RUN_TIMEOUT = 7200
ROLLBACK_FUNCTION = "RollBackFunction"


def denied_in_the_last_batch(groups: int, ports: int = 5) -> dict[str, Any]:
    """The run above; returns its figures."""
    quiet_handlers()
    parameters = {"WritesPerSecond": f"{WRITES_PER_SECOND:g}"}
    with LocalRuntime(TEMPLATE, parameters=parameters) as runtime:
        world = build_large_world(runtime, groups=groups, ports=ports)
        before = group_rules(world)
        timeout = next(
            f.timeout_seconds for f in runtime.functions if f.logical_id == ROLLBACK_FUNCTION
        )
        started = time.monotonic()
        deny = deny_authorize_in(sorted(world.node_groups)[-1])
        try:
            with InvocationClock(runtime) as clock:
                execution = run_planner(world, scheduled_event())
                if execution is None:
                    raise RuntimeError("the change started no execution")
                described = runtime.wait_for(execution, RUN_TIMEOUT)
        finally:
            deny.undo()
        seconds = round(time.monotonic() - started, 1)
        after = group_rules(world)
        size, state = runtime.largest_state(execution)
        entered = [n for n, kind in runtime.history(execution) if kind.endswith("StateEntered")]
        rollback = clock.of(ROLLBACK_FUNCTION)
        items = [i.seconds for i in rollback if "batch" in (i.event or {})]
        others = [i.seconds for i in rollback if "batch" not in (i.event or {})]
        concurrency = pacing_for(WRITES_PER_SECOND).concurrency
        calls: dict[str, int] = {}
        for invocation in rollback:
            for operation, count in invocation.calls.items():
                calls[operation] = calls.get(operation, 0) + count
        return {
            "groups": groups,
            "rules": groups * ports,
            "status": described["status"],
            "error": described.get("error", ""),
            "final_state": entered[-1] if entered else "",
            "groups_as_before": after == before,
            "groups_changed": sum(1 for g in before if before[g] != after[g]),
            "largest_state_bytes": size,
            "largest_state": state,
            "transitions": runtime.transitions(execution),
            "rollback_model_seconds": round(makespan(items, concurrency) + sum(others), 1),
            "rollback_invocations": len(rollback),
            "longest_rollback_invocation_seconds": round(longest(rollback), 1),
            "rollback_function_timeout": timeout,
            "rollback_calls": dict(sorted(calls.items())),
            "wall_seconds": seconds,
        }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=2000)
    args = parser.parse_args()
    print(json.dumps(denied_in_the_last_batch(args.groups), indent=2))
