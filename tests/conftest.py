"""Shared test configuration: hypothesis profiles and small fixtures every suite may use."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

# Tests never reach AWS: fake credentials, a fixed region, and a lighter moto EC2.
for _name, _value in {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "eu-west-1",
    "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
    "POWERTOOLS_METRICS_NAMESPACE": "SGReconciler",
    "POWERTOOLS_TRACE_DISABLED": "true",
}.items():
    os.environ.setdefault(_name, _value)

# `make test` sets HYPOTHESIS_PROFILE=ci: fewer examples, no deadline (the machine is noisy).
settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=200, deadline=None)
settings.register_profile("thorough", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


# The fault matrix the evidence tests collect (tests/evidence/evidence_kit.py), printed at
# the end of the session; under pytest-xdist each worker sends its rows back.
_ROWS_FROM_WORKERS: list[dict[str, Any]] = []

COLUMNS = (
    "call",
    "kind",
    "expected",
    "outcome",
    "end state",
    "violations",
    "snapshots",
    "locks left",
    "converged",
    "seconds",
)


def _matrix_rows() -> list[dict[str, Any]]:
    """The rows this process collected (evidence_kit, when the evidence ran here) and, under
    pytest-xdist, those the workers sent back."""
    kit = sys.modules.get("evidence.evidence_kit")
    return [*(kit.MATRIX_ROWS if kit is not None else []), *_ROWS_FROM_WORKERS]


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: hand the rows to the controller
        workeroutput["fault_matrix"] = json.dumps(_matrix_rows())


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    rows = getattr(node, "workeroutput", {}).get("fault_matrix")
    if rows:
        _ROWS_FROM_WORKERS.extend(json.loads(rows))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    found = _matrix_rows()
    if not found:
        return
    rows = [[str(row[c]) for c in COLUMNS] for row in found]
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(COLUMNS)]
    terminalreporter.section("fault matrix (tests/evidence)")
    line = "  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths, strict=True))
    terminalreporter.write_line(line)
    terminalreporter.write_line("-" * len(line))
    for r in rows:
        terminalreporter.write_line("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))
    bad = sum(
        1
        for row in found
        if row["outcome"] != row["expected"] or row["violations"] or not row["converged"]
    )
    terminalreporter.write_line(
        f"{len(found)} scenarios, {sum(r['violations'] for r in found)} violations, "
        f"{sum(1 for r in found if r['converged'])} converged, {bad} off the table"
    )
