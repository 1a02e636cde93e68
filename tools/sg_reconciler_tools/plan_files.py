"""Read the offline planning inputs: describe-security-group-rules documents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sg_reconciler.collector import paused_collector
from sg_reconciler.core.rules import Rule, RuleError, ingress_rules, is_egress, label


class InputError(Exception):
    """Bad input for the CLI: reported as one line on stderr with exit code 2."""


def read_json(path: Path) -> Any:
    try:
        data = path.read_bytes()
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from None
    try:
        # JSON is UTF-8 (RFC 8259); PowerShell's `>` writes UTF-16 with a byte-order mark.
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        hint = " (UTF-16? save it as UTF-8)" if data[:2] in (b"\xff\xfe", b"\xfe\xff") else ""
        raise InputError(f"{path}: not UTF-8 text at byte {err.start}{hint}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(
            f"{path}: malformed JSON at line {err.lineno} column {err.colno}: {err.msg}"
        ) from None
    except RecursionError:
        raise InputError(f"{path}: malformed JSON: nested too deeply") from None


def _rule_list(doc: Any, path: Path) -> list[Any]:
    if not isinstance(doc, dict) or not isinstance(doc.get("SecurityGroupRules"), list):
        raise InputError(f'{path}: expected {{"SecurityGroupRules": [...]}}')
    return list(doc["SecurityGroupRules"])


@paused_collector()  # loading and parsing make no cycles: the collector's passes free nothing
def load_current(path: Path) -> list[Rule]:
    """All ingress rules of the groups in scope; egress rules are ignored (never touched)."""
    try:
        return ingress_rules(_rule_list(read_json(path), path), "current")
    except RuleError as err:
        raise InputError(f"{path}: {err}") from None


@paused_collector()
def load_desired(path: Path) -> list[Rule]:
    """The desired managed ingress rules; an egress rule here is a mistake, not something to skip."""
    docs = _rule_list(read_json(path), path)
    try:
        for index, doc in enumerate(docs):
            if isinstance(doc, dict) and doc.get("IsEgress", False) is not False and is_egress(doc):
                raise RuleError(f"desired {label(doc, index)}: egress rules are not managed")
        return ingress_rules(docs, "desired")
    except RuleError as err:
        raise InputError(f"{path}: {err}") from None
