"""The fault matrix's row for a brake with memory (docs/invariants.md, invariants 12 and 14): load balancers leave the
selection one at a time, in a world of its own (five load balancers, each admitted by its
own group), so it runs beside the matrix's shared stage, not in it."""

from __future__ import annotations

import time

from evidence.evidence_kit import MATRIX_ROWS, converge, held_locks
from sg_reconciler_tools.demo.play import TEMPLATE, quiet_handlers, reconcile
from sg_reconciler_tools.demo.world import build_world
from sg_reconciler_tools.local import LocalRuntime
from workflow.test_brake_window import EXTRA, shrink_in_steps

S = "SUCCEEDED"


def test_selection_shrinking_in_steps_is_held_by_the_brakes_window() -> None:
    started = time.monotonic()
    quiet_handlers()
    with LocalRuntime(TEMPLATE) as runtime:
        world = build_world(runtime)
        reconcile(world)
        shrink = shrink_in_steps(world)
        converged = converge(world)
        MATRIX_ROWS.append(
            {
                "call": "Planner (brake window)",
                "kind": "selection shrinks in steps",
                "expected": "3 runs go, the 4th held",
                "outcome": f"{sum(o == S for o in shrink.outcomes[:3])} runs go, the 4th "
                + ("held" if shrink.outcomes[3] is None and shrink.held else "went"),
                "end state": "",
                "fired": EXTRA,
                "snapshots": len(shrink.watch.snapshots),
                "violations": len(shrink.watch.violations),
                "locks left": len(held_locks(runtime)),
                "converged": converged,
                "seconds": round(time.monotonic() - started, 1),
            }
        )
    shrink.watch.assert_clean()
    assert shrink.outcomes[:4] == [S, S, S, None] and len(shrink.held) == 1
    assert converged
