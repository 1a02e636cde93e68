"""Cold start as deployed: the import of each handler in a fresh interpreter, against a bare
`import boto3` and against boto3 + Powertools Logger/Metrics, and the cold CPU of one execution.

"As deployed" means what the Lambda runtime does on a cold start (docs/architecture.md, "Cold start"):

- each function's code in its own task root (LAMBDA_TASK_ROOT, first on the path), our layer
  after it (as /opt/python), copied from the tree without any `__pycache__`, and no bytecode
  written for it (/var/task is read-only: `-B`, PYTHONDONTWRITEBYTECODE=1);
- the environment template.yaml gives the function (Globals and its own Environment, `!Ref`s
  resolved to placeholders), AWS_LAMBDA_FUNCTION_NAME and the region set, and the Tracer on
  (POWERTOOLS_TRACE_DISABLED unset: the stack sets `Tracing: Active`);
- a fresh interpreter per measurement; the figure is the median over `repeat` processes, the
  targets interleaved so that a noisy moment falls on all of them alike.

Cold CPU per execution: the CPU of the imports of every function one cold execution starts, the
planner plus each Lambda the state machine invokes on the success path (read from
statemachine/apply_plan.asl.json: the states reachable from StartAt without a Catch).

The figures of a git ref (`--before REF`, by default the commit this work started from) are
measured the same way, from `git archive` of that ref, in the same rounds as the working
tree's (each round runs every target of both), for the before/after rows.

Run: .venv/bin/python -m benchmarks.bench_cold_start [--repeat N] [--before REF]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
BEFORE_REF = "ebd82ee"  # ports-fakes, before the cold-start work (docs/extending.md, "Cold start")
REGION = "eu-west-1"

# Runs in the fresh interpreter: times the statement given as argv[1] (wall and CPU).
CHILD = """\
import sys, time
c = time.process_time(); t = time.perf_counter()
exec(sys.argv[1])
t = time.perf_counter() - t; c = time.process_time() - c
print(t, c, len(sys.modules))
"""

BOTO3 = "import boto3"
POWERTOOLS = (
    "import boto3\n"
    "from aws_lambda_powertools import Logger, Metrics\n"
    "Logger(service='sg-reconciler'); Metrics(service='sg-reconciler', namespace='SGReconciler')"
)
# What any step with typed contracts imports before our code: boto3, Powertools as the stack
# runs it (the Tracer on, patching botocore) and pydantic with one small model.
CONTRACT_FLOOR = (
    POWERTOOLS + "\nfrom aws_lambda_powertools import Tracer\n"
    "Tracer(service='sg-reconciler', patch_modules=('botocore',))\n"
    "from pydantic import BaseModel\n"
    "class Input(BaseModel):\n    plan_id: str\n"
    "Input(plan_id='p')"
)
# The floor with Powertools Parser's `parse`, which the planner reads its records with (its
# own two envelope models are built by the first event), and with Parser's SQS and
# EventBridge models, which it read them with before: what each costs beyond the floor.
PARSER = CONTRACT_FLOOR + "\nfrom aws_lambda_powertools.utilities.parser import parse"
PARSER_MODELS = (
    CONTRACT_FLOOR + "\nfrom aws_lambda_powertools.utilities.parser.models import "
    "EventBridgeModel, SqsRecordModel"
)
BASELINES = (
    "import boto3",
    "boto3 + Powertools Logger/Metrics",
    "floor with typed contracts",
    "floor + Parser's parse",
    "floor + Parser's SQS and EventBridge models",
)


class _CfnLoader(yaml.SafeLoader):
    """Reads template.yaml with its CloudFormation tags (`!Ref X` -> {"Ref": X}, ...)."""


def _cfn_tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    return {suffix: value}


_CfnLoader.add_multi_constructor("!", _cfn_tag)


def _resolve(value: Any, parameters: dict[str, Any], name: str) -> str:
    """A placeholder for an env value: a parameter's default, else a plausible ARN or name."""
    if isinstance(value, (str, int, float)):
        return str(value)
    if isinstance(value, dict) and "Ref" in value:
        ref = value["Ref"]
        if ref in parameters and str(parameters[ref].get("Default", "")) != "":
            return str(parameters[ref]["Default"])
        if ref == "AWS::AccountId":
            return "123456789012"
        if ref == "AWS::StackName":
            return "sg-reconciler"
        if ref == "AWS::StackId":
            return f"arn:aws:cloudformation:{REGION}:123456789012:stack/sg-reconciler/1"
        if "StateMachine" in ref:
            return f"arn:aws:states:{REGION}:123456789012:stateMachine:{ref}"
        return f"sg-reconciler-{ref}"
    if isinstance(value, dict) and "If" in value:
        return _resolve(value["If"][1], parameters, name)
    if isinstance(value, dict) and "Join" in value:
        sep, parts = value["Join"]
        return str(sep).join(_resolve(p, parameters, name) for p in parts)
    if isinstance(value, dict) and "GetAtt" in value:
        return f"arn:aws:iam::123456789012:role/{str(value['GetAtt']).split('.')[0]}"
    return f"sg-reconciler-{name.lower()}"


def deployed_functions(root: Path = ROOT) -> dict[str, dict[str, Any]]:
    """Each Lambda of the template: its folder, handler module and deployed environment."""
    template = yaml.load((root / "template.yaml").read_text(), Loader=_CfnLoader)
    parameters = template.get("Parameters", {})
    globals_env = template["Globals"]["Function"]["Environment"]["Variables"]
    functions: dict[str, dict[str, Any]] = {}
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] != "AWS::Serverless::Function":
            continue
        props = resource["Properties"]
        variables = {**globals_env, **props.get("Environment", {}).get("Variables", {})}
        env = {k: _resolve(v, parameters, k) for k, v in variables.items()}
        env.update(
            {
                "AWS_LAMBDA_FUNCTION_NAME": f"sg-reconciler-{logical_id}",
                "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(props.get("MemorySize", 256)),
                "AWS_REGION": REGION,
                "AWS_DEFAULT_REGION": REGION,
                "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13",
            }
        )
        module, _, function = props["Handler"].rpartition(".")
        functions[logical_id] = {
            "folder": str(props["CodeUri"]).rstrip("/"),
            "module": module,
            "handler": function,
            "env": env,
        }
    return functions


def cold_execution_functions(root: Path = ROOT) -> list[str]:
    """The Lambdas (template logical ids) one execution invokes on the success path: the Task
    states reachable from StartAt by Next, Default, Choices and Map item processors (no Catch)."""
    asl = json.loads((root / "statemachine" / "apply_plan.asl.json").read_text())
    found: list[str] = []

    def walk(states: dict[str, Any], start: str) -> None:
        todo, seen = [start], set()
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            state = states[name]
            target = (state.get("Arguments") or state.get("Parameters") or {}).get("FunctionName")
            if state["Type"] == "Task" and isinstance(target, str):
                logical = target.removeprefix("${").removesuffix("Arn}")
                if logical not in found:
                    found.append(logical)
            if state["Type"] == "Map":
                processor = state.get("ItemProcessor") or state["Iterator"]
                walk(processor["States"], processor["StartAt"])
            todo += [state[k] for k in ("Next", "Default") if k in state]
            todo += [c["Next"] for c in state.get("Choices", [])]

    walk(asl["States"], asl["StartAt"])
    return found


def stage(destination: Path, ref: str | None = None) -> Path:
    """Our layer, functions, template and state machine as SAM packages them (no bytecode):
    from the working tree, or from `git archive` of `ref`."""
    parts = ["layers/sg_reconciler", "functions", "template.yaml", "statemachine"]
    destination.mkdir(parents=True)
    if ref is None:
        for part in parts:
            source = ROOT / part
            if source.is_dir():
                shutil.copytree(
                    source, destination / part, ignore=shutil.ignore_patterns("__pycache__")
                )
            else:
                shutil.copy2(source, destination / part)
    else:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", ref, *parts], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(destination)], input=archive, check=True)
    return destination


def _one_function_module(staged: Path, modules: list[str]) -> str:
    """A copy's option (3): one Lambda for every step, its handler importing each step's."""
    name = "all_steps"
    (staged / "functions" / "steps" / f"{name}.py").write_text(
        "".join(f"import {m}  # noqa: F401\n" for m in modules)
    )
    return name


def _run(statement: str, cwd: Path, pythonpath: list[Path], env: dict[str, str]) -> list[float]:
    full_env = {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPATH": ":".join(str(p) for p in pythonpath),
        "LAMBDA_TASK_ROOT": str(cwd),
        **env,
    }
    out = subprocess.run(
        [sys.executable, "-B", "-c", CHILD, statement],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        check=True,
    )
    return [float(x) for x in out.stdout.split()]


Target = tuple[str, Path, dict[str, str]]  # (statement, working directory, environment)


def targets(staged: Path) -> dict[str, Target]:
    """The baselines, each handler's import and one function for every step, in `staged`."""
    functions = deployed_functions(staged)
    found: dict[str, Target] = {}
    any_env = next(iter(functions.values()))["env"]
    found["import boto3"] = (BOTO3, staged, {"AWS_REGION": REGION})
    found["boto3 + Powertools Logger/Metrics"] = (POWERTOOLS, staged, any_env)
    found["floor with typed contracts"] = (CONTRACT_FLOOR, staged, any_env)
    found["floor + Parser's parse"] = (PARSER, staged, any_env)
    found["floor + Parser's SQS and EventBridge models"] = (PARSER_MODELS, staged, any_env)
    for logical, f in functions.items():
        statement = f"import {f['module']} as m; m.{f['handler']}"
        found[logical] = (statement, staged / f["folder"], f["env"])
    steps = [f["module"] for f in functions.values() if f["folder"] == "functions/steps"]
    module = _one_function_module(staged, sorted(set(steps)))
    env = {
        **functions["ApplyStepsFunction"]["env"],
        "AWS_LAMBDA_FUNCTION_NAME": "sg-reconciler-StepsFunction",
    }
    found["one function for every step"] = (f"import {module}", staged / "functions/steps", env)
    return found


def measure(trees: dict[str, Path], repeat: int) -> dict[str, dict[str, Any]]:
    """Median wall and CPU of each handler's import and of the baselines, for each staged
    tree. Every round runs every target of every tree, the trees' order turning from round
    to round, so the machine's slow and fast moments fall on all of them alike and the trees
    compare within one run."""
    every = {tag: targets(staged) for tag, staged in trees.items()}
    samples: dict[str, dict[str, list[list[float]]]] = {
        tag: {name: [] for name in found} for tag, found in every.items()
    }
    tags = list(every)
    for round_ in range(repeat):
        for tag in tags[round_ % len(tags) :] + tags[: round_ % len(tags)]:
            layer = trees[tag] / "layers"
            for name, (statement, cwd, env) in every[tag].items():
                samples[tag][name].append(_run(statement, cwd, [cwd, layer], env))
    return {tag: _figures(trees[tag], runs) for tag, runs in samples.items()}


def _figures(staged: Path, samples: dict[str, list[list[float]]]) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for name, runs in samples.items():
        figures[name] = {
            "wall_s": round(statistics.median(r[0] for r in runs), 4),
            "cpu_s": round(statistics.median(r[1] for r in runs), 4),
            "modules": int(statistics.median(r[2] for r in runs)),
        }
    boto3, powertools = figures["import boto3"], figures["boto3 + Powertools Logger/Metrics"]
    floor = figures["floor with typed contracts"]
    for f in figures.values():
        f["x_boto3"] = round(f["wall_s"] / boto3["wall_s"], 2)
        f["x_powertools"] = round(f["wall_s"] / powertools["wall_s"], 2)
        f["cpu_x_boto3"] = round(f["cpu_s"] / boto3["cpu_s"], 2)
        f["cpu_x_powertools"] = round(f["cpu_s"] / powertools["cpu_s"], 2)
        f["cpu_x_floor"] = round(f["cpu_s"] / floor["cpu_s"], 2)
    per_execution = ["PlannerFunction", *cold_execution_functions(staged)]
    return {
        "imports": figures,
        "execution_functions": per_execution,
        "cold_cpu_per_execution_s": round(sum(figures[f]["cpu_s"] for f in per_execution), 3),
        "cold_cpu_per_execution_one_function_s": round(
            figures["PlannerFunction"]["cpu_s"] + figures["one function for every step"]["cpu_s"],
            3,
        ),
    }


def run_benchmark(repeat: int = 7, before: str | None = BEFORE_REF) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="sg-cold-") as tmp:
        trees = {"after": stage(Path(tmp) / "after")}
        if before is not None:
            known = subprocess.run(
                ["git", "-C", str(ROOT), "cat-file", "-e", f"{before}^{{commit}}"],
                capture_output=True,
            )
            if known.returncode == 0:
                trees["before"] = stage(Path(tmp) / "before", before)
        figures: dict[str, Any] = {"repeat": repeat, **measure(trees, repeat)}
        if "before" in trees:
            figures["before_ref"] = before
        return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--before", default=BEFORE_REF, help="git ref to compare; '' for none")
    args = parser.parse_args()
    print(json.dumps(run_benchmark(args.repeat, args.before or None), indent=2))


if __name__ == "__main__":
    os.environ.pop("POWERTOOLS_TRACE_DISABLED", None)
    main()
