"""The state diagram of docs/how-it-works.md follows the state machine: every state a person
sees in the console (all but the `Pass` states that record an outcome, and the final states
the outcomes' table lists) is drawn, every arrow drawn is a transition of
statemachine/apply_plan.asl.json (through those `Pass` states at most; `failure` or an error
name marks a Catch), every transition between drawn states has its arrow, and the outcomes'
table lists every final state. A diagram left behind by a reordering would otherwise mislead
its reader. (Which way a Choice goes, `yes` or `no`, is read, not checked.)"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "how-it-works.md"
ASL: dict[str, Any] = json.loads((ROOT / "statemachine" / "apply_plan.asl.json").read_text())
STATES: dict[str, Any] = ASL["States"]
OUTCOMES = ("Succeed", "Fail")  # the final states

_DECLARED = re.compile(r'^state\s+"([^"]+)"\s+as\s+(\w+)$')
_ARROW = re.compile(r"^(\[\*\]|\w+)\s*-->\s*(\[\*\]|\w+)\s*(?::\s*(.*?))?$")

Arrow = tuple[str, str, str]  # from, to (aliases or [*]), label


def diagram(text: str) -> tuple[dict[str, str], list[Arrow]]:
    """The state diagram's states (alias to name) and arrows; a line it cannot read fails."""
    block = text.split("```mermaid\nstateDiagram-v2\n", 1)[1].split("```", 1)[0]
    names: dict[str, str] = {}
    arrows: list[Arrow] = []
    for line in filter(None, (line.strip() for line in block.splitlines())):
        declared, arrow = _DECLARED.match(line), _ARROW.match(line)
        assert declared or arrow, f"not a state or an arrow: {line!r}"
        if declared:
            names[declared[2]] = declared[1]
        elif arrow:
            arrows.append((arrow[1], arrow[2], arrow[3] or ""))
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


def reachable(source: str) -> set[tuple[str, bool]]:
    """The states `source` leads to, through `Pass` states at most (by a Catch: a failure)."""
    found: set[tuple[str, bool]] = set()
    todo = list(next_states(STATES[source]))
    while todo:
        name, caught = todo.pop()
        if (name, caught) in found:
            continue
        found.add((name, caught))
        if STATES[name]["Type"] == "Pass":
            todo += [(after, caught or by) for after, by in next_states(STATES[name])]
    return found


def ends_only(name: str) -> bool:
    """A state that only ends the execution: a final one, or a Choice among final ones."""
    state = STATES[name]
    return state["Type"] in OUTCOMES or all(
        STATES[after]["Type"] in OUTCOMES for after, _ in next_states(state)
    )


def to_draw() -> set[str]:
    """The states a reader sees, and the final states reached other than by a state that
    only picks the outcome (those the outcomes' table covers)."""
    seen = {n for n, s in STATES.items() if s["Type"] not in ("Pass", *OUTCOMES)}
    finals = {
        after
        for name in seen
        if not ends_only(name)
        for after, _ in reachable(name)
        if STATES[after]["Type"] in OUTCOMES
    }
    return seen | finals


def wrong_arrows(text: str) -> list[str]:
    """What the diagram in `text` gets wrong: an arrow that is no transition (a `failure`
    arrow, or one labelled with an error caught, must be a Catch's), and a transition between
    drawn states without its arrow."""
    names, arrows = diagram(text)
    wrong = []
    for source, target, label in arrows:
        if source == "[*]":
            ok = names[target] == ASL["StartAt"]
        elif target == "[*]":
            ok = ends_only(names[source])
        else:
            catches = STATES[names[source]].get("Catch", [])
            caught = label == "failure" or any(label in c["ErrorEquals"] for c in catches)
            ok = (names[target], caught) in reachable(names[source])
        if not ok:
            wrong.append(f"{names.get(source, source)} --> {names.get(target, target)}: {label}")
    drawn = {(names[s], names[t]) for s, t, _ in arrows if "[*]" not in (s, t)}
    for source in names.values():
        for target, _ in sorted(reachable(source)):
            if target in names.values() and (source, target) not in drawn:
                wrong.append(f"missing: {source} --> {target}")
    return sorted(set(wrong))


def test_every_state_a_reader_sees_is_drawn() -> None:
    names, arrows = diagram(DOC.read_text())
    assert set(names.values()) == to_draw()
    drawn = {end for arrow in arrows for end in arrow[:2]} - {"[*]"}
    assert drawn == set(names), "a state is declared but has no arrow, or the reverse"


def test_every_arrow_is_a_transition_and_every_transition_an_arrow() -> None:
    assert len(diagram(DOC.read_text())[1]) > 30
    assert wrong_arrows(DOC.read_text()) == []


def test_a_diagram_that_drifts_fails() -> None:
    text = DOC.read_text()

    def drift(old: str, new: str) -> list[str]:
        assert old in text
        return wrong_arrows(text.replace(old, new))

    assert drift("  Visible --> Ordered\n", "  Visible --> Revoke\n") == [
        "Verify the new rules are visible --> Revoke stale rules: ",
        "missing: Verify the new rules are visible --> Apply quota-bound changes in order",
    ]
    assert drift("Authorize --> Rollback: failure", "Authorize --> Rollback") == [
        "Authorize new rules --> Roll back the rules this execution added: "
    ]
    assert drift("  Visible --> Rollback: failure\n", "") == [
        "missing: Verify the new rules are visible --> Roll back the rules this execution added"
    ]
    assert drift("  Lock --> Release: failure\n", "  Lock --> Authorize : failure\n") == [
        "Lock the groups --> Authorize new rules: failure",
        "missing: Lock the groups --> Release the group locks",
    ]
    assert drift("  HowEnded --> [*]\n", "  HowEnded --> [*]\n  Anything --> [*]\n") == [
        "Is there anything to change? --> [*]: "
    ]
    unreadable = text.replace("  Final --> Release\n", "  Final -> Release\n")
    try:
        diagram(unreadable)
    except AssertionError as err:
        assert "not a state or an arrow: 'Final -> Release'" in str(err)
    else:
        raise AssertionError("an unreadable line passed")


def test_the_outcomes_table_lists_every_final_state() -> None:
    table = DOC.read_text().split("## Outcomes", 1)[1].split("\n\n## ", 1)[0]
    rows = {m[1] for m in re.finditer(r"^\| `([^`]+)` \(", table, re.MULTILINE)}
    assert rows == {n for n, s in STATES.items() if s["Type"] in OUTCOMES}
