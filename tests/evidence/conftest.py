"""Prints the fault matrix the evidence tests collected, at the end of the session."""

from __future__ import annotations

from typing import Any

from evidence.evidence_kit import MATRIX_ROWS

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


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not MATRIX_ROWS:
        return
    rows = [[str(row[c]) for c in COLUMNS] for row in MATRIX_ROWS]
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(COLUMNS)]
    terminalreporter.section("fault matrix (tests/evidence)")
    line = "  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths, strict=True))
    terminalreporter.write_line(line)
    terminalreporter.write_line("-" * len(line))
    for r in rows:
        terminalreporter.write_line("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))
    bad = sum(
        1
        for row in MATRIX_ROWS
        if row["outcome"] != row["expected"] or row["violations"] or not row["converged"]
    )
    terminalreporter.write_line(
        f"{len(MATRIX_ROWS)} scenarios, {sum(r['violations'] for r in MATRIX_ROWS)} violations, "
        f"{sum(1 for r in MATRIX_ROWS if r['converged'])} converged, {bad} off the table"
    )
