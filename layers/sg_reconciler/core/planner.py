"""Make-before-break planning: the ordered calls from the current to the desired rules.

With enough quota every group gets one authorize call with all its new rules, and only when
every group has them does one revoke call per group remove the stale ones. A group without
that headroom interleaves: authorize what fits, revoke what is no longer needed, repeat; an
in-place modify is the last resort. The order is found by a depth-first search over which
new rules exist and which old ones are gone (both only grow, so the search space is finite
and memoised), trying whole batches first. A state is judged by concrete source (invariant
9, docs/invariants.md): a rule may go when every address, with the groups its interface
carries, keeps what OLD and NEW both admit. When that search finds nothing, a second one may
also revoke a desired rule that other rules cover for the moment and authorize it again
later (extra calls, said in the notes). Every emitted plan passes the safety checker.
Never revoke first: when no order keeps OLD ∩ NEW allowed within the quota, refuse.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from sg_reconciler.core.phases import split_phases
from sg_reconciler.core.plan import Adopt, Authorize, Modify, Plan, Refusal, Revoke, Step
from sg_reconciler.core.quota import Limits, Usage, add, sub
from sg_reconciler.core.rules import DEFAULT_OWNER, Rule, RuleError, RuleKey
from sg_reconciler.core.safety import GroupBounds, check_plan, flow_waits, group_bounds
from sg_reconciler.core.traffic import Traffic, key_box, sharing_ports, source_stake, touching

__all__ = ["DEFAULT_SEARCH_BUDGET", "GroupDiff", "Limits", "dedupe_desired", "make_plan"]

DEFAULT_SEARCH_BUDGET = 20_000  # safety checks one constrained group may spend


@dataclass(frozen=True)
class GroupDiff:
    group_id: str
    unmanaged: tuple[Rule, ...]
    kept: tuple[Rule, ...]
    relabel: tuple[tuple[Rule, Rule], ...]  # (existing, desired): description-only change
    adds: tuple[Rule, ...]
    removes: tuple[Rule, ...]
    satisfied: tuple[tuple[Rule, Rule], ...]  # (desired, unmanaged rule that equals it)

    def usage(self, limits: Limits) -> Usage:
        """Quota units the group holds now."""
        return limits.usage(
            r.key
            for r in (*self.unmanaged, *self.kept, *(a for a, _ in self.relabel), *self.removes)
        )


# A move of the interleaving search: ("authorize", add indexes), ("revoke", remove indexes)
# or ("modify", (remove index, add index)).
Move = tuple[str, tuple[int, ...]]


class _BudgetExhausted(Exception):
    pass


def dedupe_desired(desired: Sequence[Rule]) -> list[Rule]:
    """Desired rules form a set; one key listed with two descriptions is ambiguous."""
    by_key: dict[RuleKey, Rule] = {}
    for rule in desired:
        seen = by_key.setdefault(rule.key, rule)
        if seen.description != rule.description:
            raise RuleError(
                f"desired rule {rule.key} is listed twice with different descriptions "
                f"({seen.description!r} and {rule.description!r})",
                of="desired",
            )
    return sorted(by_key.values(), key=lambda r: r.key)


def diff_groups(current: Sequence[Rule], desired: Sequence[Rule], owner: str) -> list[GroupDiff]:
    """Per group in scope: what stays, what is added, what goes. No churn on kept rules."""
    by_group: dict[str, tuple[list[Rule], list[Rule]]] = {}
    for rule in current:
        by_group.setdefault(rule.group_id, ([], []))[0].append(rule)
    for rule in desired:
        by_group.setdefault(rule.group_id, ([], []))[1].append(rule)
    diffs = []
    for group_id in sorted(by_group):
        now, want = by_group[group_id]
        unmanaged = [r for r in now if not r.owned_by(owner)]
        managed = sorted(
            (r for r in now if r.owned_by(owner)), key=lambda r: (r.key, r.rule_id or "")
        )
        if not managed and not want:
            continue
        unmanaged_by_key = {r.key: r for r in unmanaged}
        wanted = {r.key: r for r in want if r.key not in unmanaged_by_key}
        kept: list[Rule] = []
        relabel: list[tuple[Rule, Rule]] = []
        removes: list[Rule] = []
        placed: set[RuleKey] = set()
        for rule in managed:
            target = wanted.get(rule.key)
            if target is None or rule.key in placed:
                removes.append(rule)
            elif target.description == rule.description:
                kept.append(rule)
            else:
                relabel.append((rule, target))
            placed.add(rule.key)
        diffs.append(
            GroupDiff(
                group_id=group_id,
                unmanaged=tuple(unmanaged),
                kept=tuple(kept),
                relabel=tuple(relabel),
                adds=tuple(r for k, r in sorted(wanted.items()) if k not in placed),
                removes=tuple(removes),
                satisfied=tuple(
                    (r, unmanaged_by_key[r.key]) for r in want if r.key in unmanaged_by_key
                ),
            )
        )
    return diffs


class _Interleaver:
    """Depth-first search for a flow-safe authorize/revoke/modify order within one group's quota.

    A state is two bitmasks: bit i of `added` when adds[i] exists, bit j of `removed` when
    removes[j] is gone (cheap to combine, hash and remember by the thousand). A state is
    safe when every concrete source keeps what OLD and NEW both admit (invariant 9), judged
    on the pieces of `GroupBounds.flows`.

    `transient` desired rules that exist now may be revoked and authorized again later: each
    is both a remove (index `len(diff.removes) + k`) and an add (`len(diff.adds) + k`); the
    end state has both bits or neither. Used only when no other order fits (extra calls).
    """

    def __init__(
        self,
        diff: GroupDiff,
        now: Usage,
        bounds: GroupBounds,
        limits: Limits,
        budget: int,
        transient: Sequence[tuple[Rule, Rule]] = (),
    ) -> None:
        """`now`: the quota units the group holds (`diff.usage`)."""
        self.diff, self.bounds, self.budget = diff, bounds, budget
        self.transient = tuple(transient)  # (existing, desired): a description may change
        again = [r.key for r, _ in self.transient]
        self.real_adds, self.real_removes = len(diff.adds), len(diff.removes)
        self.adds = [r.key for r in diff.adds] + again
        self.removes = [r.key for r in diff.removes] + again
        self.all_added = (1 << self.real_adds) - 1
        self.all_removed = (1 << self.real_removes) - 1
        self.base_usage = sub(now, limits.usage(self.removes))  # the rules no step touches
        self.limit = limits(diff.group_id)
        self.unit_weights = not limits.per_family  # every rule weighs (1, 0): usage is a count
        self.add_weights = [limits.weight(k) for k in self.adds]
        self.remove_weights = [limits.weight(k) for k in self.removes]
        self.seen: set[tuple[int, int]] = set()
        self.safe_cache: dict[tuple[int, int], bool] = {}
        self.checks = 0
        # The stable rules are in every state of the search: only the OLD ∩ NEW flows they
        # leave uncovered are at stake, as pieces that each changing rule covers whole or not
        # at all (rules that cover none have no bit).
        if self.transient:
            stable = bounds.stable_keys - set(again)
            olds = [*self.removes[: self.real_removes], *again]
            self.stake = source_stake(olds, self.adds, sharing_ports(stable, olds))
        else:
            self.stake = bounds.flows
        self.add_bits = [self.stake.bit(k) for k in self.adds]
        self.remove_bits = [self.stake.bit(k) for k in self.removes]
        self.covering_adds = [(i, bit) for i, bit in enumerate(self.add_bits) if bit]
        self.covering_removes = [(j, bit) for j, bit in enumerate(self.remove_bits) if bit]
        self.helpfulness = self._helpfulness()
        self.most_helpful = sorted(range(self.real_adds), key=lambda i: (-self.helpfulness[i], i))
        # A modify never rewrites a rule into a peer of another family that overlaps it
        # (invariant 9): per stale rule, the bitmask of the adds it must not become.
        self.first = flow_waits(self.removes, self.adds)

    def _helpfulness(self) -> list[int]:
        """How many stale rules' needed traffic each new rule covers: authorize those first."""
        partners = [self.stake.partners(bit) for bit in self.add_bits]
        return [sum(1 for bit in self.remove_bits if bit & p) for p in partners]

    def usage(self, added: int, removed: int) -> Usage:
        if self.unit_weights:
            kept = ((1 << len(self.removes)) - 1) & ~removed
            return self.base_usage[0] + added.bit_count() + kept.bit_count(), self.base_usage[1]
        total = self.base_usage
        for i, weight in enumerate(self.add_weights):
            if added >> i & 1:
                total = add(total, weight)
        for j, weight in enumerate(self.remove_weights):
            if not removed >> j & 1:
                total = add(total, weight)
        return total

    def fits(self, usage: Usage) -> bool:
        """`Limits.fits`, with the group's limit looked up once."""
        return usage[0] <= self.limit and usage[1] <= self.limit

    def safe(self, added: int, removed: int) -> bool:
        state = (added, removed)
        cached = self.safe_cache.get(state)
        if cached is None:
            self.checks += 1
            if self.checks > self.budget:
                raise _BudgetExhausted
            cached = self.safe_cache[state] = self.covers(added, removed)
        return cached

    def covers(self, added: int, removed: int) -> bool:
        """Whether the rules present in the state keep every flow at stake."""
        present = 0
        for i, bit in self.covering_adds:
            if added >> i & 1:
                present |= bit
        for j, bit in self.covering_removes:
            if not removed >> j & 1:
                present |= bit
        return self.stake.covered(present)

    def done(self, added: int, removed: int) -> bool:
        """Every new rule exists, every stale one is gone, every transient one is back."""
        return (
            added & self.all_added == self.all_added
            and removed & self.all_removed == self.all_removed
            and added >> self.real_adds == removed >> self.real_removes
        )

    def moves(self, added: int, removed: int) -> Iterator[tuple[Move, int, int]]:
        # Transient rules revoked earlier are new rules again until they are back.
        back = [
            self.real_adds + k
            for k in range(len(self.transient))
            if removed >> (self.real_removes + k) & 1 and not added >> (self.real_adds + k) & 1
        ]
        pending_adds = [i for i in range(self.real_adds) if not added >> i & 1] + back
        pending_removes = [j for j in range(self.real_removes) if not removed >> j & 1]
        # 1. Revoke every stale rule whose traffic is no longer needed, as one call.
        batch: list[int] = []
        revoked = removed
        for j in pending_removes:
            if self.safe(added, revoked | 1 << j):
                batch.append(j)
                revoked |= 1 << j
        if batch:
            yield ("revoke", tuple(batch)), added, revoked
        # 2. Authorize as many new rules as fit, the most helpful first.
        usage = base = self.usage(added, removed)
        fitting: list[int] = []
        authorized = added
        for i in [*self.most_helpful, *back]:
            if added >> i & 1:
                continue
            grown = add(usage, self.add_weights[i])
            if self.fits(grown):
                fitting.append(i)
                authorized |= 1 << i
                usage = grown
        if fitting:
            yield ("authorize", tuple(sorted(fitting))), authorized, removed
        # 3. Single steps, so that the search is complete when the batches lead nowhere.
        for j in batch if len(batch) > 1 else ():
            yield ("revoke", (j,)), added, removed | 1 << j
        for i in pending_adds if len(fitting) < len(pending_adds) else ():
            if self.fits(add(base, self.add_weights[i])):
                yield ("authorize", (i,)), added | 1 << i, removed
        # 4. Last resort: rewrite a rule in place into a new one (no extra slot), judged by the
        # state after it, never into a peer of another family that overlaps it (invariant 9).
        present = pending_removes + [
            self.real_removes + k
            for k in range(len(self.transient))
            if not removed >> (self.real_removes + k) & 1
        ]
        for j in present:
            for i in pending_adds:
                if self.removes[j].peer.kind != self.adds[i].peer.kind or self.first[j] >> i & 1:
                    continue
                swapped = add(sub(base, self.remove_weights[j]), self.add_weights[i])
                grows = swapped[0] > base[0] or swapped[1] > base[1]
                if grows and not self.fits(swapped):
                    continue
                if self.safe(added | 1 << i, removed | 1 << j):
                    yield ("modify", (j, i)), added | 1 << i, removed | 1 << j
        # 5. Revoke for a while a desired rule that other rules cover now: it comes back in a
        # later call (two extra calls, the price of an order that fits).
        for k in range(len(self.transient)):
            j = self.real_removes + k
            if not removed >> j & 1 and self.safe(added, removed | 1 << j):
                yield ("revoke", (j,)), added, removed | 1 << j

    def search(self, added: int, removed: int) -> list[Move] | None:
        if self.done(added, removed):
            return []
        if (added, removed) in self.seen:
            return None
        self.seen.add((added, removed))
        for move, next_added, next_removed in self.moves(added, removed):
            rest = self.search(next_added, next_removed)
            if rest is not None:
                return [move, *rest]
        return None

    def steps(self) -> list[Step] | None:
        moves = self.search(0, 0)
        if moves is None:
            return None
        diff = self.diff
        new_rules = (*diff.adds, *(want for _, want in self.transient))
        old_rules = (*diff.removes, *(have for have, _ in self.transient))
        steps: list[Step] = []
        for kind, items in moves:
            last = steps[-1] if steps else None
            if kind == "authorize":
                rules = tuple(new_rules[i] for i in items)
                if isinstance(last, Authorize):
                    steps[-1] = Authorize(diff.group_id, last.rules + rules)
                else:
                    steps.append(Authorize(diff.group_id, rules))
            elif kind == "revoke":
                ids = tuple(_rule_id(old_rules[j]) for j in items)
                if isinstance(last, Revoke):
                    steps[-1] = Revoke(diff.group_id, last.rule_ids + ids)
                else:
                    steps.append(Revoke(diff.group_id, ids))
            else:
                j, i = items
                steps.append(Modify(diff.group_id, _rule_id(old_rules[j]), new_rules[i]))
        return steps


def _transient(
    diff: GroupDiff, bounds: GroupBounds, owner: str, cap: int = 6
) -> list[tuple[Rule, Rule]]:
    """The desired rules that exist (owned) and could be revoked for a while, as (existing,
    desired): those whose traffic other rules of OLD or NEW admit for every source (a rule
    admits by one peer, so its own family decides). At most `cap`, to bound the search."""
    found: list[tuple[Rule, Rule]] = []
    everything = bounds.old_keys | bounds.new_keys
    for have, want in [*((r, r) for r in diff.kept), *diff.relabel]:
        if len(found) == cap:
            break
        others = touching(everything - {have.key}, [have.key])
        if have.owned_by(owner) and Traffic.of([have.key]) <= Traffic.of(others):
            found.append((have, want))
    return found


def _rule_id(rule: Rule) -> str:
    if rule.rule_id is None:
        raise RuleError(f"current rule {rule.key} has no SecurityGroupRuleId", of="current")
    return rule.rule_id


def _flow_reason(interleaver: _Interleaver) -> str:
    """Name the rules of different peers that one source needs, when those are what block."""
    pairs = [
        (interleaver.removes[j], interleaver.adds[i])
        for j, old_bit in enumerate(interleaver.remove_bits[: interleaver.real_removes])
        for i, new_bit in enumerate(interleaver.add_bits[: interleaver.real_adds])
        if old_bit
        and new_bit
        and key_box(interleaver.removes[j])[0] != key_box(interleaver.adds[i])[0]
        and any(piece & old_bit and piece & new_bit for piece in interleaver.stake.pieces)
    ]
    if not pairs:
        return ""
    old, new = pairs[0]
    more = f" (and {len(pairs) - 1} more such pairs)" if len(pairs) > 1 else ""
    return (
        f", or before the rule that replaces it from another peer: {old} must stay until {new} "
        f"exists, since one source can be admitted by both peers and no rule that stays "
        f"admits it{more}"
    )


def _listing(rules: Sequence[Rule | RuleKey], limit: int = 4) -> str:
    shown = "; ".join(str(r) for r in rules[:limit])
    return shown + (f"; and {len(rules) - limit} more" if len(rules) > limit else "")


def make_plan(
    current: Sequence[Rule],
    desired: Sequence[Rule],
    owner: str = DEFAULT_OWNER,
    limits: Limits | None = None,
    search_budget: int = DEFAULT_SEARCH_BUDGET,
    *,
    partial: bool = False,
    adopt: Callable[[Rule], bool] | None = None,
) -> Plan | Refusal:
    """Plan the change of `current` (all ingress rules in scope) to `desired` (managed rules).

    When a group cannot be planned, the answer is a Refusal, unless `partial`: then the plan
    authorizes what the other groups need (and fixes descriptions) but revokes nothing
    anywhere, because a rule moving from one group to another must never leave the old group
    while the new one cannot get it. `Plan.refused` says why; the next run does the rest.

    `adopt` says which unmanaged rules may be taken over: one that is exactly a desired rule
    is adopted in place (first phase, no traffic change) instead of being left to its owner.
    """
    limits = limits or Limits()
    wanted = dedupe_desired(desired)
    bounds = group_bounds(current, wanted, owner)
    first: list[Step] = []
    interleaved: list[Step] = []
    last: list[Step] = []
    relabels: list[Step] = []
    notes: list[str] = []
    refusals: list[Refusal] = []

    for diff in diff_groups(current, wanted, owner):
        gid, limit = diff.group_id, limits(diff.group_id)
        for want, have in diff.satisfied:
            if adopt is not None and adopt(have):
                first.append(Adopt(gid, _rule_id(have), want, have.description))
                continue
            notes.append(
                f"{gid}: desired {want.key} is already allowed by unmanaged rule "
                f"{have.rule_id or '(one without a SecurityGroupRuleId)'}; left as is"
            )
        relabels.extend(Modify(gid, _rule_id(old), new) for old, new in diff.relabel)
        now = diff.usage(limits)
        added = limits.usage(r.key for r in diff.adds)
        if limits.fits(add(now, added), gid):
            if diff.adds:
                first.append(Authorize(gid, diff.adds))
            if diff.removes:
                last.append(Revoke(gid, tuple(_rule_id(r) for r in diff.removes)))
            continue
        final = sub(add(now, added), limits.usage(r.key for r in diff.removes))
        if not limits.fits(final, gid):
            refusals.append(
                Refusal(
                    f"{gid}: the desired state needs {limits.describe(final)} ({len(diff.unmanaged)} unmanaged rules), "
                    f"over the quota of {limit}; raise the quota, or desire fewer rules (a "
                    "policy's lower rule_budget merges ports into fewer)",
                    gid,
                )
            )
            continue
        interleaver = _Interleaver(diff, now, bounds[gid], limits, search_budget)
        again: list[tuple[Rule, Rule]] = []
        try:
            steps = interleaver.steps()
            if steps is None and (again := _transient(diff, bounds[gid], owner)):
                steps = _Interleaver(diff, now, bounds[gid], limits, search_budget, again).steps()
        except _BudgetExhausted:
            refusals.append(
                Refusal(
                    f"{gid}: gave up after {search_budget} safety checks looking for an order within the "
                    f"quota of {limit} ingress rules (it has {limits.describe(now)}, adds {len(diff.adds)}: "
                    f"{_listing(diff.adds)}); raise the quota or split the change",
                    gid,
                )
            )
            continue
        if steps is None:
            refusals.append(
                Refusal(
                    f"{gid}: no make-before-break order fits the quota of {limit} ingress rules: it has "
                    f"{limits.describe(now)} and must add {_listing(diff.adds)}, but none of the rules it would replace "
                    f"({_listing(diff.removes)}) can be revoked or modified first without denying traffic "
                    f"that both the current and the desired rules allow{_flow_reason(interleaver)}; "
                    "raise the quota or free a rule",
                    gid,
                )
            )
            continue
        interleaved.extend(steps)
        written = {r.key for s in steps if isinstance(s, Authorize) for r in s.rules}
        written |= {s.rule.key for s in steps if isinstance(s, Modify)}
        returning = [have for have, _ in again if have.key in written]
        if returning:
            # A rule revoked and written again carries the desired description already.
            gone = {have.rule_id for have in returning}
            relabels = [s for s in relabels if not (isinstance(s, Modify) and s.rule_id in gone)]
            shown = _listing(returning)
            notes.append(
                f"{gid}: no order fits the quota of {limit} ingress rules without revoking desired "
                f"rules whose traffic other rules admit meanwhile and authorizing them again later: "
                f"{shown} ({2 * len(returning)} extra calls at most)"
            )
        for step in steps:
            if isinstance(step, Modify):
                notes.append(
                    f"{gid}: no quota headroom, so rule {step.rule_id} is modified in place to {step.rule.key} "
                    "(ModifySecurityGroupRules; AWS does not document that traffic flows uninterrupted "
                    "during the change)"
                )

    if refusals and not partial:
        return Refusal("; ".join(r.reason for r in refusals), refusals[0].group_id)
    if refusals:
        waiting = ", ".join(sorted(r.group_id or "?" for r in refusals))
        notes.append(f"revokes deferred in every group until {waiting} can be planned")
        plan = Plan(tuple(first + relabels), tuple(notes), tuple(r.reason for r in refusals))
    else:
        plan = Plan(tuple(first + interleaved + last + relabels), tuple(notes))
    violations = check_plan(
        plan, list(current), wanted, owner, limits, bounds, reaches_desired=not refusals
    )
    if violations:  # a planner bug: never emit a plan that fails the checker
        return Refusal("internal safety check failed: " + "; ".join(str(v) for v in violations[:3]))
    return plan


def defer_revokes(plan: Plan, reasons: Sequence[str]) -> Plan:
    """The plan of a partial reconcile whose other groups wait for `reasons`: what adds or
    adopts rules goes ahead, nothing is revoked or rewritten anywhere."""
    kept = tuple(s for _, steps in split_phases(plan.steps).authorize for s in steps)
    note = "revokes deferred in every group until the groups refused can be planned"
    return Plan(kept, (*plan.notes, note), (*plan.refused, *reasons), plan.held)
