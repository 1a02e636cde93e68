"""`sg-reconciler`: plan security-group changes make-before-break, and the demo.

Exit codes of `plan`: 0 a plan (possibly empty), 2 bad input, 3 no safe plan exists (refused).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from botocore.exceptions import BotoCoreError, ClientError
from sg_reconciler.adapters.clients import make_clients
from sg_reconciler.core.plan import Plan, Refusal
from sg_reconciler.core.planner import Limits, make_plan
from sg_reconciler.core.rules import DEFAULT_MAX_RULES_PER_GROUP, DEFAULT_OWNER, RuleError
from sg_reconciler.policy import PolicyError, load_policy_file
from sg_reconciler.reconcile import LivePlan, compute_live_plan

from sg_reconciler_tools.plan_files import InputError, load_current, load_desired
from sg_reconciler_tools.render import render_plan

EXIT_BAD_INPUT = 2
EXIT_REFUSED = 3


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit code 2, like every bad input."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise InputError(f"{message} (see '{self.prog} --help')")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="sg-reconciler",
        description="Keep security-group ingress rules in line with load balancers, make-before-break.",
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    plan = commands.add_parser(
        "plan",
        help="compute the ordered EC2 calls from current to desired rules (never writes)",
        description=(
            "Plan the change from the current rules to the desired managed rules: every "
            "authorization before any revocation, within each group's rule quota. "
            "Exit 0 with a plan, 2 on bad input, 3 when no safe order exists."
        ),
    )
    plan.add_argument(
        "--current",
        type=Path,
        metavar="C.json",
        help="output of 'aws ec2 describe-security-group-rules' (offline mode)",
    )
    plan.add_argument(
        "--desired",
        type=Path,
        metavar="D.json",
        help="every desired managed ingress rule of the groups in scope, same shape (offline mode)",
    )
    live = plan.add_argument_group(
        "live mode", "read the account (or a local moto server) instead of files; never writes"
    )
    live.add_argument(
        "--live", action="store_true", help="derive current and desired rules from the account"
    )
    live.add_argument(
        "--policy",
        type=Path,
        metavar="FILE",
        help="policy file, YAML or JSON (owner and quota come from it, not from the options)",
    )
    live.add_argument("--region", help="AWS region (default: the profile's or environment's)")
    live.add_argument("--profile", help="AWS named profile")
    live.add_argument(
        "--endpoint-url", metavar="URL", help="e.g. a moto server, http://127.0.0.1:5000"
    )
    plan.add_argument(
        "--max-rules-per-group",
        type=_positive,
        default=DEFAULT_MAX_RULES_PER_GROUP,
        metavar="N",
        help="ingress rule quota per group (default %(default)s)",
    )
    plan.add_argument(
        "--owner",
        default=DEFAULT_OWNER,
        help="value of the sg-reconciler/owner tag that marks managed rules (default %(default)s)",
    )
    plan.add_argument(
        "--output",
        choices=("table", "json"),
        default="table",
        help="table for people (default), json for tools",
    )
    demo = commands.add_parser(
        "demo",
        help="play LBC issue #3639 end to end on the embedded AWS emulator (no account needed)",
        description=(
            "Act 1: a new NodePort flows CloudTrail -> EventBridge -> SQS -> planner -> Step "
            "Functions and is applied make-before-break. Act 2: the same change while "
            "AuthorizeSecurityGroupIngress is denied rolls back with nothing missing. Act 3: the "
            "revoke-then-authorize order under the same fault leaves the gap #3639 describes. "
            "Exit 0 when every act behaves as described."
        ),
    )
    demo.add_argument(
        "--act", type=int, choices=(1, 2, 3), help="play one act (default: all three)"
    )
    demo.add_argument(
        "--json", action="store_true", help="results as JSON on stdout (progress goes to stderr)"
    )
    return parser


def run_demo_command(args: argparse.Namespace) -> int:
    # Imported here: the demo needs the emulator (moto), which `plan` does not.
    from sg_reconciler_tools.demo.main import run_demo

    return run_demo([args.act] if args.act else [1, 2, 3], as_json=args.json)


def _read_live(args: argparse.Namespace) -> LivePlan:
    policy = load_policy_file(args.policy)
    try:
        clients = make_clients(args.region, args.profile, args.endpoint_url)
        return compute_live_plan(clients.ec2, clients.elbv2, policy)
    except ClientError as err:
        error = err.response.get("Error", {})
        raise InputError(
            f"AWS refused a read: {error.get('Code')}: {error.get('Message')}"
        ) from None
    except BotoCoreError as err:  # no credentials or region, unreachable endpoint, bad profile
        raise InputError(" ".join(str(err).split())) from None


def run_live(args: argparse.Namespace) -> int:
    """Plan against the account: the plan contract plus the desired rules (JSON), or a table."""
    if args.current is not None or args.desired is not None:
        raise InputError("--live reads the account: drop --current and --desired")
    if args.policy is None:
        raise InputError("--live needs --policy FILE")
    if args.owner != DEFAULT_OWNER or args.max_rules_per_group != DEFAULT_MAX_RULES_PER_GROUP:
        raise InputError("--live takes the owner and the quota from the policy, not from options")
    try:
        live = _read_live(args)
    except (PolicyError, RuleError) as err:
        raise InputError(str(err)) from None
    if args.output == "json":
        print(json.dumps(live.to_dict(), indent=2))
    else:
        print(render_plan(live.result))
        print(f"desired: {len(live.desired)} managed rule(s) in {len(live.groups)} group(s)")
        if live.state is not None and live.state.exposure:
            reports = [live.state.exposure[g] for g in live.groups if g in live.state.exposure]
            print(
                f"exposure: {sum(r.exposed_ports for r in reports)} port(s) open beyond need "
                f"(one range per source would open {sum(r.single_range_exposed_ports for r in reports)})"
            )
        for note in live.notes:
            print(f"note: {note}")
    return 0 if isinstance(live.result, Plan) else EXIT_REFUSED


def run_plan(args: argparse.Namespace) -> int:
    if args.live:
        return run_live(args)
    if args.current is None or args.desired is None:
        raise InputError("plan needs --current and --desired, or --live with --policy")
    current = load_current(args.current)
    desired = load_desired(args.desired)
    try:
        result: Plan | Refusal = make_plan(
            current, desired, args.owner, Limits(args.max_rules_per_group)
        )
    except RuleError as err:
        raise InputError(str(err)) from None
    if args.output == "json":
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(render_plan(result))
    return 0 if isinstance(result, Plan) else EXIT_REFUSED


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return run_demo_command(args) if args.command == "demo" else run_plan(args)
    except InputError as err:
        print(f"sg-reconciler: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
