"""Local runtime on moto: the template's resources, real ASL and our handlers in one process.

Dev tooling, never deployed. Every hook into moto internals lives in `moto_hooks`.

    with LocalRuntime("template.yaml") as local:
        monitor = InvariantMonitor(local.clients.ec2, group_ids, None, desired_rules)
        with monitor, FaultInjector(Fault("ec2", "RevokeSecurityGroupIngress", "RequestLimitExceeded")):
            result = local.run("ApplyPlanStateMachine", {"plan": plan})
        print(monitor.summary(), local.history(result["executionArn"]))
"""

from sg_reconciler_tools.local.faults import Fault, FaultInjector, FiredFault
from sg_reconciler_tools.local.functions import FunctionSpec, Invocation, LambdaContext
from sg_reconciler_tools.local.monitor import InvariantMonitor, MonitorViolation, Snapshot
from sg_reconciler_tools.local.runtime import Clients, FunctionFailed, LocalRuntime
from sg_reconciler_tools.local.template import Template, TemplateError

__all__ = [
    "Clients",
    "Fault",
    "FaultInjector",
    "FiredFault",
    "FunctionFailed",
    "FunctionSpec",
    "InvariantMonitor",
    "Invocation",
    "LambdaContext",
    "LocalRuntime",
    "MonitorViolation",
    "Snapshot",
    "Template",
    "TemplateError",
]
