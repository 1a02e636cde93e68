"""The apply Maps' items: a batch of a stored phase, and the calls of one group."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sg_reconciler.app.contracts.base import Input, Output
from sg_reconciler.app.contracts.plan import AnyStep, PhaseItem, RuleDocument


class ApplyInput(Input):
    """One Map item: batch `batch` of a phase stored in the plan store."""

    phase: Literal["authorize", "ordered", "revoke"]
    batch: int = Field(ge=0)
    batches: int = Field(1, ge=1)  # in the phase: how many items share the rate
    plan_id: str
    holder: str
    owner: str = Field(min_length=1)


class ApplyItem(PhaseItem):
    """An item as the apply step runs it: its calls, and its desired rules for the live
    guard when it revokes or modifies."""

    steps: list[AnyStep] = Field(min_length=1)
    desired: list[RuleDocument] | None = None
    settle_seconds: int = Field(0, ge=0)  # ordered items: the wait before the call


class ApplyOutput(Output):
    """An apply Map item (its output is dropped: OutputPath null)."""

    groups: int
    calls: int
