"""Terminal output for the demo: coloured when the terminal supports it, plain otherwise."""

from __future__ import annotations

import os
import sys
from typing import TextIO

from sg_reconciler_tools.demo.play import ActResult

_CODES = {"step": "1;36", "ok": "32", "bad": "31", "info": "0", "detail": "2", "head": "1"}
_MARKS = {"step": "==>", "ok": " ✓ ", "bad": " ✗ ", "info": " · ", "detail": "   ", "head": ""}


class Screen:
    def __init__(self, out: TextIO = sys.stdout) -> None:
        self.out = out
        self.colour = (
            out.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"
        )

    def say(self, kind: str, text: str) -> None:
        line = f"{_MARKS.get(kind, '   ')} {text}".rstrip()
        if self.colour:
            line = f"\033[{_CODES.get(kind, '0')}m{line}\033[0m"
        print(line, file=self.out, flush=True)

    def act(self, result: ActResult) -> None:
        self.say("info", "plan: " + ("; ".join(result.plan) or "none"))
        if result.history:
            self.say("info", "execution history (as the Step Functions console lists it):")
            for line in result.history:
                self.say(
                    "bad" if line.lstrip().startswith("!") or "failed" in line else "detail", line
                )
        self.say("info", "node-group rules before:")
        for line in result.rules_before:
            self.say("detail", line)
        self.say("info", "after:")
        for line in result.rules_after or ["(no rules: nothing lets the NLB reach the nodes)"]:
            self.say("detail", line)
        if result.rules_repaired:
            self.say("info", "after the reconciler's drift repair:")
            for line in result.rules_repaired:
                self.say("detail", line)
        verdict = (
            f"invariant monitor: {result.snapshots} rule changes checked, "
            f"{result.violations} violations"
        )
        self.say("ok" if result.violations == 0 else "bad", verdict)
        for detail in result.violation_details[:3]:
            self.say("bad", detail)
        self.say(
            "ok" if not result.outcome.startswith("gap") else "bad", f"outcome: {result.outcome}"
        )

    def summary(self, results: list[ActResult]) -> None:
        self.say("head", "")
        self.say("head", "Summary")
        header = f"act  {'outcome':<38}{'violations':>10}  {'old rules kept':<16}{'converged':<11}{'time':>6}"
        self.say("head", "   " + header)
        for r in results:
            kept = "yes" if r.old_rules_kept else ("-" if r.act != 2 else "NO")
            converged = "yes" if r.converged else "-"
            kind = "ok" if (r.violations == 0) == (r.act != 3) else "bad"
            self.say(
                kind,
                f"{r.act:<5}{r.outcome:<38}{r.violations:>10}  {kept:<16}{converged:<11}"
                f"{r.seconds:>5.1f}s",
            )
