"""The two envelopes a trigger arrives in: an SQS record, and the EventBridge event in its body.

Only the fields the planner decides on, read with Powertools Parser's `parse`. Parser's own
`SqsRecordModel` and `EventBridgeModel` describe every field AWS sends and are built when
they are imported, which cost the planner's cold start more than the rest of its event
needs (docs/architecture.md, "Cold start"); these are built by their first event.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class SqsMessage(BaseModel):
    """One record of an SQS batch (Lambda's event source mapping): its id and its text."""

    model_config = ConfigDict(defer_build=True)

    messageId: str
    eventSource: Literal["aws:sqs"]
    body: str


class EventBridgeEnvelope(BaseModel):
    """An EventBridge event: who sent it, where, of which type; its detail as sent."""

    model_config = ConfigDict(populate_by_name=True, defer_build=True)

    id: str
    source: str
    account: str
    region: str
    detail_type: str = Field(alias="detail-type")
    detail: dict[str, Any] | BaseModel  # a subclass reads it with its own model
