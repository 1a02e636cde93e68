"""The plan and step documents (docs/contracts.md, `core.plan.Plan.to_dict`) and the phases' items
the refresh stores, parsed at the edge into the core's dataclasses."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, PlainValidator, model_validator

from sg_reconciler.app.contracts.base import Input
from sg_reconciler.core.phases import Phases
from sg_reconciler.core.plan import Adopt, Authorize, Modify, Plan, Revoke, Step
from sg_reconciler.core.rules import Rule, rule_from_dict

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


class PhaseItem(Input):
    """One item of a stored phase (`core.phases.Phases.to_dict`): a group's calls in order."""

    group_id: str
    steps: list[AnyStep]

    def to_steps(self) -> tuple[Step, ...]:
        return tuple(s.to_step() for s in self.steps)


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
