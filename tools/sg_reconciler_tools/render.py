"""Human-readable plan tables for the terminal."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from sg_reconciler.core.plan import Authorize, Plan, Refusal, Revoke
from sg_reconciler.core.rules import Rule, describe_ports


def _rule_text(rule: Rule) -> str:
    key = rule.key
    text = f"{describe_ports(key.protocol, key.from_port, key.to_port)} from {key.peer}"
    return text + (f"  ({rule.description})" if rule.description else "")


def render_plan(
    result: Plan | Refusal,
    names: Mapping[str, str] | None = None,
    needed_by: Callable[[Rule], tuple[str, ...]] | None = None,
) -> str:
    """The plan as a table; with `names`, groups are shown by name too, and with `needed_by`
    each new rule says what needs it."""
    if isinstance(result, Refusal):
        return f"REFUSED: {result.reason}"
    if not result.steps:
        lines = ["No change: the groups already have the desired rules."]
    else:
        known = names or {}

        def group(group_id: str) -> str:
            return f"{known[group_id]} ({group_id})" if known.get(group_id) else group_id

        width = max(22, *(len(group(s.group_id)) for s in result.steps))
        lines = [f"{'#':>3}  {'action':<9}  {'group':<{width}}  rules"]
        for n, step in enumerate(result.steps, 1):
            if isinstance(step, Authorize):
                items = [_rule_text(r) + _why(r, needed_by) for r in step.rules]
            elif isinstance(step, Revoke):
                items = list(step.rule_ids)
            else:
                items = [f"{step.rule_id} -> {_rule_text(step.rule)}{_why(step.rule, needed_by)}"]
            action = type(step).__name__.lower()
            for i, item in enumerate(items):
                head = (
                    f"{n:>3}  {action:<9}  {group(step.group_id):<{width}}"
                    if i == 0
                    else " " * (16 + width)
                )
                lines.append(f"{head}  {item}")
    lines.extend(f"note: {note}" for note in result.notes)
    return "\n".join(lines)


def _why(rule: Rule, needed_by: Callable[[Rule], tuple[str, ...]] | None) -> str:
    needs = needed_by(rule) if needed_by is not None else ()
    return f"  <- {'; '.join(needs)}" if needs else ""
