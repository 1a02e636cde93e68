"""The steps' contracts against the real ASL: every field a state reads of a task's output
exists in that task's output model, and every Payload a state builds fits the step's input.

The ASL reads step outputs through ResultSelector (`$.Payload.x`), then by state path
(`$.work.result.batches.authorize` in an ItemsPath, `$.work.result.pacing.concurrency` in a
MaxConcurrencyPath, `$.outcome.rollback.cause` in a CausePath, ...). A field renamed on one
side would otherwise only show when an execution runs.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import pytest
from pydantic import BaseModel
from sg_reconciler.app.contracts.apply import ApplyInput, ApplyOutput
from sg_reconciler.app.contracts.execution import CheckOutput, CheckRequest
from sg_reconciler.app.contracts.locks import LockInput, LocksOutput, ReleaseOutput
from sg_reconciler.app.contracts.refresh import RefreshInput, RefreshOutput, RevokesOutput
from sg_reconciler.app.contracts.rollback import (
    RollbackInput,
    RollbackItemOutput,
    RollbackOutput,
    RollbackReportInput,
)
from sg_reconciler.app.contracts.verify import (
    LeftoverBatchesOutput,
    LeftoverCheckInput,
    LeftoverItemOutput,
    LeftoverListInput,
    LeftoversOutput,
    VerifyInput,
    VerifyOutput,
)
from unit.import_names import imported_from

ASL = json.loads(
    (Path(__file__).resolve().parents[3] / "statemachine" / "apply_plan.asl.json").read_text()
)

# (function, the Payload's mode) -> (input model, output model)
STEPS: dict[tuple[str, str | None], tuple[type[BaseModel], type[BaseModel]]] = {
    ("CheckPlanFunctionArn", None): (CheckRequest, CheckOutput),
    ("AcquireLocksFunctionArn", None): (LockInput, LocksOutput),
    ("RefreshPlanFunctionArn", None): (RefreshInput, RefreshOutput),
    ("RefreshPlanFunctionArn", "revokes"): (RefreshInput, RevokesOutput),
    ("ApplyStepsFunctionArn", None): (ApplyInput, ApplyOutput),
    ("VerifyRulesFunctionArn", "visible"): (VerifyInput, VerifyOutput),
    ("VerifyRulesFunctionArn", "final"): (VerifyInput, VerifyOutput),
    ("VerifyRulesFunctionArn", "leftover_batches"): (LeftoverListInput, LeftoverBatchesOutput),
    ("VerifyRulesFunctionArn", None): (LeftoverCheckInput, LeftoverItemOutput),
    ("VerifyRulesFunctionArn", "leftovers"): (VerifyInput, LeftoversOutput),
    ("RollBackFunctionArn", None): (RollbackInput, RollbackItemOutput),
    ("RollBackFunctionArn", "report"): (RollbackReportInput, RollbackOutput),
    ("ReleaseLocksFunctionArn", None): (LockInput, ReleaseOutput),
}
HANDLER_KEYS = {"mode"}  # read by the handler to pick the step, not by the step's model
PATH_KEYS = {"ItemsPath", "MaxConcurrencyPath", "SecondsPath", "Variable", "CausePath"}


def states(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any] | None]]:
    """Every state, with the Map around it (None at the top level)."""

    def walk(
        level: dict[str, Any], parent: dict[str, Any] | None
    ) -> Iterator[tuple[str, dict[str, Any], dict[str, Any] | None]]:
        for name, state in level["States"].items():
            yield name, state, parent
            if "ItemProcessor" in state:
                yield from walk(state["ItemProcessor"], state)

    return walk(doc, None)


def task_step(state: dict[str, Any]) -> tuple[str, str | None]:
    function = state["Parameters"]["FunctionName"].strip("${}")
    payload = state["Parameters"].get("Payload", {})
    return function, payload.get("mode")


def tasks() -> list[tuple[str, dict[str, Any], dict[str, Any] | None]]:
    return [(n, s, m) for n, s, m in states(ASL) if s["Type"] == "Task"]


def unwrap(annotation: Any) -> Any:
    """X from X | None."""
    if get_origin(annotation) in (Union, types.UnionType):
        rest = [a for a in get_args(annotation) if a is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return annotation


def resolve(model: Any, path: list[str]) -> Any:
    """The annotation at `path` in `model`; fails naming the missing field."""
    annotation = model
    for index, name in enumerate(path):
        annotation = unwrap(annotation)
        where = ".".join(path[:index]) or "the output"
        assert isinstance(annotation, type) and issubclass(annotation, BaseModel), (
            f"{'.'.join(path)}: {where} is {annotation}, not an object"
        )
        assert name in annotation.model_fields, (
            f"{'.'.join(path)}: {annotation.__name__} has no field {name!r}"
        )
        annotation = annotation.model_fields[name].annotation
    return annotation


def element(annotation: Any) -> Any:
    annotation = unwrap(annotation)
    assert get_origin(annotation) is list, f"{annotation} is not a list"
    return get_args(annotation)[0]


@functools.cache
def stored_outputs() -> dict[tuple[str, ...], tuple[type[BaseModel], tuple[str, ...]]]:
    """Where each task's output lands in the state: state path -> (model, field path)."""
    stored: dict[tuple[str, ...], tuple[type[BaseModel], tuple[str, ...]]] = {}

    def select(selector: dict[str, Any], at: tuple[str, ...], model: type[BaseModel]) -> None:
        for key, value in selector.items():
            if isinstance(value, dict):
                select(value, (*at, key), model)
            elif key.endswith(".$") and value.startswith("$.Payload"):
                fields = tuple(value.removeprefix("$.Payload").split(".")[1:])
                resolve(model, list(fields))
                stored[(*at, key.removesuffix(".$"))] = (model, fields)

    for _, state, parent in tasks():
        if parent is not None:
            continue  # a Map item's output goes into the Map's result list
        _, output = STEPS[task_step(state)]
        at = tuple(state["ResultPath"].removeprefix("$").split(".")[1:])
        select(state.get("ResultSelector", {}), at, output)
    return stored


def reads(doc: dict[str, Any] = ASL) -> Iterator[str]:
    """Every state path `doc` reads, in paths, parameters and intrinsic functions."""

    def walk(node: Any, key: str = "") -> Iterator[str]:
        if isinstance(node, dict):
            for k, v in node.items():
                yield from walk(v, k)
        elif isinstance(node, list):
            for v in node:
                yield from walk(v, key)
        elif isinstance(node, str) and (key.endswith(".$") or key in PATH_KEYS):
            yield from re.findall(r"(?<!\$)\$(?:\.[A-Za-z_]+)+", node)

    return walk(doc)


def reads_in(processor: dict[str, Any]) -> Iterator[str]:
    """The item fields a Map's processor reads (`$.settle_seconds`): top-level names."""
    return (path.split(".")[1] for path in reads(processor))


def output_at(path: str) -> tuple[type[BaseModel], list[str]] | None:
    """The output model and field path a state path reads, or None when no task wrote it."""
    parts = tuple(path.removeprefix("$").split(".")[1:])
    stored = stored_outputs()
    for cut in range(len(parts), 0, -1):
        if parts[:cut] in stored:
            model, fields = stored[parts[:cut]]
            return model, [*fields, *parts[cut:]]
    return None


def test_every_task_of_the_asl_has_its_contract() -> None:
    found = {task_step(s) for _, s, _ in tasks()}
    assert found == set(STEPS)


@pytest.mark.parametrize("name", [n for n, _, _ in tasks()])
def test_each_payload_a_state_builds_fits_the_steps_input(name: str) -> None:
    state, parent = next((s, m) for n, s, m in tasks() if n == name)
    model, _ = STEPS[task_step(state)]
    payload = state["Parameters"].get("Payload", {})
    if "Payload.$" in state["Parameters"]:  # a Map item: its ItemSelector builds the payload
        assert parent is not None
        payload = parent["ItemSelector"]
    given = {k.removesuffix(".$") for k in payload}
    # Keys the handler reads to pick the step, or the Map's other states read of the item.
    others = HANDLER_KEYS | set(reads_in(parent["ItemProcessor"] if parent else {}))
    required = {n for n, f in model.model_fields.items() if f.is_required()}
    unknown = given - set(model.model_fields) - others
    assert not unknown, f"{name} gives {unknown}, which {model.__name__} does not take"
    assert required <= given, f"{name} does not give {required - given}"


def test_every_output_field_the_asl_reads_exists_in_the_tasks_output_model() -> None:
    resolved = set()
    for path in reads():
        found = output_at(path)
        if found is not None:
            model, fields = found
            resolve(model, fields)
            resolved.add(path)
    # What the execution hinges on was among the paths checked.
    assert {
        "$.checked.plan_id",
        "$.checked.groups_key",
        "$.work.result.changed",
        "$.work.result.batches.authorize",
        "$.work.result.batches.ordered",
        "$.work.result.pacing.concurrency",
        "$.work.result.settle_seconds",
        "$.work.result.owner",
        "$.work.result.summary",
        "$.work.result.revokes.revoke",
        "$.work.result.revokes.deferred",
        "$.outcome.rollback.cause",
        "$.outcome.report.cause",
    } <= resolved


def test_the_map_items_read_fields_of_the_items_their_items_path_lists() -> None:
    maps = [(n, s) for n, s, _ in states(ASL) if s["Type"] == "Map"]
    assert maps
    for name, state in maps:
        found = output_at(state["ItemsPath"])
        assert found is not None, f"{name}: {state['ItemsPath']} is no task's output"
        item = element(resolve(*found))
        for value in state["ItemSelector"].values():
            if isinstance(value, str) and value.startswith("$$.Map.Item.Value."):
                resolve(item, value.removeprefix("$$.Map.Item.Value.").split("."))


def test_a_misspelt_path_would_fail() -> None:
    found = output_at("$.work.result.pacing.concurency")
    assert found is not None
    with pytest.raises(AssertionError, match="no field 'concurency'"):
        resolve(*found)


# Which contract modules each function's import loads (cold start, docs/architecture.md):
# a step's own family and what that family builds on, never every step's models. The planner
# loads the execution input's models only for a batch that plans.
ROOT = Path(__file__).resolve().parents[3]
HANDLER_CONTRACTS = {
    "steps/acquire_locks.py": {"base", "locks"},
    "steps/release_locks.py": {"base", "locks"},
    "steps/check_plan.py": {"base", "execution", "plan"},
    "steps/refresh_plan.py": {"base", "refresh"},
    "steps/apply_steps.py": {"base", "apply", "plan"},
    "steps/verify_rules.py": {"base", "verify"},
    "steps/roll_back.py": {"base", "rollback"},
    "lock_janitor/app.py": {"base", "locks"},
    "planner/app.py": set(),
    "outcome_reporter/app.py": set(),
    "fleet_recorder/app.py": set(),
}


def import_time_statements(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements that run when a module runs `body`: at its top level and in its
    top-level `try`, `if`, `with` and loop blocks, but not in functions, classes or
    `if TYPE_CHECKING:`. (`importlib.import_module` is not seen: the layer does not use it.)"""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            yield from import_time_statements(node.orelse)
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                blocks = getattr(node, field, [])
                for block in blocks:
                    inner = block.body if isinstance(block, ast.ExceptHandler) else [block]
                    yield from import_time_statements(inner)


def module_level_imports(path: Path, module: str) -> set[str]:
    """The sg_reconciler modules `module` (at `path`) imports when it is imported."""
    found: set[str] = set()
    for node in import_time_statements(ast.parse(path.read_text()).body):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            origin = imported_from(node, module, package=path.name == "__init__.py")
            names = [origin] + [f"{origin}.{alias.name}" for alias in node.names]
        found |= {name for name in names if name.startswith("sg_reconciler") and source(name)}
    return found


def source(module: str) -> Path | None:
    base = ROOT / "layers" / Path(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.exists():
            return path
    return None


def loaded_by(handler: Path) -> set[str]:
    """Every sg_reconciler module importing `handler` loads, its packages included."""
    loaded: set[str] = set()
    todo = sorted(module_level_imports(handler, handler.stem))
    while todo:
        module = todo.pop()
        parts = module.split(".")
        for package in (".".join(parts[:i]) for i in range(1, len(parts) + 1)):
            path = source(package)
            if package not in loaded and path is not None:
                loaded.add(package)
                todo += sorted(module_level_imports(path, package))
    return loaded


@pytest.mark.parametrize("handler", sorted(HANDLER_CONTRACTS))
def test_a_function_loads_only_its_own_contracts(handler: str) -> None:
    prefix = "sg_reconciler.app.contracts."
    loaded = loaded_by(ROOT / "functions" / handler)
    families = {module.removeprefix(prefix) for module in loaded if module.startswith(prefix)}
    assert families == HANDLER_CONTRACTS[handler]


def test_the_import_walk_sees_imports_in_blocks_and_relative_ones(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from typing import TYPE_CHECKING\n"
        "try:\n    from sg_reconciler.app.contracts.plan import PlanDocument\n"
        "except ImportError:\n    pass\n"
        "if TYPE_CHECKING:\n    from sg_reconciler.app.contracts import verify\n"
        "from sg_reconciler.app.contracts import rollback\n"
    )
    relative = "from .locks import LockInput\n"
    assert module_level_imports(probe, "probe") == {
        "sg_reconciler.app.contracts.plan",
        "sg_reconciler.app.contracts",
        "sg_reconciler.app.contracts.rollback",
    }
    probe.write_text(relative)
    assert module_level_imports(probe, "sg_reconciler.app.contracts.probe") == {
        "sg_reconciler.app.contracts.locks"
    }


def test_every_function_is_listed() -> None:
    handlers = {str(p.relative_to(ROOT / "functions")) for p in (ROOT / "functions").rglob("*.py")}
    assert handlers == set(HANDLER_CONTRACTS)
