"""Local runtime on moto: the template's stack, real ASL and our handlers in one process.

Dev tooling, never deployed. The SAM template becomes a moto CloudFormation stack
(`deployment`; `stack`: package and translate). Faults and observers run in botocore's
`before-send` event around moto's stubber (`interception`); moto is patched only for what
it lacks (`moto_hooks`, and `cfn_workarounds` for its CloudFormation; docs/local-runtime.md).

    with LocalRuntime("template.yaml") as local:
        monitor = InvariantMonitor(local.clients.ec2, group_ids, None, desired_rules)
        with monitor, FaultInjector(Fault("ec2", "RevokeSecurityGroupIngress", "RequestLimitExceeded")):
            result = local.run("ApplyPlanStateMachine", {"plan": plan})
        print(monitor.summary(), local.history(result["executionArn"]))
"""

from sg_reconciler_tools.local.deployment import SkippedResource
from sg_reconciler_tools.local.faults import Fault, FaultInjector, FiredFault
from sg_reconciler_tools.local.functions import FunctionSpec, Invocation, LambdaContext
from sg_reconciler_tools.local.monitor import InvariantMonitor, MonitorViolation, Snapshot
from sg_reconciler_tools.local.runtime import Clients, FunctionFailed, LocalRuntime
from sg_reconciler_tools.local.stack import TemplateError

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
    "SkippedResource",
    "Snapshot",
    "TemplateError",
]
