"""The steps' contracts with the state machine (statemachine/apply_plan.asl.json), as models.

- The execution input (docs/contracts.md): what the planner starts an execution with, or a
  plan given by hand.
- The plan and step documents (docs/contracts.md, written by `core.plan.Plan.to_dict`):
  parsed here, at the edge, into the core's dataclasses (`to_plan`, `to_step`).
- Each step's input: what a state's Parameters or ItemSelector build. Validated on the way
  in, unknown keys ignored; a bad one is an InvalidPlan naming the field.
- The phases' items: what "Refresh the plan under the locks" stores in the plan store and
  the apply step reads back.
- Each step's output: what the ASL's ResultSelector, ItemsPath, MaxConcurrencyPath,
  SecondsPath and Choice states read. The steps build these models and return their
  `model_dump()`, so a field the ASL reads cannot go missing unnoticed: tests/unit/app/
  test_contracts.py resolves every such path of the ASL against them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, model_validator

from sg_reconciler.core.phases import Phases
from sg_reconciler.core.plan import Adopt, Authorize, Modify, Plan, Revoke, Step
from sg_reconciler.core.rules import Rule, rule_from_dict

PLAN_KEY_PATTERN = r"^[A-Za-z0-9_-]{1,80}$"


class Input(BaseModel):
    """A document the steps receive: unknown keys are ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)


class Output(BaseModel):
    """A document a step returns: exactly its fields."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


# ---------------------------------------------------------------- the plan and its steps

Text = Annotated[str, Field(min_length=1)]

# A rule in describe-security-group-rules shape, read by the core's own parser (a RuleError
# is a ValueError, so pydantic reports it at the rule's place). It stays hand-written: it
# reads every rule of every describe, and a model of the same document, normalised the same
# way, measured 3.7x slower (20,000 rules: 39 us a rule against 11).
RuleDocument = Annotated[Rule, PlainValidator(rule_from_dict)]


class StepDocument(Input):
    """One API call of a plan: `action` names which."""

    group_id: Text

    def _one_group(self, rules: list[Rule]) -> None:
        if any(r.group_id != self.group_id for r in rules):
            raise ValueError(f"a step for {self.group_id} carries a rule of another group")


class AuthorizeDocument(StepDocument):
    action: Literal["authorize"]
    rules: list[RuleDocument] = Field(min_length=1)

    @model_validator(mode="after")
    def _rules_of_the_group(self) -> AuthorizeDocument:
        self._one_group(self.rules)
        return self

    def to_step(self) -> Authorize:
        return Authorize(self.group_id, tuple(self.rules))


class RevokeDocument(StepDocument):
    action: Literal["revoke"]
    rule_ids: list[Text] = Field(min_length=1)

    def to_step(self) -> Revoke:
        return Revoke(self.group_id, tuple(self.rule_ids))


class ModifyDocument(StepDocument):
    action: Literal["modify"]
    rule_id: Text
    rule: RuleDocument

    @model_validator(mode="after")
    def _rule_of_the_group(self) -> ModifyDocument:
        self._one_group([self.rule])
        return self

    def to_step(self) -> Modify:
        return Modify(self.group_id, self.rule_id, self.rule)


class AdoptDocument(StepDocument):
    action: Literal["adopt"]
    rule_id: Text
    rule: RuleDocument
    previous_description: str  # only the rule that still has it is taken over

    @model_validator(mode="after")
    def _rule_of_the_group(self) -> AdoptDocument:
        self._one_group([self.rule])
        return self

    def to_step(self) -> Adopt:
        return Adopt(self.group_id, self.rule_id, self.rule, self.previous_description)


AnyStep = Annotated[
    AuthorizeDocument | RevokeDocument | ModifyDocument | AdoptDocument,
    Field(discriminator="action"),
]


class PlanDocument(Input):
    """A feasible plan (`Plan.to_dict`): its calls in order. `refused` and `held` are for
    people reading it; an execution re-plans under the locks."""

    feasible: Literal[True]
    steps: list[AnyStep]
    notes: list[str] = Field(default_factory=list)

    def to_plan(self) -> Plan:
        return Plan(tuple(s.to_step() for s in self.steps), tuple(self.notes))


# ---------------------------------------------------------------- the execution input


class PlanRef(Input):
    """A plan the planner stored: its groups are in the plan store under `groups_key`; the
    counts are for people reading the input (the execution re-plans)."""

    groups_key: str = Field(pattern=PLAN_KEY_PATTERN)
    groups: int = Field(ge=1)
    calls: int | None = Field(None, ge=0)
    rules_to_add: int | None = Field(None, ge=0)
    rules_to_remove: int | None = Field(None, ge=0)


class Trigger(Input):
    event_ids: list[str] = Field(default_factory=list)  # the first 50, sorted
    scheduled: bool | None = None  # True: the schedule started it (drift it found)


class ExecutionInput(Input):
    """The execution input: a stored plan's reference (the planner), or a plan inline (by
    hand). `plan_id` is informative: the plan id is always the execution's name."""

    plan_id: str | None = None
    plan_ref: PlanRef | None = None
    plan: PlanDocument | None = None
    trigger: Trigger | None = None


# ---------------------------------------------------------------- the steps' inputs


class CheckRequest(Input):
    input: ExecutionInput
    execution: str = Field(min_length=1)


class GroupsInput(Input):
    """The execution's groups, by reference: the state carries their count only."""

    groups_key: str = Field(min_length=1)
    groups: int = Field(ge=1)


class LockInput(GroupsInput):
    holder: str = Field(min_length=1)


class RefreshInput(GroupsInput):
    plan_id: str


class ApplyInput(Input):
    """One Map item: batch `batch` of a phase stored in the plan store."""

    phase: Literal["authorize", "ordered", "revoke"]
    batch: int = Field(ge=0)
    batches: int = Field(1, ge=1)  # in the phase: how many items share the rate
    plan_id: str
    holder: str
    owner: str = Field(min_length=1)


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


class RollbackInput(Input):
    """One Map item of the rollback: the groups of batch `batch` of the authorize phase (only
    that phase adds rules before a rollback), paced as the apply Maps are."""

    batch: int = Field(ge=0)
    batches: int = Field(1, ge=1)  # how many items share the rate
    plan_id: str
    owner: str = Field(min_length=1)
    holder: str = Field(min_length=1)


class RollbackReportInput(Input):
    """'Sum up the rollback': the items' records in the plan store, and the error that
    started the rollback (for the cause)."""

    mode: Literal["report"]
    plan_id: str
    batches: int = Field(ge=0)
    error: dict[str, Any] | None = None


class StatusChange(Input):
    """The part of a Step Functions "Execution Status Change" event the janitor needs."""

    name: str = Field(min_length=1)
    status: str
    stateMachineArn: str


class StatusChangeEvent(Input):
    detail: StatusChange


# ---------------------------------------------------------------- the phases' items


class PhaseItem(Input):
    """One item of a stored phase (`core.phases.Phases.to_dict`): a group's calls in order."""

    group_id: str
    steps: list[AnyStep]

    def to_steps(self) -> tuple[Step, ...]:
        return tuple(s.to_step() for s in self.steps)


class ApplyItem(PhaseItem):
    """An item as the apply step runs it: its calls, and its desired rules for the live
    guard when it revokes or modifies."""

    steps: list[AnyStep] = Field(min_length=1)
    desired: list[RuleDocument] | None = None
    settle_seconds: int = Field(0, ge=0)  # ordered items: the wait before the call


class StoredPhases(Input):
    """The three phases the refresh stored (their batches joined), without the desired
    rules, which only the apply step reads."""

    authorize: list[PhaseItem]
    ordered: list[PhaseItem]
    revoke: list[PhaseItem]

    def to_phases(self) -> Phases:
        def items(phase: list[PhaseItem]) -> tuple[tuple[str, tuple[Step, ...]], ...]:
            return tuple((item.group_id, item.to_steps()) for item in phase)

        ordered = tuple(s for item in self.ordered for s in item.to_steps())
        return Phases(items(self.authorize), ordered, items(self.revoke))


# ---------------------------------------------------------------- the steps' outputs


class CheckOutput(Output):
    """'Check the plan input' -> `$.checked`."""

    plan_id: str
    groups_key: str
    groups: int


class LocksOutput(Output):
    """'Lock the groups' -> `$.locks.held`."""

    held: int


class ReleaseOutput(Output):
    """'Release the group locks' -> `$.released`."""

    released: int


class OrderedRef(Output):
    """One call of the ordered phase: its batch, and the wait before it."""

    batch: int
    settle_seconds: int


class BatchRefs(Output):
    """The Maps' items: batch numbers (the revoke phase's come from the re-plan)."""

    authorize: list[int]
    ordered: list[OrderedRef]


class PacingOutput(Output):
    concurrency: int  # the Maps' MaxConcurrencyPath
    writes_per_second: float


class Summary(Output):
    """What changed, in numbers and the first notes: the execution's output (contracts.md)."""

    groups: int
    rules_authorized: int
    rules_revoked: int
    rules_modified: int
    rules_adopted: int
    calls: int
    notes: list[str]
    refused: list[str]
    held: str


class RefreshOutput(Output):
    """'Refresh the plan under the locks' -> `$.work.result`."""

    changed: bool
    batches: BatchRefs
    settle_seconds: int
    owner: str
    pacing: PacingOutput
    summary: Summary


class RevokesOutput(Output):
    """'Re-plan the revokes after the settle' -> `$.work.result.revokes`: the revoke
    batches, or why there are none (`deferred`, empty when the revokes go ahead)."""

    revoke: list[int]
    deferred: str


class ApplyOutput(Output):
    """An apply Map item (its output is dropped: OutputPath null)."""

    groups: int
    calls: int


class VerifyOutput(Output):
    """'Verify the new rules are visible' / 'Verify the final state' -> `.verified`."""

    mode: Literal["visible", "final"]
    checked_rules: int


class LeftoverBatchesOutput(Output):
    """'List the groups to check for leftovers' -> `$.leftovers.batches`."""

    batches: list[int]


class LeftoverRecord(Output):
    """What one leftover check found, kept in the plan store (part `leftovers-found#<batch>`):
    the stale rules still there, and per group the desired traffic not allowed now."""

    batch: int
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


class RollbackRecord(Output):
    """What one rollback item did, kept in the plan store (part `rollback#<batch>`), not in
    the execution state: the rules it revoked and handed back (merged over its retries), the
    groups another execution holds now, and its error when it failed."""

    batch: int
    done: bool
    revoked: list[str]
    handed_back: list[str]
    lost: list[str]
    error: str = ""


class RollbackItemOutput(Output):
    """A rollback Map item (its output is dropped: the Map's ResultPath is null)."""

    groups: int
    revoked: int
    handed_back: int


class RollbackOutput(Output):
    """'Sum up the rollback' -> `$.outcome.rollback` (its `cause` ends the execution)."""

    revoked: int
    handed_back: int
    cause: str


class JanitorOutput(Output):
    """The lock janitor's answer (no state machine reads it): `execution` when it released
    a stopped execution's locks, `ignored` when the event was not one."""

    released: int
    execution: str | None = None
    ignored: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)
