"""Workflow figures on the local runtime: burst coalescing, state transitions, unsafe window,
and the size of the Lambda code.

Run: .venv/bin/python -m benchmarks.bench_workflow
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

from sg_reconciler.adapters.inventory import AccountInventory
from sg_reconciler.app.live_plan import compute_live_plan
from sg_reconciler.core.plan import Plan
from sg_reconciler.policy import parse_policy
from sg_reconciler_tools.demo.play import (
    DENIED,
    TEMPLATE,
    deliver_events,
    quiet_handlers,
    reconcile,
    revoke_then_authorize,
    run_planner,
)
from sg_reconciler_tools.demo.world import DemoWorld, build_world
from sg_reconciler_tools.local import FaultInjector, InvariantMonitor, LocalRuntime

ROOT = Path(__file__).resolve().parents[1]
BURST = 100


def _stage(runtime: LocalRuntime) -> DemoWorld:
    world = build_world(runtime)
    reconcile(world)
    return world


def burst_coalescing() -> dict[str, Any]:
    """100 CloudTrail events (a Helm release adding 25 Services) -> how many executions."""
    with LocalRuntime(TEMPLATE) as runtime:
        world = _stage(runtime)
        events: list[dict[str, Any]] = []
        for n in range(BURST // 4):
            events += world.add_service(32001 + n)[:3]
            events.append(events[-1])  # EventBridge delivers at least once: one duplicate each
        events = events[:BURST]
        for start in range(0, len(events), 10):  # put_events takes 10 entries per call
            runtime.clients.events.put_events(
                Entries=[
                    {
                        "Source": e["source"],
                        "DetailType": e["detail-type"],
                        "Detail": json.dumps(e["detail"]),
                    }
                    for e in events[start : start + 10]
                ]
            )
        batch = deliver_events(world, [])  # the poller's batch (BatchSize 100, 20 s window)
        execution = run_planner(world, batch)
        executions = 0 if execution is None else 1
        if execution is not None:
            runtime.wait_for(execution, 120)
    return {"events": len(events), "batch": len(batch["Records"]), "executions": executions}


def transitions_per_change() -> dict[str, Any]:
    """State transitions ($0.025 per 1,000) of the success path, one group and two groups."""
    figures: dict[str, Any] = {}
    with LocalRuntime(TEMPLATE) as runtime:
        world = _stage(runtime)
        for label, instances in (("one_group", world.instances[:2]), ("two_groups", None)):
            world.add_service(32500 + len(figures), instances=instances)
            clients = runtime.clients
            parsed = parse_policy(world.policy)
            live = compute_live_plan(
                AccountInventory(clients.ec2, clients.elbv2, parsed), parsed, None
            )
            assert isinstance(live.result, Plan)
            name = f"bench-{label}"
            arn = runtime.start_execution(
                "ApplyPlanStateMachine", {"plan_id": name, "plan": live.result.to_dict()}, name
            )
            described = runtime.wait_for(arn, 120)
            assert described["status"] == "SUCCEEDED", described
            figures[label] = runtime.transitions(arn)
    return figures


def unsafe_window() -> dict[str, Any]:
    """States that deny traffic both the old and new rules allow, per #3639 change (2 groups)."""
    figures: dict[str, Any] = {}
    for fault in (False, True):
        for order in ("make_before_break", "revoke_first"):
            with LocalRuntime(TEMPLATE) as runtime:
                world = _stage(runtime)
                before = world.node_rules()
                world.add_service(32500)
                clients = runtime.clients
                parsed = parse_policy(world.policy)
                live = compute_live_plan(
                    AccountInventory(clients.ec2, clients.elbv2, parsed), parsed, None
                )
                assert isinstance(live.result, Plan)
                injector = FaultInjector(DENIED) if fault else FaultInjector()
                with (
                    InvariantMonitor(
                        clients.ec2, world.node_groups.values(), before, live.desired
                    ) as watch,
                    injector,
                ):
                    if order == "revoke_first":
                        revoke_then_authorize(world, live.result)
                    else:
                        arn = runtime.start_execution(
                            "ApplyPlanStateMachine",
                            {"plan_id": "bench", "plan": live.result.to_dict()},
                            "bench",
                        )
                        runtime.wait_for(arn, 120)
                unsafe = {v.snapshot for v in watch.violations}
                figures[f"{order}{'_denied' if fault else ''}"] = {
                    "states": len(watch.snapshots),
                    "unsafe_states": len(unsafe),
                    "gap_left_open": bool(watch.violations) and watch.last.index in unsafe,
                }
    return figures


def cold_start() -> dict[str, Any]:
    """The size of the code SAM packages (our layer plus the functions, zipped; Powertools
    excluded). The cold import of each handler as deployed is benchmarks/bench_cold_start.py."""
    figures: dict[str, Any] = {}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for folder in ("layers/sg_reconciler", "functions"):
            for path in sorted((ROOT / folder).rglob("*.py")):
                archive.write(path, path.relative_to(ROOT))
    figures["artifact_kib"] = round(len(buffer.getvalue()) / 1024, 1)
    return figures


def run_benchmark() -> dict[str, Any]:
    quiet_handlers()
    return {
        "burst": burst_coalescing(),
        "transitions": transitions_per_change(),
        "unsafe_window": unsafe_window(),
        "cold_start": cold_start(),
    }


def main() -> None:
    print(json.dumps(run_benchmark(), indent=2))


if __name__ == "__main__":
    main()
