"""Human-readable plan tables for the terminal."""

from __future__ import annotations

from sg_reconciler.core.plan import Authorize, Plan, Refusal, Revoke
from sg_reconciler.core.rules import Rule, describe_ports


def _rule_text(rule: Rule) -> str:
    key = rule.key
    text = f"{describe_ports(key.protocol, key.from_port, key.to_port)} from {key.peer}"
    return text + (f"  ({rule.description})" if rule.description else "")


def render_plan(result: Plan | Refusal) -> str:
    if isinstance(result, Refusal):
        return f"REFUSED: {result.reason}"
    if not result.steps:
        lines = ["No change: the groups already have the desired rules."]
    else:
        lines = [f"{'#':>3}  {'action':<9}  {'group':<22}  rules"]
        for n, step in enumerate(result.steps, 1):
            if isinstance(step, Authorize):
                items = [_rule_text(r) for r in step.rules]
            elif isinstance(step, Revoke):
                items = list(step.rule_ids)
            else:
                items = [f"{step.rule_id} -> {_rule_text(step.rule)}"]
            action = type(step).__name__.lower()
            for i, item in enumerate(items):
                head = f"{n:>3}  {action:<9}  {step.group_id:<22}" if i == 0 else " " * 38
                lines.append(f"{head}  {item}")
    lines.extend(f"note: {note}" for note in result.notes)
    return "\n".join(lines)
