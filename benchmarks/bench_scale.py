"""Scale figures on the local runtime: state size and transitions against the number of rule
changes, a large change under EC2's simulated rate limit, and AWS calls per change.

Run: .venv/bin/python -m benchmarks.bench_scale [--quick | --first-reconcile GROUPS]
(--quick: smaller sizes, for a look in a minute; `make bench` runs the full sizes, up to
the acceptance run of 10,000 changes; --first-reconcile 2000: only the first reconcile of GROUPS x 5
rule changes, that acceptance run of 10,000 changes, about 8 minutes on moto here)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import Counter
from typing import Any

from sg_reconciler.core.pacing import pacing_for
from sg_reconciler.core.phases import batch_refs, phase_batches
from sg_reconciler_tools.demo.large_world import build_large_world
from sg_reconciler_tools.demo.play import TEMPLATE, quiet_handlers, reconcile, run_planner
from sg_reconciler_tools.demo.world import build_world, scheduled_event
from sg_reconciler_tools.local import LocalRuntime, interception
from sg_reconciler_tools.local.rate_limit import Ec2RateLimit

PORTS = 5  # rule changes per group in the state-size runs
RUN_TIMEOUT = 3600
COUNTED = {
    "ec2": (
        "AuthorizeSecurityGroupIngress",
        "RevokeSecurityGroupIngress",
        "ModifySecurityGroupRules",
        "DescribeSecurityGroupRules",
        "DescribeSecurityGroups",
        "DescribeInstances",
        "DescribeNetworkInterfaces",
        "DescribeManagedPrefixLists",
        "CreateTags",
    ),
}


def first_reconcile(groups: int, ports: int = PORTS) -> dict[str, Any]:
    """A scheduled first reconcile of `groups` x `ports` rule changes, with the deployed
    settings (WritesPerSecond 5: three items at once; the pacer's waits are recorded, not
    slept, as the runtime's Wait states are)."""
    quiet_handlers()
    counts: Counter[str] = Counter()

    def count(service: str, operation: str, proceed: interception.Proceed) -> Any:
        counts[operation] += 1
        return proceed()

    with LocalRuntime(TEMPLATE, parameters={"WritesPerSecond": "5"}) as runtime:
        world = build_large_world(runtime, groups=groups, ports=ports)
        patches = [
            interception.intercept_api_call("ec2", op, count, layer=interception.OBSERVER_LAYER)
            for op in COUNTED["ec2"]
        ]
        try:
            started = time.monotonic()
            execution = run_planner(world, scheduled_event())
            if execution is None:
                raise RuntimeError("the first reconcile started no execution")
            described = runtime.wait_for(execution, RUN_TIMEOUT)
            seconds = round(time.monotonic() - started, 1)
        finally:
            for patch in patches:
                patch.undo()
        size, state = runtime.largest_state(execution)
        output = json.loads(described.get("output") or "{}")
        entered = [name for name, kind in runtime.history(execution) if kind.endswith("Entered")]
        return {
            "groups": groups,
            "changes": groups * ports,
            "status": described["status"],
            "outcome": output.get("status", ""),
            "final_state": entered[-1] if entered else "",
            "rules_authorized": output.get("summary", {}).get("rules_authorized", 0),
            "planned_calls": output.get("summary", {}).get("calls", 0),
            "ec2_calls": dict(sorted(counts.items())),
            "largest_state_bytes": size,
            "largest_state": state,
            "transitions": runtime.transitions(execution),
            "seconds": seconds,
        }


def serialized_state_bytes(changes: int, groups: int) -> int:
    """The largest state of an execution of `changes` rule changes over `groups` groups, from
    the same serialization the steps use (for sizes too large to run on moto here): the
    state after the revoke Map, with every batch reference and Map result in it."""
    item = {"group_id": "sg-0123456789abcdef0", "steps": []}
    doc = {"authorize": [item] * groups, "ordered": [], "revoke": [item] * groups}
    refs = batch_refs(phase_batches(doc, pacing_for().concurrency))
    per_batch: dict[str, Any] = {}  # a Map item's output on success
    state = {
        "plan_id": "0" * 32 + "-20261201T1200",
        "plan_ref": {"groups_key": "0" * 32, "groups": groups, "calls": 2 * groups},
        "checked": {"plan_id": "0" * 32, "groups_key": "0" * 32, "groups": groups},
        "locks": {"held": groups},
        "work": {
            "result": {
                "changed": True,
                "batches": {"authorize": refs["authorize"], "ordered": refs["ordered"]},
                "settle_seconds": 10,
                "owner": "sg-reconciler",
                "pacing": {"concurrency": 3, "writes_per_second": 5.0},
                "summary": {
                    "groups": groups,
                    "rules_authorized": changes,
                    "rules_revoked": changes,
                    "rules_modified": 0,
                    "calls": 2 * groups,
                    "notes": ["n" * 200] * 11,
                    "refused": [],
                    "held": "",
                },
                "revokes": {"revoke": refs["revoke"], "deferred": ""},
            }
        },
        "authorized": [per_batch] * len(refs["authorize"]),
        "visible": {"verified": {"mode": "visible", "checked_rules": changes}},
        "ordered": [],
        "revoked": [per_batch] * len(refs["revoke"]),
        "final": {"verified": {"mode": "final", "checked_rules": changes}},
    }
    return len(json.dumps(state).encode())


def rate_limited(groups: int, writes_per_second: str, time_scale: float) -> dict[str, Any]:
    """A first reconcile of `groups` one-rule groups under a 50/5-per-second bucket."""
    quiet_handlers()
    with LocalRuntime(TEMPLATE, parameters={"WritesPerSecond": writes_per_second}) as runtime:
        world = build_large_world(runtime, groups=groups, ports=1)
        with Ec2RateLimit(
            runtime, capacity=50, refill_per_second=5.0, time_scale=time_scale
        ) as limit:
            execution = run_planner(world, scheduled_event())
            if execution is None:
                raise RuntimeError("no execution")
            described = runtime.wait_for(execution, RUN_TIMEOUT)
        return {
            "status": described["status"],
            "error": described.get("error", ""),
            **limit.stats.as_dict(),
            "floor": round(limit.floor(), 1),
        }


def calls_per_change() -> dict[str, Any]:
    """AWS calls of an event-driven two-group #3639 change (the demo's), by operation."""
    quiet_handlers()
    counts: Counter[str] = Counter()

    def count(service: str, operation: str, proceed: interception.Proceed) -> Any:
        counts[operation] += 1
        return proceed()

    with LocalRuntime(TEMPLATE) as runtime:
        world = build_world(runtime)
        reconcile(world)
        events = world.add_service(32500)
        patches = [
            interception.intercept_api_call("ec2", op, count, layer=interception.OBSERVER_LAYER)
            for op in COUNTED["ec2"]
        ]
        try:
            from sg_reconciler_tools.demo.play import deliver_events

            execution = run_planner(world, deliver_events(world, events))
            if execution is None:
                raise RuntimeError("no execution")
            runtime.wait_for(execution, RUN_TIMEOUT)
        finally:
            for patch in patches:
                patch.undo()
    writes = sum(counts[op] for op in COUNTED["ec2"][:3])
    describes = counts["DescribeSecurityGroupRules"]
    return {
        "groups": 2,
        "writes": writes,
        "describe_security_group_rules": describes,
        "other_reads": {op: counts[op] for op in COUNTED["ec2"][4:] if counts[op]},
    }


def run_benchmark(quick: bool = False) -> dict[str, Any]:
    sizes = (2, 20, 200) if quick else (2, 200, 1000, 2000)
    curve = [first_reconcile(g) for g in sizes]
    small = [first_reconcile(g, ports=1) for g in (1, 10, 100)]
    transitions = small + [run for run in curve if run["groups"] > 100]
    serialized = {n: serialized_state_bytes(n, n // PORTS) for n in (10, 1_000, 10_000, 50_000)}
    groups = 150 if quick else 500
    runs = 1 if quick else 3
    paced = [rate_limited(groups, "5", 5.0) for _ in range(runs)]
    unpaced = [rate_limited(groups, "1000", 5.0)]
    return {
        "curve": curve,
        "transitions": [(t["groups"], t["transitions"]) for t in transitions],
        "serialized": serialized,
        "rate_limit": {"groups": groups, "paced": paced, "unpaced": unpaced},
        "calls": calls_per_change(),
    }


def summary(figures: dict[str, Any]) -> dict[str, Any]:
    paced = figures["rate_limit"]["paced"]
    applied = sum(1 for r in paced if r["status"] == "SUCCEEDED")
    ratio = statistics.median(r["seconds"] / r["floor"] for r in paced if r["floor"])
    return {"applied": f"{applied} of {len(paced)}", "median_over_floor": round(ratio, 2)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--first-reconcile", type=int, metavar="GROUPS", help="only this run")
    args = parser.parse_args()
    if args.first_reconcile:
        print(json.dumps(first_reconcile(args.first_reconcile), indent=2))
    else:
        figures = run_benchmark(args.quick)
        print(json.dumps({**figures, "summary": summary(figures)}, indent=2))
