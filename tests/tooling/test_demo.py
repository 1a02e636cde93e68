"""`sg-reconciler demo --json` on the embedded emulator: the three acts show what they claim."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sg_reconciler_tools.cli import main


def run_demo_json(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code = main(["demo", "--json"])
    out = capsys.readouterr().out
    result: dict[str, Any] = json.loads(out)
    result["exit_code"] = code
    return result


def test_the_three_acts_show_make_before_break_and_the_gap_it_avoids(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given the #3639 world, When the demo plays all three acts
    result = run_demo_json(capsys)
    acts = {act["act"]: act for act in result["acts"]}

    # Then act 1 converges through the real state machine with no violation at any state
    one = acts[1]
    assert one["outcome"] == "SUCCEEDED"
    assert one["violations"] == 0 and one["snapshots"] >= 4
    assert one["converged"] is True
    assert any("31000-32500" in line for line in one["rules_after"])
    assert "Authorize new rules" in one["history"] and "Revoke stale rules" in one["history"]
    assert one["history"].index("Authorize new rules") < one["history"].index("Revoke stale rules")
    assert one["transitions"] <= 25

    # And act 2 rolls back with the old rules intact and no violation
    two = acts[2]
    assert two["outcome"] == "FAILED RolledBack"
    assert two["violations"] == 0 and two["old_rules_kept"] is True
    assert two["rules_after"] == two["rules_before"]
    assert "Roll back the rules this execution added" in two["history"]

    # And act 3, the revoke-first order under the same fault, records the gap
    three = acts[3]
    assert three["violations"] >= 1
    assert any("1 no loss" in v for v in three["violation_details"])
    assert three["rules_after"] == []  # nothing lets the NLB reach the nodes
    assert three["converged"] is True  # the reconciler's drift repair closes it

    assert result["ok"] is True and result["exit_code"] == 0


def test_metrics_an_earlier_run_left_in_the_process_never_reach_the_json(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given 99 metrics an earlier run left unpublished (disabled, Powertools keeps them, and
    # prints the set to stdout at 100 whatever the setting)
    from sg_reconciler.observability import metrics

    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    for n in range(99):
        metrics.add_metric(name=f"Leftover{n}", unit="Count", value=1)
    # When the demo's first act runs with --json, Then its stdout is its JSON alone
    code = main(["demo", "--act", "1", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0 and result["ok"] is True
