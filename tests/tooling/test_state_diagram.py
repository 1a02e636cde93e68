"""The state diagram of docs/how-it-works.md follows the state machine: every state a person
sees in the console (all but the `Pass` states that record an outcome) is drawn, every arrow
drawn is a transition of statemachine/apply_plan.asl.json, through those `Pass` states at
most, and the outcomes' table lists every final state. A diagram left behind by a reordering
would otherwise mislead its reader."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "how-it-works.md"
ASL: dict[str, Any] = json.loads((ROOT / "statemachine" / "apply_plan.asl.json").read_text())
OUTCOMES = ("Succeed", "Fail")  # the final states: the outcomes' table lists them

_DECLARED = re.compile(r'^\s*state "([^"]+)" as (\w+)\s*$')
_ARROW = re.compile(r"^\s*(\[\*\]|\w+) --> (\[\*\]|\w+)(?::\s*(.*))?$")


def diagram(text: str) -> tuple[dict[str, str], list[tuple[str, str, str]]]:
    """The state diagram's states (alias to name) and arrows (from, to, label)."""
    block = text.split("```mermaid\nstateDiagram-v2\n", 1)[1].split("```", 1)[0]
    names = {m[2]: m[1] for m in map(_DECLARED.match, block.splitlines()) if m}
    arrows = [(m[1], m[2], m[3] or "") for m in map(_ARROW.match, block.splitlines()) if m]
    return names, arrows


def next_states(state: dict[str, Any]) -> Iterator[tuple[str, bool]]:
    """(next state, by a Catch) for every way out of `state`."""
    for name in [state.get("Next"), state.get("Default")]:
        if name:
            yield name, False
    for choice in state.get("Choices", []):
        yield choice["Next"], False
    for catch in state.get("Catch", []):
        yield catch["Next"], True


def reachable(source: str, states: dict[str, Any]) -> set[tuple[str, bool]]:
    """The states `source` leads to, through `Pass` states at most (by a Catch: a failure)."""
    found: set[tuple[str, bool]] = set()
    todo = list(next_states(states[source]))
    while todo:
        name, caught = todo.pop()
        if (name, caught) in found:
            continue
        found.add((name, caught))
        if states[name]["Type"] == "Pass":
            todo += [(after, caught or by) for after, by in next_states(states[name])]
    return found


def test_every_state_a_reader_sees_is_drawn() -> None:
    names, arrows = diagram(DOC.read_text())
    states = ASL["States"]
    shown = {n for n, s in states.items() if s["Type"] != "Pass" and s["Type"] not in OUTCOMES}
    assert set(names.values()) - {"Reject the invalid input"} == shown
    drawn = {end for arrow in arrows for end in arrow[:2]} - {"[*]"}
    assert drawn == set(names), "a state is declared but has no arrow, or the reverse"


def wrong_arrows(text: str) -> list[str]:
    """The arrows of the diagram in `text` that are no transition of the state machine: a
    `failure` arrow (or one labelled with the error caught) must be a Catch's."""
    names, arrows = diagram(text)
    states = ASL["States"]
    wrong = []
    for source, target, label in arrows:
        if source == "[*]":
            ok = names[target] == ASL["StartAt"]
        elif target == "[*]":
            ok = states[names[source]]["Type"] in ("Choice", "Fail")
        else:
            catches = states[names[source]].get("Catch", [])
            caught = label == "failure" or any(label in c["ErrorEquals"] for c in catches)
            ok = (names[target], caught) in reachable(names[source], states)
        if not ok:
            wrong.append(f"{names.get(source, source)} --> {names.get(target, target)}: {label}")
    return wrong


def test_every_arrow_is_a_transition_of_the_state_machine() -> None:
    assert len(diagram(DOC.read_text())[1]) > 30
    assert wrong_arrows(DOC.read_text()) == []


def test_a_reordered_or_mislabelled_diagram_fails() -> None:
    text = DOC.read_text()
    reordered = text.replace("  Visible --> Ordered\n", "  Visible --> Revoke\n")
    assert wrong_arrows(reordered) == ["Verify the new rules are visible --> Revoke stale rules: "]
    mislabelled = text.replace("Authorize --> Rollback: failure", "Authorize --> Rollback")
    assert wrong_arrows(mislabelled) == [
        "Authorize new rules --> Roll back the rules this execution added: "
    ]


def test_the_outcomes_table_lists_every_final_state() -> None:
    table = DOC.read_text().split("## Outcomes", 1)[1].split("\n\n## ", 1)[0]
    rows = {m[1] for m in re.finditer(r"^\| `([^`]+)` \(", table, re.MULTILINE)}
    assert rows == {n for n, s in ASL["States"].items() if s["Type"] in OUTCOMES}
