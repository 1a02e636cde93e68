"""Run the template's Lambda handlers in this process, as Lambda would call them.

moto's Lambda without Docker runs nothing; the dispatcher here receives each invocation
(from a state machine Task or a direct `lambda:Invoke`), imports the function's handler
from its `CodeUri` under a module name unique to the function (two functions may both
ship an `app.py`), sets the function's environment while it runs, and answers with the
handler's result or, for an exception, Lambda's error payload (`errorType` is the
exception's class name, which Step Functions matches in Retry and Catch).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from sg_reconciler_tools.local.moto_hooks import LambdaResult

UNHANDLED = "Unhandled"


@dataclass(frozen=True)
class FunctionSpec:
    """One function of the template, as deployed locally."""

    logical_id: str
    name: str
    arn: str
    code_dir: Path
    handler: str  # "module.function", module dotted below code_dir
    environment: Mapping[str, str] = field(default_factory=dict)
    timeout_seconds: int = 3
    memory_mb: int = 128

    @property
    def module_file(self) -> Path:
        module, _, _ = self.handler.rpartition(".")
        if not module:
            raise ValueError(f"{self.logical_id}: Handler {self.handler!r} is not module.function")
        base = self.code_dir.joinpath(*module.split("."))
        plain = base.with_suffix(".py")
        return (
            plain if plain.exists() or not (base / "__init__.py").exists() else base / "__init__.py"
        )


@dataclass
class LambdaContext:
    """The attributes and method of Lambda's context object that handlers and Powertools use."""

    function_name: str
    invoked_function_arn: str
    memory_limit_in_mb: int
    timeout_seconds: int
    function_version: str = "$LATEST"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    log_group_name: str = ""
    log_stream_name: str = "local"
    _started: float = field(default_factory=time.monotonic, repr=False)

    def __post_init__(self) -> None:
        self.log_group_name = self.log_group_name or f"/aws/lambda/{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        elapsed = time.monotonic() - self._started
        return max(0, int((self.timeout_seconds - elapsed) * 1000))


@dataclass(frozen=True)
class Invocation:
    """One handler call, for tests to assert on."""

    logical_id: str
    event: Any
    result: Any = None
    error_type: str | None = None
    error_message: str | None = None

    @property
    def failed(self) -> bool:
        return self.error_type is not None


class HandlerHost:
    """Imports handlers once per function (a warm container) and calls them."""

    def __init__(self, functions: Iterable[FunctionSpec], base_environment: Mapping[str, str]):
        self._by_name = {spec.name: spec for spec in functions}
        self._base_environment = dict(base_environment)
        self._modules: dict[str, ModuleType] = {}
        # Handlers share os.environ: invocations of one function run at once (a Map's items,
        # as Lambda would), another function's wait until they are done.
        self._lock = threading.RLock()
        self._turn = threading.Condition(self._lock)
        self._active: tuple[str | None, int] = (None, 0)  # whose environment is set, how many
        self._invocations: list[Invocation] = []
        self._added: set[str] = set()  # environment keys the handlers added
        self._saved: dict[str, str | None] = {}  # what the active function's environment hid
        # Called with (logical id, event) right before a handler runs: a test plays an
        # outside writer at an exact point of an execution (between two states).
        self.before_invoke: list[Callable[[str, Any], None]] = []

    @property
    def functions(self) -> list[FunctionSpec]:
        return list(self._by_name.values())

    @property
    def invocations(self) -> list[Invocation]:
        with self._lock:
            return list(self._invocations)

    def dispatch(self, function_name: str, payload: bytes) -> LambdaResult:
        """Entry point for `moto_hooks.patch_lambda_invoke`."""
        spec = self._by_name.get(function_name)
        if spec is None:
            message = f"function {function_name} has no local handler"
            return _error_result("Runtime.HandlerNotFound", message)
        try:
            event = json.loads(payload.decode("utf-8")) if payload.strip() else {}
        except ValueError as error:
            return _error_result("Runtime.UnmarshalError", f"payload is not JSON: {error}")
        for listener in list(self.before_invoke):
            listener(spec.logical_id, event)
        with self._turn_of(spec):
            result, outcome = self._call(spec, event)
        with self._lock:
            self._invocations.append(outcome)
        return result

    @contextmanager
    def _turn_of(self, spec: FunctionSpec) -> Iterator[None]:
        with self._turn:
            first = self._take_turn(spec)
        try:
            if first:
                # Import once, before a second invocation may start (the turn is ours); an
                # import error is reported by `_call`, like any handler error.
                with contextlib.suppress(Exception):
                    self._handler(spec)
            yield
        finally:
            with self._turn:
                self._give_turn()

    @contextmanager
    def step_aside(self) -> Iterator[None]:
        """Called inside an invocation: give up its turn (other functions may run, as in
        their own sandboxes), then wait for the turn of its function again. The handler's
        configuration was read when it started, so the environment may change meanwhile."""
        with self._turn:
            owner, count = self._active
            if owner is None or count == 0:
                raise RuntimeError("step_aside is for code running inside a handler")
            spec = self._by_logical_id(owner)
            self._give_turn()
        try:
            yield
        finally:
            with self._turn:
                self._take_turn(spec)

    def _take_turn(self, spec: FunctionSpec) -> bool:
        """With `_turn` held: wait until no other function runs, then count one more
        invocation of this one; True for the first (its environment was just set)."""
        while self._active[1] and self._active[0] != spec.logical_id:
            self._turn.wait()
        first = self._active[1] == 0
        if first:
            self._set_environment(spec)
        self._active = (spec.logical_id, self._active[1] + 1)
        return first

    def _give_turn(self) -> None:
        """With `_turn` held: one invocation fewer; the last restores the environment."""
        owner, count = self._active
        self._active = (owner if count > 1 else None, count - 1)
        if count == 1:
            self._restore_environment()
            self._turn.notify_all()

    def _by_logical_id(self, logical_id: str) -> FunctionSpec:
        return next(s for s in self._by_name.values() if s.logical_id == logical_id)

    def _call(self, spec: FunctionSpec, event: Any) -> tuple[LambdaResult, Invocation]:
        context = LambdaContext(
            function_name=spec.name,
            invoked_function_arn=spec.arn,
            memory_limit_in_mb=spec.memory_mb,
            timeout_seconds=spec.timeout_seconds,
        )
        try:
            with self._lock:
                handler = self._handler(spec)
            value = handler(event, context)
        except Exception as error:
            kind = type(error).__name__
            failure = _error_result(kind, str(error), error)
            return failure, Invocation(spec.logical_id, event, None, kind, str(error))
        finally:
            drop_unpublished_metrics()
        try:
            body = json.dumps(value).encode("utf-8")
        except (TypeError, ValueError) as error:
            message = f"handler result is not JSON: {error}"
            failed = Invocation(spec.logical_id, event, None, "Runtime.MarshalError", message)
            return _error_result("Runtime.MarshalError", message), failed
        return LambdaResult(body), Invocation(spec.logical_id, event, value)

    def _handler(self, spec: FunctionSpec) -> Any:
        module = self._modules.get(spec.logical_id)
        if module is None:
            module = _import_file(module_name(spec), spec.module_file)
            self._modules[spec.logical_id] = module
        function = getattr(module, spec.handler.rpartition(".")[2], None)
        if not callable(function):
            raise AttributeError(f"{spec.module_file} has no handler {spec.handler!r}")
        return function

    def _set_environment(self, spec: FunctionSpec) -> None:
        wanted = {
            **self._base_environment,
            "AWS_LAMBDA_FUNCTION_NAME": spec.name,
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(spec.memory_mb),
            "_HANDLER": spec.handler,
            "LAMBDA_TASK_ROOT": str(spec.code_dir),
            **spec.environment,
            "POWERTOOLS_TRACE_DISABLED": "true",  # no X-Ray daemon here
        }
        self._saved = {key: os.environ.get(key) for key in wanted}
        self._added.update(key for key, value in self._saved.items() if value is None)
        os.environ.update(wanted)

    def _restore_environment(self) -> None:
        # Restore what was there; keys that were absent stay until `unload`: the
        # interpreter's threads read os.environ concurrently and a key vanishing between
        # their check and their read raised KeyError (failing executions at random).
        for key, value in self._saved.items():
            if value is not None:
                os.environ[key] = value

    def unload(self) -> None:
        """Forget the imported handler modules (the next runtime imports them afresh) and the
        environment variables the handlers added."""
        with self._lock:
            for key in self._added:
                os.environ.pop(key, None)
            self._added.clear()
            for module in self._modules.values():
                sys.modules.pop(module.__name__, None)
            self._modules.clear()


def drop_unpublished_metrics() -> None:
    """End an invocation with no metrics left, as a published flush leaves it: with metrics
    disabled (as here), Powertools keeps every value and, at 100 of one metric, prints the
    set to stdout whatever the setting, into a caller's output (`demo --json`)."""
    observability = sys.modules.get("sg_reconciler.observability")
    if observability is not None:
        observability.metrics.clear_metrics()


def module_name(spec: FunctionSpec) -> str:
    """A module name unique to the function, so two `app.py` files never collide."""
    module = spec.handler.rpartition(".")[0]
    return "sg_reconciler_local_" + re.sub(r"\W", "_", f"{spec.logical_id}__{module}")


def _import_file(name: str, path: Path) -> ModuleType:
    if not path.is_file():
        raise FileNotFoundError(f"handler module {path} does not exist")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pydantic look their module up here
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _error_result(kind: str, message: str, error: BaseException | None = None) -> LambdaResult:
    document: dict[str, Any] = {"errorType": kind, "errorMessage": message}
    if error is not None:
        document["stackTrace"] = traceback.format_tb(error.__traceback__)
    return LambdaResult(json.dumps(document).encode("utf-8"), UNHANDLED)
