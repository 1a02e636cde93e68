"""The steps' contracts with the state machine (statemachine/apply_plan.asl.json), as models.

One module per document family, so that a function builds only the models it reads or
returns (cold start: docs/architecture.md); nothing is imported here.

- `execution`: the execution input (docs/contracts.md), what the planner starts an
  execution with or a plan given by hand, and "Check the plan input".
- `plan`: the plan and step documents (docs/contracts.md, written by
  `core.plan.Plan.to_dict`), parsed at the edge into the core's dataclasses (`to_plan`,
  `to_step`), and the phases' items the refresh stores in the plan store.
- `locks`, `refresh`, `apply`, `verify`, `rollback`: each step's input (what a state's
  Parameters or ItemSelector build; unknown keys ignored, a bad one is an InvalidPlan naming
  the field) and output (what the ASL's ResultSelector, ItemsPath, MaxConcurrencyPath,
  SecondsPath and Choice states read). The steps build these models and return their
  `model_dump()`, so a field the ASL reads cannot go missing unnoticed: tests/unit/app/
  test_contracts.py resolves every such path of the ASL against them.
"""
