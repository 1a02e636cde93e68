"""The two kinds of document a step meets, and the shapes several steps share."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Input(BaseModel):
    """A document the steps receive: unknown keys are ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)


class Output(BaseModel):
    """A document a step returns: exactly its fields."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class GroupsInput(Input):
    """The execution's groups, by reference: the state carries their count only."""

    groups_key: str = Field(min_length=1)
    groups: int = Field(ge=1)


class BatchRecord(Output):
    """What one Map item keeps in the plan store, by its batch (`steps.common.batch_records`)."""

    batch: int
