"""Starting and stopping the local runtime: parameters, clean-up, failed starts, and what
the handler host and the pacer patch leave behind when something fails.

These tests build their own runtime, so they live apart from the modules that share one.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest
from sg_reconciler_tools.local import LocalRuntime, SkippedResource, TemplateError
from sg_reconciler_tools.local.functions import FunctionSpec, HandlerHost, module_name

TEMPLATE = Path(__file__).parent / "fixtures" / "template.yaml"


def test_parameters_override_defaults_and_stop_undoes_everything() -> None:
    from moto.awslambda_simple.models import LambdaSimpleBackend

    original_invoke = LambdaSimpleBackend.invoke
    with LocalRuntime(TEMPLATE, parameters={"SettleSeconds": "5", "Owner": "team-a"}) as local:
        result = local.run(
            "ApplyStateMachine",
            {"request_id": "param-1", "flaky_failures": 0, "groups": [], "fail": False},
        )
        owner = local.invoke("StepsFunction", {"action": "environment", "keys": ["OWNER"]})
        assert LambdaSimpleBackend.invoke is not original_invoke
    assert result["status"] == "SUCCEEDED"
    assert local.waits.snapshot() == [5.0]
    assert owner == {"OWNER": "team-a"}
    assert LambdaSimpleBackend.invoke is original_invoke
    assert not [name for name in sys.modules if name.startswith("sg_reconciler_local_")]


def test_a_missing_substitution_fails_the_start_and_cleans_up(tmp_path: Path) -> None:
    (tmp_path / "machine.asl.json").write_text(
        json.dumps(
            {"StartAt": "A", "States": {"A": {"Type": "Pass", "Result": "${Nope}", "End": True}}}
        )
    )
    (tmp_path / "template.yaml").write_text(
        "Transform: AWS::Serverless-2016-10-31\n"
        "Resources:\n"
        "  Machine:\n"
        "    Type: AWS::Serverless::StateMachine\n"
        "    Properties:\n"
        "      DefinitionUri: machine.asl.json\n"
    )
    from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl

    with pytest.raises(TemplateError, match=r"\$\{Nope\}"):
        LocalRuntime(tmp_path / "template.yaml").start()
    assert getattr(retrier_decl, "time").__name__ == "time"  # noqa: B009 - not exported  # hooks undone after the failed start


def test_a_runtime_starts_again_after_a_stop_on_a_fresh_moto() -> None:
    """The second start uploads the artifacts again (moto's S3 is new) and runs."""
    local = LocalRuntime(TEMPLATE)
    request = {"request_id": "again-1", "flaky_failures": 0, "groups": [], "fail": False}
    with local:
        first = local.run("ApplyStateMachine", request)
    with local:
        second = local.run("ApplyStateMachine", {**request, "request_id": "again-2"})
    assert (first["status"], second["status"]) == ("SUCCEEDED", "SUCCEEDED")


def test_a_failed_start_reports_its_own_error_not_an_earlier_starts(tmp_path: Path) -> None:
    """Stopping after a failed start aborts no execution of an earlier start's stack."""
    local = LocalRuntime(TEMPLATE)
    with local:
        pass
    bad = tmp_path / "missing-dir"  # the functions' code is gone: packaging fails
    local.deployment.handlers_root = bad
    with pytest.raises(TemplateError, match="missing-dir"):
        local.start()
    assert LocalRuntime._running is None, "the failed start left the runtime running"
    with pytest.raises(RuntimeError, match="not started"):
        local.arn("ApplyStateMachine")  # the earlier start's stack is not this one's
    with pytest.raises(RuntimeError, match="not started"):
        local.ref("Owner")  # nor are its parameters' values


def test_running_executions_are_aborted_before_the_mock_stops() -> None:
    with LocalRuntime(TEMPLATE) as local:
        (steps,) = [spec for spec in local.functions if spec.logical_id == "StepsFunction"]
        document = {"request_id": "blocked", "flaky_failures": 0, "groups": [], "fail": False}
        arn = local.start_execution("ApplyStateMachine", document)
        # Until the handler module has run far enough to define BLOCKED (it is in sys.modules
        # while it still executes), then until its call is waiting, not before.
        deadline = time.monotonic() + 10
        handler = None
        while time.monotonic() < deadline:
            handler = sys.modules.get(module_name(steps))
            if getattr(handler, "BLOCKED", None) is not None:
                break
            time.sleep(0.01)
        assert handler is not None and handler.BLOCKED.wait(timeout=10)
        release = handler.RELEASE
        try:
            aborted = local.abort_running()
        finally:
            release.set()  # the blocked task returns into a stopped execution
        described = local.wait_for(arn)
        # ABORTED at once, as on AWS; the interpreter's thread records the end once the
        # blocked task has returned into the stopped execution
        deadline = time.monotonic() + 10
        while ("", "ExecutionAborted") not in local.history(arn) and time.monotonic() < deadline:
            time.sleep(0.01)
        last = local.history(arn)[-1]
    assert aborted == [arn]
    assert described["status"] == "ABORTED"
    assert last == ("", "ExecutionAborted")


def test_only_one_runtime_runs_at_a_time() -> None:
    with LocalRuntime(TEMPLATE), pytest.raises(RuntimeError, match="another LocalRuntime"):
        LocalRuntime(TEMPLATE).start()
    with LocalRuntime(TEMPLATE) as again:  # the first one stopped cleanly
        assert again.physical_name("LocksTable").startswith("sg-reconciler-local-LocksTable-")


APP = Path(__file__).parents[3] / "template.yaml"
APP_ALARMS = [
    "ExecutionsFailedAlarm",
    "ExecutionsTimedOutAlarm",
    "ExecutionsAbortedAlarm",
    "DeadLetterDepthAlarm",
    "PlanRefusalsAlarm",
    "RevokesHeldAlarm",
    "PlanFailuresAlarm",
]


def test_the_app_template_deploys_locally() -> None:
    """The repository's own template.yaml becomes a stack; moto skips only what it has no
    model for (the queue policy and the alarms), and lists nothing else."""
    with LocalRuntime(APP) as local:
        machines = local.clients.stepfunctions.list_state_machines()["stateMachines"]
        functions = local.functions
        skipped = local.skipped
        status = local.clients.stepfunctions.describe_state_machine(
            stateMachineArn=local.arn("ApplyPlanStateMachine")
        )["status"]
    assert [m["stateMachineArn"] for m in machines] == [local.arn("ApplyPlanStateMachine")]
    assert status == "ACTIVE"
    assert len(functions) == 9, "the app template's functions are not all hosted"
    missing = [f"{f.logical_id}: {f.module_file}" for f in functions if not f.module_file.is_file()]
    assert not missing, f"handlers without a module file: {missing}"
    assert skipped == [
        SkippedResource("EventQueuePolicy", "AWS::SQS::QueuePolicy"),
        *(SkippedResource(alarm, "AWS::CloudWatch::Alarm") for alarm in APP_ALARMS),
    ]


def test_the_alarm_email_subscription_is_skipped_when_it_is_wanted() -> None:
    with LocalRuntime(APP, parameters={"AlarmEmail": "ops@example.com"}) as local:
        skipped = local.skipped
    assert SkippedResource("AlarmEmailSubscription", "AWS::SNS::Subscription") in skipped


def test_a_handler_that_exits_on_import_gives_its_turn_back(tmp_path: Path) -> None:
    """SystemExit is no Exception: it leaves the invocation, and the next function still runs
    (it waited for a turn the exiting one never gave back)."""
    for name, body in {
        "exits": "raise SystemExit(3)\n",
        "fine": "def handler(e, c):\n    return 1\n",
    }.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "app.py").write_text(body)
    host = HandlerHost(
        [
            FunctionSpec(name, name, f"arn:{name}", tmp_path / name, "app.handler")
            for name in ("exits", "fine")
        ],
        {},
    )
    with pytest.raises(SystemExit):
        host.dispatch("exits", b"{}")
    answered: list[bytes] = []
    other = threading.Thread(
        target=lambda: answered.append(host.dispatch("fine", b"{}").payload), daemon=True
    )
    other.start()
    other.join(timeout=5)
    assert answered == [b"1"], "the next function waited for a turn never given back"
    host.unload()


def test_the_pacer_patch_restores_what_it_set_and_undoes_it_all_if_it_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sg_reconciler.adapters import pacing
    from sg_reconciler_tools.local.patching import HookError
    from sg_reconciler_tools.local.runtime import patch_pacer

    real = pacing.clock, pacing.sleep
    with patch_pacer(print, time.monotonic):
        assert (pacing.clock, pacing.sleep) == (time.monotonic, print)
    assert (pacing.clock, pacing.sleep) == real
    monkeypatch.delattr(pacing, "clock")  # a later replace fails: the earlier is undone
    with pytest.raises(HookError, match="clock is gone"):
        patch_pacer(print, time.monotonic)
    assert pacing.sleep is real[1]
