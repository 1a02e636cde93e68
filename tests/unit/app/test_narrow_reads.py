"""An event's narrow read against the full read, on random accounts (core/narrow.py).

The narrowed inventory is built here as the reader builds it (adapters/inventory.py: the
closure's target groups, the groups they reach, and the groups whose owned rules admit the
closure's peers); the reader itself is tested on moto in tests/integration/live_plan/test_narrow.py."""

from __future__ import annotations

import json
from dataclasses import replace

from hypothesis import event, given
from hypothesis import strategies as st
from sg_reconciler.app.live_plan import LivePlan, compute_live_plan, plan_from_inventory
from sg_reconciler.core.account import Inventory, LoadBalancer, SecurityGroup, Target, TargetGroup
from sg_reconciler.core.narrow import narrow, narrowable, stands
from sg_reconciler.core.plan import Authorize, Plan, Revoke
from sg_reconciler.core.policy import Policy
from sg_reconciler.core.rules import OWNER_TAG_KEY, Peer, Rule, RuleKey
from sg_reconciler.core.scope import Locked, Scope
from sg_reconciler.policy import parse_policy

NODES = ("sg-0000000a1", "sg-0000000a2", "sg-0000000a3")
LB_GROUPS = ("sg-0000000b1", "sg-0000000b2", "sg-0000000b3")
BACKEND = "sg-0000000c1"
PORTS = (80, 443, 8080, 8081, 9000)
OWNER = "sg-reconciler"


def policy(kinds: list[str], budget: int, quota: int = 60) -> Policy:
    bindings = [
        {
            "name": f"cluster-{i}",
            "load_balancers": {"tags": {"cluster": str(i)}},
            "rule_source": {
                "kind": kind,
                **({"group_id": BACKEND} if kind == "backend_group" else {}),
            },
            "rule_budget": budget,
        }
        for i, kind in enumerate(kinds)
    ]
    return parse_policy(json.dumps({"bindings": bindings, "quota": quota}))


@st.composite
def accounts(draw: st.DrawFn) -> tuple[Inventory, Policy, Scope]:
    kinds = draw(
        st.lists(st.sampled_from(["load_balancer_groups", "backend_group"]), min_size=1, max_size=2)
    )
    chosen = policy(kinds, draw(st.integers(1, 3)), draw(st.sampled_from([3, 4, 6, 60])))
    lbs = [
        LoadBalancer(
            arn=f"arn:lb/{i}",
            name=f"lb{i}",
            type="network",
            security_groups=tuple(
                draw(st.lists(st.sampled_from(LB_GROUPS), min_size=1, max_size=2, unique=True))
            ),
            tags=(("cluster", str(draw(st.integers(0, len(kinds) - 1)))),),
            vpc_id="vpc-1",
        )
        for i in range(draw(st.integers(1, 4)))
    ]
    tgs = [
        TargetGroup(
            arn=f"arn:targetgroup/{i}",
            name=f"tg{i}",
            protocol="TCP",
            port=draw(st.sampled_from(PORTS)),
            target_type="instance",
            load_balancer_arns=tuple(
                draw(
                    st.lists(
                        st.sampled_from([lb.arn for lb in lbs]), min_size=1, max_size=2, unique=True
                    )
                )
            ),
            vpc_id="vpc-1",
            targets=tuple(
                Target(f"i-{i}{j}", draw(st.sampled_from(PORTS)), tuple(hosts), f"i-{i}{j}")
                for j, hosts in enumerate(
                    draw(
                        st.lists(
                            st.lists(st.sampled_from(NODES), min_size=1, max_size=2, unique=True),
                            max_size=3,
                        )
                    )
                )
            ),
        )
        for i in range(draw(st.integers(1, 5)))
    ]
    rules = []
    for n, (group, peer, port, owned) in enumerate(
        draw(
            st.lists(
                st.tuples(
                    st.sampled_from(NODES),
                    st.sampled_from((*LB_GROUPS, BACKEND)),
                    st.sampled_from(PORTS),
                    st.booleans(),
                ),
                max_size=8,
            )
        )
    ):
        rules.append(
            Rule(
                RuleKey(group, "tcp", port, port, Peer("group", peer)),
                f"{OWNER}: load balancer targets" if owned else "by hand",
                f"sgr-{n}",
                ((OWNER_TAG_KEY, OWNER),) if owned else (),
            )
        )
    rules = list({r.key: r for r in reversed(rules)}.values())  # one rule a key, as in AWS
    inventory = Inventory(
        load_balancers=tuple(lbs),
        target_groups=tuple(tgs),
        groups={g: SecurityGroup(g, "vpc-1") for g in (*NODES, *LB_GROUPS, BACKEND)},
        rules=tuple(rules),
        owned_groups=frozenset(r.group_id for r in rules if r.owned_by(OWNER)),
    )
    scope = Scope(
        load_balancer_arns=frozenset(
            draw(st.lists(st.sampled_from([lb.arn for lb in lbs]), max_size=1))
        ),
        target_group_arns=frozenset(
            draw(st.lists(st.sampled_from([tg.arn for tg in tgs]), min_size=1, max_size=2))
        ),
    )
    return inventory, chosen, scope


def narrowed(inventory: Inventory, chosen: Policy, scope: Scope) -> Inventory:
    """What the reader returns for an event's scope."""
    settings = chosen.desired_settings()
    attached = {tg.arn: tg.load_balancer_arns for tg in inventory.target_groups}
    found = narrow(scope, settings.bindings, inventory.load_balancers, attached)
    assert found is not None
    tgs = tuple(tg for tg in inventory.target_groups if tg.arn in found.target_groups)
    owned = {r.group_id for r in inventory.rules if r.owned_by(OWNER) and r.key.peer in found.peers}
    hosts = {g for tg in tgs for t in tg.targets for g in t.group_ids} | owned
    return replace(
        inventory,
        target_groups=tgs,
        rules=tuple(r for r in inventory.rules if r.group_id in hosts),
        owned_groups=frozenset(owned),
        narrowed_to=found.peers,
    )


def keys(live: LivePlan, groups: set[str], peers: frozenset[Peer]) -> set[RuleKey]:
    return {r.key for r in live.desired if r.group_id in groups and r.key.peer in peers}


def owned_after(inventory: Inventory, plan: Plan) -> Inventory:
    """The account once `plan`'s authorizations ran (its rules ours, with ids)."""
    added = [r for s in plan.steps if isinstance(s, Authorize) for r in s.rules]
    return replace(
        inventory,
        rules=inventory.rules
        + tuple(
            Rule(r.key, r.description, f"sgr-new{n}", ((OWNER_TAG_KEY, OWNER),))
            for n, r in enumerate(added)
        ),
        owned_groups=inventory.owned_groups | {r.group_id for r in added},
    )


def planned(inventory: Inventory, chosen: Policy, scope: Scope) -> LivePlan:
    """`compute_live_plan` for an event, on a reader that answers as the adapter does."""
    narrow_inventory = narrowed(inventory, chosen, scope)

    class Reader:
        def read(self, narrow: Scope | None = None) -> Inventory:
            return inventory if narrow is None else narrow_inventory

        def read_locked(self, locked: Locked) -> Inventory:
            raise AssertionError("an event's plan reads no locked groups")

    return compute_live_plan(Reader(), chosen, scope, narrow=scope, partial=True)


@given(accounts())
def test_a_narrow_plan_that_runs_is_what_the_full_read_plans_for_its_peers(
    case: tuple[Inventory, Policy, Scope],
) -> None:
    inventory, chosen, scope = case
    if not narrowable(scope, chosen.desired_settings()):
        return
    live = planned(inventory, chosen, scope)
    full = plan_from_inventory(inventory, chosen, scope, partial=True)
    if live.narrowed is None:
        event("escalates to the full read")
        assert live.result == full.result  # which decides
        return
    event(f"runs with {'some' if live.result.steps else 'no'} authorizations")
    peers = narrowed(inventory, chosen, scope).narrowed_to
    assert peers is not None
    assert isinstance(live.result, Plan) and isinstance(full.result, Plan)
    everything = plan_from_inventory(inventory, chosen, Scope.everything(), partial=True)
    wanted = {r.key for r in everything.desired}
    in_play = set(live.groups)
    # It opens only what the full read wants, and for the closure's peers it wants exactly
    # what the full read wants in every group it plans.
    for step in live.result.steps:
        assert isinstance(step, Authorize)
        assert {r.key for r in step.rules} <= wanted
    assert keys(live, in_play, peers) == keys(everything, in_play, peers)
    # Nothing the full read would take away from those peers there goes unnoticed.
    revoked = {
        i
        for s in full.result.steps
        if isinstance(s, Revoke) and s.group_id in in_play
        for i in s.rule_ids
    }
    by_id = {r.rule_id: r for r in inventory.rules}
    assert not {i for i in revoked if by_id[i].key.peer in peers}
    # Not guaranteed, so only counted: the full read after it can still do the rest. The
    # additions leave room to replace each unjudged rule of ours (see the next test), but a
    # pending change that needs more room than that can find it taken (docs/limits.md).
    plannable_before = isinstance(everything.result, Plan) and not everything.result.refused
    after = plan_from_inventory(
        owned_after(inventory, live.result), chosen, Scope.everything(), partial=True
    )
    if plannable_before and isinstance(after.result, Plan) and after.result.refused:
        event("a group the full read could change before is refused after")


def test_the_closure_follows_a_shared_peer_to_every_load_balancer_it_admits() -> None:
    chosen = policy(["backend_group", "backend_group"], 3)
    lbs = [
        LoadBalancer(
            f"arn:lb/{i}", f"lb{i}", "network", (LB_GROUPS[i],), (("cluster", str(i % 2)),)
        )
        for i in range(3)
    ]
    attached = {
        "arn:targetgroup/0": ("arn:lb/0",),
        "arn:targetgroup/1": ("arn:lb/1",),
        "arn:targetgroup/2": (),
    }
    found = narrow(
        Scope(target_group_arns=frozenset({"arn:targetgroup/0"})),
        chosen.desired_settings().bindings,
        lbs,
        attached,
    )
    assert found is not None
    assert found.peers == {Peer("group", BACKEND)}
    assert found.target_groups == {"arn:targetgroup/0", "arn:targetgroup/1"}


def test_a_peer_of_its_own_keeps_the_read_to_its_target_groups() -> None:
    chosen = policy(["load_balancer_groups"], 3)
    lbs = [
        LoadBalancer(f"arn:lb/{i}", f"lb{i}", "network", (LB_GROUPS[i],), (("cluster", "0"),))
        for i in range(3)
    ]
    attached = {f"arn:targetgroup/{i}": (f"arn:lb/{i}",) for i in range(3)}
    found = narrow(
        Scope(load_balancer_arns=frozenset({"arn:lb/1"})),
        chosen.desired_settings().bindings,
        lbs,
        attached,
    )
    assert found is not None
    assert found.peers == {Peer("group", LB_GROUPS[1])}
    assert found.target_groups == {"arn:targetgroup/1"}


def test_a_scope_naming_what_the_listings_lack_is_read_in_full() -> None:
    chosen = policy(["load_balancer_groups"], 3)
    lbs = [LoadBalancer("arn:lb/0", "lb0", "network", (LB_GROUPS[0],), (("cluster", "0"),))]
    bindings = chosen.desired_settings().bindings
    gone = Scope(target_group_arns=frozenset({"arn:targetgroup/9"}))
    assert narrow(gone, bindings, lbs, {"arn:targetgroup/0": ("arn:lb/0",)}) is None
    assert narrow(Scope(load_balancer_arns=frozenset({"arn:lb/9"})), bindings, lbs, {}) is None


def test_only_event_scopes_with_load_balancers_or_target_groups_are_read_narrowly() -> None:
    settings = policy(["load_balancer_groups"], 3).desired_settings()
    tg = frozenset({"arn:targetgroup/0"})
    assert narrowable(Scope(target_group_arns=tg), settings)
    assert not narrowable(Scope.everything(), settings)
    assert not narrowable(
        Scope(target_group_arns=tg, group_ids=frozenset({LB_GROUPS[0]})), settings
    )
    assert not narrowable(Scope(instance_ids=frozenset({"i-1"})), settings)
    assert not narrowable(None, settings)
    mixed = policy(["load_balancer_groups", "backend_group"], 3).desired_settings()
    assert narrowable(Scope(target_group_arns=tg), mixed)
    by_address = replace(
        settings, bindings=(replace(settings.bindings[0], source="load_balancer_addresses"),)
    )
    assert not narrowable(Scope(target_group_arns=tg), by_address)
    shaped_apart = replace(
        settings,
        bindings=(settings.bindings[0], replace(settings.bindings[0], name="b", rule_budget=1)),
    )
    assert not narrowable(Scope(target_group_arns=tg), shaped_apart)


def test_a_plan_that_takes_anything_away_or_leaves_its_locks_does_not_stand() -> None:
    add = Authorize(
        NODES[0], (Rule(RuleKey(NODES[0], "tcp", 80, 80, Peer("group", LB_GROUPS[0]))),)
    )
    assert stands(Plan((add,)))
    assert stands(Plan(()))
    assert not stands(Plan((add, Revoke(NODES[0], ("sgr-1",)))))
    assert not stands(Plan((add,), refused=("sg-n2: no room",)))
    assert stands(Plan((add,)), within={NODES[0]})
    assert not stands(Plan((add,)), within={NODES[1]})


def test_an_addition_that_would_take_the_room_a_pending_replacement_needs_is_left_to_the_full_read() -> (
    None
):
    # Quota 3: the node group holds our 443 from the old group of lb1 (just re-pointed to
    # another group) and an SSH rule. An event on tg0 wants 80 from lb0's group.
    node, lb0, old, new = NODES[0], LB_GROUPS[0], LB_GROUPS[1], LB_GROUPS[2]
    chosen = policy(["load_balancer_groups"], 3, quota=3)
    tags = (("cluster", "0"),)
    inventory = Inventory(
        load_balancers=(
            LoadBalancer("arn:lb/0", "lb0", "network", (lb0,), tags, "vpc-1"),
            LoadBalancer("arn:lb/1", "lb1", "network", (new,), tags, "vpc-1"),
        ),
        target_groups=tuple(
            TargetGroup(
                f"arn:targetgroup/{n}",
                f"tg{n}",
                "TCP",
                port,
                "instance",
                load_balancer_arns=(f"arn:lb/{n}",),
                vpc_id="vpc-1",
                targets=(Target("i-1", port, (node,), "i-1"),),
            )
            for n, port in enumerate((80, 443))
        ),
        groups={g: SecurityGroup(g, "vpc-1") for g in (node, lb0, old, new)},
        rules=(
            Rule(
                RuleKey(node, "tcp", 443, 443, Peer("group", old)),
                f"{OWNER}: load balancer targets",
                "sgr-old",
                ((OWNER_TAG_KEY, OWNER),),
            ),
            Rule(RuleKey(node, "tcp", 22, 22, Peer("cidr4", "10.0.0.0/8")), "ssh", "sgr-ssh"),
        ),
        owned_groups=frozenset({node}),
    )
    scope = Scope(target_group_arns=frozenset({"arn:targetgroup/0"}))

    live = planned(inventory, chosen, scope)

    # Alone, 80 would fill the group and 443 could never move (make-before-break needs a
    # free rule): the full read orders both within the quota.
    assert live.narrowed is None
    assert isinstance(live.result, Plan) and not live.result.refused
    assert [type(s).__name__ for s in live.result.steps] == ["Authorize", "Revoke", "Authorize"]


def test_a_plan_whose_revokes_the_brake_held_does_not_run_from_a_narrow_read() -> None:
    add = Authorize(
        NODES[0], (Rule(RuleKey(NODES[0], "tcp", 80, 80, Peer("group", LB_GROUPS[0]))),)
    )
    assert not stands(Plan((add,), held="1 of 1 owned rules (100%)"))


def test_a_full_read_that_finds_no_load_balancer_to_select_says_so() -> None:
    # A tag typo in the policy would otherwise read as "nothing to change"
    chosen = policy(["backend_group"], 3)
    empty = plan_from_inventory(Inventory(), chosen)
    assert isinstance(empty.result, Plan) and empty.result.steps == ()
    assert any("the policy selects no load balancer" in n for n in empty.notes)
    # an event's read sees only what it names: no such note from it
    narrow = plan_from_inventory(Inventory(narrowed_to=frozenset()), chosen)
    assert not any("selects no load balancer" in n for n in narrow.notes)
    # with two bindings, the one whose tags no load balancer carries is named
    two = policy(["backend_group", "backend_group"], 3)
    lb = LoadBalancer("arn:lb/0", "lb0", "network", (LB_GROUPS[0],), (("cluster", "0"),))
    one_found = plan_from_inventory(Inventory(load_balancers=(lb,)), two)
    quiet = [n for n in one_found.notes if "selects no load balancer" in n]
    assert quiet == ["binding cluster-1 selects no load balancer: none carries the tags it gives"]
