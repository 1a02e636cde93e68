"""Human-readable plan tables and hand-over reports for the terminal."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sg_reconciler.core.handover import HandOver
from sg_reconciler.core.plan import Authorize, Plan, Refusal, Revoke, step_to_dict
from sg_reconciler.core.rules import Rule, describe_ports, rule_to_dict
from sg_reconciler.core.traffic import Traffic

SECONDS = "%Y-%m-%d %H:%M:%S"  # a time as the CLI shows it (strftime)
UTC_SECONDS = f"{SECONDS} UTC"


def _rule_text(rule: Rule, names: Mapping[str, str] | None = None) -> str:
    key = rule.key
    peer = str(key.peer)
    if names and key.peer.kind == "group" and names.get(peer):
        peer = f"{names[peer]} ({peer})"
    text = f"{describe_ports(key.protocol, key.from_port, key.to_port)} from {peer}"
    return text + (f"  ({rule.description})" if rule.description else "")


def render_plan(
    result: Plan | Refusal,
    names: Mapping[str, str] | None = None,
    needed_by: Callable[[Rule], tuple[str, ...]] | None = None,
    current: Iterable[Rule] = (),
) -> str:
    """The plan as a table; with `names`, groups are shown by name too, with `needed_by`
    each new rule says what needs it, and with `current` each revoke says what it takes
    away (a reviewer should not need a describe call to read it)."""
    by_id = {r.rule_id: r for r in current if r.rule_id}
    if isinstance(result, Refusal):
        return f"REFUSED: {result.reason}"
    if not result.steps and (result.held or result.refused):
        lines = ["No call to make now, but the groups are not as desired: see below."]
    elif not result.steps:
        lines = ["No change: the groups already have the desired rules."]
    else:
        known = names or {}

        def group(group_id: str) -> str:
            return f"{known[group_id]} ({group_id})" if known.get(group_id) else group_id

        width = max(22, *(len(group(s.group_id)) for s in result.steps))
        lines = [f"{'#':>3}  {'action':<9}  {'group':<{width}}  rules"]
        for n, step in enumerate(result.steps, 1):
            if isinstance(step, Authorize):
                items = [_rule_text(r, known) + _why(r, needed_by) for r in step.rules]
            elif isinstance(step, Revoke):
                items = [
                    f"{i}: {_rule_text(by_id[i], known)}" if i in by_id else i
                    for i in step.rule_ids
                ]
            else:
                items = [
                    f"{step.rule_id} -> {_rule_text(step.rule, known)}{_why(step.rule, needed_by)}"
                ]
            action = type(step).__name__.lower()
            for i, item in enumerate(items):
                head = (
                    f"{n:>3}  {action:<9}  {group(step.group_id):<{width}}"
                    if i == 0
                    else " " * (16 + width)
                )
                lines.append(f"{head}  {item}")
    if result.held:
        lines.append(f"held: the brake holds the revokes: {result.held}")
    lines.extend(f"refused: {reason}" for reason in result.refused)
    lines.extend(f"note: {note}" for note in result.notes)
    return "\n".join(lines)


def _why(rule: Rule, needed_by: Callable[[Rule], tuple[str, ...]] | None) -> str:
    needs = needed_by(rule) if needed_by is not None else ()
    return f"  <- {'; '.join(needs)}" if needs else ""


def render_handover(
    state: HandOver,
    names: Mapping[str, str] | None = None,
    needed_by: Callable[[Rule], tuple[str, ...]] | None = None,
) -> str:
    """Where a hand-over stands, section by section, groups by name."""
    known = names or {}

    def line(rule: Rule, rule_id: str | None = None) -> str:
        group = (
            f"{known[rule.group_id]} ({rule.group_id})"
            if known.get(rule.group_id)
            else rule.group_id
        )
        which = f"{rule_id}: " if rule_id else (f"{rule.rule_id}: " if rule.rule_id else "")
        return f"  {group}  {which}{_rule_text(rule, known)}{_why(rule, needed_by)}"

    lines = [f"adopt in place on the next run: {len(state.to_adopt)}"]
    lines += [line(step.rule, step.rule_id) for step in state.to_adopt]
    lines.append(f"authorize first on the next run: {len(state.to_authorize)}")
    lines += [line(rule) for rule in state.to_authorize]
    lines.append(f"adopted already: {len(state.adopted)}")
    lines += [line(rule) for rule in state.adopted]
    lines.append(
        f"left to their owner, which revokes them when it stops managing rules: "
        f"{len(state.left_to_owner)}"
    )
    lines += [line(rule) for rule in state.left_to_owner]
    if state.beyond_desired:
        lines.append(f"  only they admit (no desired rule does): {state.beyond_desired.describe()}")
    if state.cut:
        lines.append(
            f"  of which registered targets are reached on (lost when they go): {state.cut.describe()}"
        )
    if state.unknown_targets:
        lines.append(
            "targets whose security group is unknown, which the other tool's rules may admit "
            "(nobody can tell whether they lose a flow): " + ", ".join(state.unknown_targets)
        )
    if state.unrelated_unknown:
        lines.append(
            "targets whose security group is unknown, beyond the other tool's rules (listed, "
            "not waited for): " + ", ".join(state.unrelated_unknown)
        )
    for execution in state.waiting_for:
        lines.append(f"waiting for execution {execution}")
    if state.unmatched:
        listed = ", ".join(repr(d) for d in state.unmatched)
        lines.append(
            f"no rule carries the description(s) {listed} of adopt_descriptions"
            + (
                ""
                if state.doubtful
                else " (no target depends on a rule of another description: if that tool has "
                "no rules here, or has stopped, there is nothing of it to hand over)"
            )
        )
    if state.ready:
        lines.append(
            "ready: every flow the other tool's rules admit to a registered target is admitted "
            "without them, and no run in flight can hand adopted rules back; the other tool "
            "may stop managing rules now (docs/handover.md)"
        )
        return "\n".join(lines)
    lines.append("not ready:")
    if state.doubtful:
        lines.append(
            f"  targets are reached on {state.unlisted_only.describe()} only through rules no "
            "deployment owns whose description is not listed: if one is the other tool's (a "
            "typo in adopt_descriptions), stopping it would cut them; check the descriptions"
        )
    if state.cut:
        lines.append(
            "  targets are still reached only through the other tool's rules (above): the next "
            "run (scheduled, or any trigger) adopts and authorizes what the policy derives; "
            "traffic it does not derive needs a policy that does (e.g. client_cidrs)"
        )
    if state.unknown_targets:
        lines.append(
            "  targets of unknown group (above) may be admitted by the other tool's rules: "
            "make their groups known, or the policy derive their traffic"
        )
    if state.waiting_for:
        lines.append("  an execution in flight (above) must end first")
    lines.append("run this again before the other tool stops managing rules")
    return "\n".join(lines)


def traffic_to_list(traffic: Traffic) -> list[dict[str, Any]]:
    """Traffic as JSON: rules in describe-security-group-rules shape, as a plan gives its
    rules, that together allow exactly that traffic."""
    return [rule_to_dict(Rule(key), with_identity=False) for key in traffic.rule_keys()]


def handover_to_dict(state: HandOver) -> dict[str, Any]:
    return {
        "ready": state.ready,
        "to_adopt": [step_to_dict(step) for step in state.to_adopt],
        "to_authorize": [rule_to_dict(r, with_identity=False) for r in state.to_authorize],
        "adopted": [rule_to_dict(r) for r in state.adopted],
        "left_to_owner": [rule_to_dict(r) for r in state.left_to_owner],
        "beyond_desired": traffic_to_list(state.beyond_desired),
        "cut": traffic_to_list(state.cut),
        "unknown_targets": list(state.unknown_targets),
        "unrelated_unknown_targets": list(state.unrelated_unknown),
        "waiting_for": list(state.waiting_for),
        "unmatched_descriptions": list(state.unmatched),
        "unlisted_only": traffic_to_list(state.unlisted_only) if state.doubtful else [],
    }
