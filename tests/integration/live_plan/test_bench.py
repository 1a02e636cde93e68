"""The desired-state benchmark still runs (a small scale; the figures are not timed here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_the_benchmark_runs_and_reports_consistent_figures() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_desired", "--scale", "0.02"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    figures = json.loads(done.stdout)
    assert figures["world"]["load_balancers"] == 50
    assert figures["world"]["targets"] == 5 * figures["world"]["target_groups"] == 1250
    plan = figures["plan"]
    assert "refused" not in plan and plan["plan_steps"] > 0 and plan["desired_rules"] > 0
    calls = figures["describe_calls"]
    assert calls["DescribeTargetHealth"] == 250  # one per target group
    assert calls["DescribeTags"] == 3  # 50 load balancers, 20 per call
    for exposure in (figures["exposure_world"], figures["exposure_nodeport_sets"]):
        assert exposure["extra_ports_ours"] <= exposure["extra_ports_single_range"]
