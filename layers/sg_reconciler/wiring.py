"""Adapters built from a function's settings: what handlers pass to the workflow logic."""

from __future__ import annotations

from sg_reconciler.adapters.aws_clients import client
from sg_reconciler.adapters.locks import GroupLocks
from sg_reconciler.adapters.security_groups import SecurityGroupRules
from sg_reconciler.settings import StepSettings


def group_rules() -> SecurityGroupRules:
    return SecurityGroupRules(client("ec2"))


def group_locks(config: StepSettings) -> GroupLocks:
    return GroupLocks(client("dynamodb"), config.lock_table)
