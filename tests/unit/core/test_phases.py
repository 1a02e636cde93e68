"""`split_phases`: a plan's calls in the state machine's three phases (core/phases.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from sg_reconciler.app.contracts.plan import StoredPhases
from sg_reconciler.core.phases import ADDING, Phases, split_phases
from sg_reconciler.core.plan import Adopt, Authorize, Modify, Revoke, Step
from sg_reconciler.core.rules import Rule, rule_from_dict

G1, G2, G3 = "sg-01", "sg-02", "sg-03"


def rule(group_id: str, port: int) -> Rule:
    return rule_from_dict(
        {
            "GroupId": group_id,
            "IpProtocol": "tcp",
            "FromPort": port,
            "ToPort": port,
            "CidrIpv4": "10.0.0.0/16",
        }
    )


def authorize(group_id: str, port: int = 443) -> Authorize:
    return Authorize(group_id, (rule(group_id, port),))


def revoke(group_id: str, rule_id: str = "sgr-1") -> Revoke:
    return Revoke(group_id, (rule_id,))


def modify(group_id: str, port: int = 443) -> Modify:
    return Modify(group_id, f"sgr-{port}", rule(group_id, port))


def adopt(group_id: str, port: int = 443) -> Adopt:
    return Adopt(group_id, f"sgr-{port}", rule(group_id, port), "lbc")


def test_no_calls_no_phases() -> None:
    assert split_phases([]) == Phases((), (), ())


def test_leading_additions_go_first_per_group_in_order() -> None:
    steps = [authorize(G2), adopt(G1), authorize(G1, 80), authorize(G2, 80)]

    phases = split_phases(steps)

    assert phases.authorize == (
        (G1, (adopt(G1), authorize(G1, 80))),
        (G2, (authorize(G2), authorize(G2, 80))),
    )
    assert (phases.ordered, phases.revoke) == ((), ())


def test_trailing_revokes_and_modifies_go_last_per_group() -> None:
    steps = [authorize(G1), revoke(G2), modify(G1), revoke(G1, "sgr-2")]

    phases = split_phases(steps)

    assert phases.authorize == ((G1, (authorize(G1),)),)
    assert phases.ordered == ()
    assert phases.revoke == ((G1, (modify(G1), revoke(G1, "sgr-2"))), (G2, (revoke(G2),)))


def test_a_quota_bound_interleaving_runs_in_order_with_its_groups_tail() -> None:
    # G1 at its quota: revoke one, authorize one, revoke the next; G2 only revokes.
    steps = [authorize(G3), revoke(G1), authorize(G1), revoke(G2), revoke(G1, "sgr-2")]

    phases = split_phases(steps)

    assert phases.authorize == ((G3, (authorize(G3),)),)
    # G1's last revoke stays in the ordered phase: it must follow G1's authorize there.
    assert phases.ordered == (revoke(G1), authorize(G1), revoke(G1, "sgr-2"))
    assert phases.revoke == ((G2, (revoke(G2),)),)


def test_an_ordered_call_after_an_authorize_waits_for_the_settle() -> None:
    phases = split_phases([revoke(G1), authorize(G1), revoke(G1, "sgr-2"), authorize(G1, 80)])

    doc = phases.to_dict({G1: []}, settle_seconds=7)

    assert [item["settle_seconds"] for item in doc["ordered"]] == [0, 0, 7, 0]
    assert all("desired" in item for item in doc["ordered"][::2])  # the guard's rules
    assert StoredPhases.model_validate(doc).to_phases() == phases


# ---------------------------------------------------------------- properties

calls = st.lists(
    st.tuples(
        st.sampled_from([G1, G2, G3]),
        st.sampled_from(["authorize", "revoke", "modify", "adopt"]),
    ),
    max_size=12,
)


def make(plan: list[tuple[str, str]]) -> list[Step]:
    kinds = {"authorize": authorize, "modify": modify, "adopt": adopt}
    steps: list[Step] = []
    for index, (group, kind) in enumerate(plan):
        port = 1000 + index  # every call distinct
        steps.append(revoke(group, f"sgr-{port}") if kind == "revoke" else kinds[kind](group, port))
    return steps


@given(calls)
def test_every_call_is_kept_once_and_each_groups_calls_keep_their_order(
    plan: list[tuple[str, str]],
) -> None:
    steps = make(plan)

    phases = split_phases(steps)

    assert sorted(map(repr, phases.steps)) == sorted(map(repr, steps))
    for group in (G1, G2, G3):
        assert [s for s in phases.steps if s.group_id == group] == [
            s for s in steps if s.group_id == group
        ]


@given(calls)
def test_the_first_phase_only_adds_and_the_last_only_takes_away(
    plan: list[tuple[str, str]],
) -> None:
    steps = make(plan)

    phases = split_phases(steps)

    assert all(isinstance(s, ADDING) for _, group in phases.authorize for s in group)
    assert not any(isinstance(s, ADDING) for _, group in phases.revoke for s in group)
    # Nothing is taken away anywhere before every leading addition is made.
    first_removal = next((i for i, s in enumerate(steps) if not isinstance(s, ADDING)), None)
    head = sum(len(group) for _, group in phases.authorize)
    assert head == (len(steps) if first_removal is None else first_removal)
    # A group of the ordered phase has no calls in the parallel revoke phase.
    assert not {s.group_id for s in phases.ordered} & {g for g, _ in phases.revoke}
