"""The fault matrix's row for readiness that cannot be undone (docs/handover.md): `adopt --live` run
while the adopting execution settles, whose verification then fails and rolls back (handing
the adopted rules back). A world of its own (the controller's rules), beside the matrix."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from evidence.evidence_kit import MATRIX_ROWS, held_locks, live_plan, monitor_for, outcome_of
from sg_reconciler.app.steps import verify_rules
from sg_reconciler.errors import NotYetVisible
from sg_reconciler_tools.demo.play import TEMPLATE, quiet_handlers, reconcile
from sg_reconciler_tools.demo.world import build_world
from sg_reconciler_tools.local import LocalRuntime
from workflow.test_lbc_handover import check, controller_rule, first_group, handover_policy
from workflow.world_moves import set_policy


def test_adopt_live_during_the_adopting_runs_settle_waits_for_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    started = time.monotonic()
    quiet_handlers()
    real = verify_rules.verify

    def lagging(event: dict[str, Any], *rest: Any) -> dict[str, Any]:
        if event.get("mode") == "visible":
            raise NotYetVisible("describe still lags")
        return real(event, *rest)

    with LocalRuntime(TEMPLATE) as runtime:
        world = build_world(runtime)
        for group_id in world.node_groups.values():
            controller_rule(world, group_id, 31000, 32000)
        controller_rule(world, first_group(world), 30000, 30001)
        set_policy(world, handover_policy(world))
        monkeypatch.setattr(verify_rules, "verify", lagging)
        during: list[tuple[int, Any]] = []
        listening = runtime.waits.subscribe(
            lambda _s: during.append(check(world, tmp_path, capsys)) if not during else None
        )
        with monitor_for(world, live_plan(world).desired) as watch:
            described = reconcile(world) or {}
        listening.undo()
        monkeypatch.undo()
        after_code, after = check(world, tmp_path, capsys)
        code, report = during[0] if during else (-1, {})
        waits = bool(report.get("waiting_for"))
        MATRIX_ROWS.append(
            {
                "call": "adopt --live (hand-over)",
                "kind": "checked in the adopting run's settle",
                "expected": "not ready, waits for the run",
                "outcome": (
                    "not ready, waits for the run" if code == 3 and waits else f"exit {code}"
                ),
                "end state": outcome_of(described) if described else "",
                "fired": len(during),
                "snapshots": len(watch.snapshots),
                "violations": len(watch.violations),
                "locks left": len(held_locks(runtime)),
                "converged": (reconcile(world) or {}).get("status") == "SUCCEEDED",
                "seconds": round(time.monotonic() - started, 1),
            }
        )
    watch.assert_clean()
    assert code == 3 and waits and report["to_adopt"] == [] and report["cut"] == []
    assert described.get("error") == "RolledBack"
    assert after_code == 3 and after["waiting_for"] == [] and len(after["to_adopt"]) == 2
