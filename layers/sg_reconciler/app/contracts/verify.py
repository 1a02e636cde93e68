"""The verify states and the leftover check."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from sg_reconciler.app.contracts.base import BatchRecord, Input, Output


class VerifyInput(Input):
    mode: Literal["visible", "final", "leftovers"]
    plan_id: str
    results: list[dict[str, Any]] = Field(default_factory=list)  # the Map's, failures noted
    error: dict[str, Any] | None = None
    batches: int = Field(0, ge=0)  # leftovers: how many batches were checked


class LeftoverListInput(Input):
    """'List the groups to check for leftovers'."""

    mode: Literal["leftover_batches"]
    plan_id: str


class LeftoverCheckInput(Input):
    """One Map item of 'Check the groups for leftovers': batch `batch` of that list."""

    mode: Literal["leftover_batch"]
    batch: int = Field(ge=0)
    plan_id: str


class VerifyOutput(Output):
    """'Verify the new rules are visible' / 'Verify the final state' -> `.verified`."""

    mode: Literal["visible", "final"]
    checked_rules: int


class LeftoverBatchesOutput(Output):
    """'List the groups to check for leftovers' -> `$.leftovers.batches`."""

    batches: list[int]


class LeftoverRecord(BatchRecord):
    """What one leftover check found, kept in the plan store (part `leftovers-found#<batch>`):
    the stale rules still there, and per group the desired traffic not allowed now."""

    leftover_rule_ids: list[str]
    lacking: list[str]


class LeftoverItemOutput(Output):
    """A leftover check Map item (its output is dropped: the Map's ResultPath is null)."""

    groups: int
    leftovers: int


class LeftoversOutput(Output):
    """'Report the leftover rules' -> `$.outcome.report` (its `cause` ends the execution):
    counts, and the first few rules and groups (the plan store has them all)."""

    leftovers: int
    leftover_rule_ids: list[str]
    lacking: list[str]
    cause: str
