"""`sg-reconciler demo`: play the acts, then a one-screen summary (or JSON with --json)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence

from sg_reconciler_tools.demo.play import ACTS, ActResult
from sg_reconciler_tools.demo.screen import Screen


def expectations_met(result: ActResult) -> bool:
    """What each act must show: 1 converges cleanly, 2 rolls back cleanly, 3 records the gap."""
    if result.act == 1:
        return result.outcome == "SUCCEEDED" and result.violations == 0 and result.converged
    if result.act == 2:
        return (
            result.outcome.startswith("FAILED") and result.violations == 0 and result.old_rules_kept
        )
    return result.violations > 0 and result.converged


def run_demo(acts: Sequence[int], as_json: bool) -> int:
    screen = Screen(sys.stderr if as_json else sys.stdout)
    say = screen.say
    results: list[ActResult] = []
    started = time.monotonic()
    for number in acts:
        say("head", "")
        say("step", f"Act {number} of 3")
        result = ACTS[number](say)
        say("head", f"Act {number}: {result.title}")
        screen.act(result)
        results.append(result)
    ok = all(expectations_met(r) for r in results)
    if as_json:
        print(
            json.dumps(
                {
                    "acts": [r.to_dict() for r in results],
                    "ok": ok,
                    "seconds": round(time.monotonic() - started, 1),
                },
                indent=2,
            )
        )
    else:
        screen.summary(results)
        say(
            "ok" if ok else "bad",
            f"{'all acts behaved as expected' if ok else 'an act did not behave as expected'} "
            f"in {time.monotonic() - started:.0f} s",
        )
    return 0 if ok else 1
