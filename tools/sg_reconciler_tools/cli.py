"""`sg-reconciler`: draft a first policy, plan security-group changes make-before-break,
follow a hand-over from another tool, release the brake, the demo.

Exit codes of `init`: 0 a draft printed, 2 bad input (or AWS refused a read).

Exit codes of `plan`: 0 a plan (possibly empty), 2 bad input, 3 no safe plan exists (refused).
Exit codes of `adopt`: 0 ready (the other tool may stop), 2 bad input, 3 not ready yet.
Exit codes of `release-brake`: 0 released (or listed), 2 bad input or nothing held to release.
Exit codes of `status`: 0 all well, 2 bad input, 3 something needs attention.
Exit codes of `release-template`: 0 written, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
)
from sg_reconciler.adapters.aws import Clients, make_clients
from sg_reconciler.adapters.deployment import BrakeNotHeld, BrakeReleases
from sg_reconciler.adapters.executions import in_flight_hand_backs
from sg_reconciler.adapters.inventory import AccountInventory
from sg_reconciler.app.live_plan import LivePlan, compute_live_plan
from sg_reconciler.collector import paused_collector
from sg_reconciler.core.handover import hand_over
from sg_reconciler.core.plan import Plan, Refusal
from sg_reconciler.core.planner import Limits, make_plan
from sg_reconciler.core.policy import Policy
from sg_reconciler.core.quota import PrefixListSize
from sg_reconciler.core.rules import (
    ADOPTED_BY_TAG_KEY,
    DEFAULT_MAX_RULES_PER_GROUP,
    DEFAULT_OWNER,
    Rule,
    RuleError,
)
from sg_reconciler.errors import ReconcilerError
from sg_reconciler.policy import (
    LBC_SHARED_DESCRIPTION,
    PolicyError,
    load_policy_file,
    parameter_size_problem,
)

from sg_reconciler_tools.plan_files import InputError, load_current, load_desired
from sg_reconciler_tools.policy_draft import draft_policy, read_account
from sg_reconciler_tools.render import (
    UTC_SECONDS,
    handover_to_dict,
    render_handover,
    render_plan,
)

EXIT_BAD_INPUT = 2
EXIT_REFUSED = 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: the reader of stdout went away

T = TypeVar("T")


PROG = "sg-reconciler"
PLAN = f"{PROG} plan"


class UsageError(InputError):
    """Flags missing, unknown, badly written or at odds with each other: one line that ends
    pointing at the --help of the command (`prog`) they were given to (docs/cli.md)."""

    def __init__(self, message: str, prog: str = PROG) -> None:
        super().__init__(f"{message} (see '{prog} --help')")


_GIVEN = "_flags_given"  # the namespace's record of the flags _StoreOnce has seen


class _StoreOnce(argparse._StoreAction):
    """A flag that takes one value takes it once: given again, argparse keeps the last value
    without a word (`--max-rules-per-group 4 --max-rules-per-group 60` planned with 60).
    Flags that repeat by design say so with action="append" (or _AppendEachKeyOnce)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[object] | None,
        option_string: str | None = None,
    ) -> None:
        given: set[str] = namespace.__dict__.setdefault(_GIVEN, set())
        if self.dest in given:
            first = getattr(namespace, self.dest)
            raise argparse.ArgumentError(
                self, f"given twice ({first}, then {values}): give it once"
            )
        given.add(self.dest)
        super().__call__(parser, namespace, values, option_string)


class _AppendEachKeyOnce(argparse._AppendAction):
    """A flag repeated by design with (key, value) pairs takes each key once: a second value
    for one key would win without a word, as for a flag given twice."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[object] | None,
        option_string: str | None = None,
    ) -> None:
        given = dict(getattr(namespace, self.dest) or ())
        if isinstance(values, tuple) and values[0] in given:
            key, first, then = values[0], given[values[0]], values[1]
            raise argparse.ArgumentError(
                self, f"{key} given twice ({first}, then {then}): give each once"
            )
        super().__call__(parser, namespace, values, option_string)


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit code 2, like every bad input;
    a flag that takes one value is given once (_StoreOnce)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # every plain flag of this parser (its argument groups share the registry)
        self.register("action", None, _StoreOnce)
        self.register("action", "store", _StoreOnce)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message, self.prog)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def _prefix_list_size(text: str) -> tuple[str, PrefixListSize]:
    match = re.fullmatch(r"(pl-[0-9a-zA-Z]+)=(IPv4|IPv6):([0-9]+)", text.strip())
    if match is None or int(match[3]) < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not PL=FAMILY:N (e.g. pl-0123=IPv4:20, N at least 1)"
        )
    return match[1], PrefixListSize(match[2], int(match[3]))


def _offline_limits(args: argparse.Namespace, rules: Sequence[Rule]) -> tuple[Limits, list[str]]:
    """The quota as the options say, and notes on them; per family, every referenced list's
    size must be given, and a size for a list no rule references is named (a typo?), as a
    binding that selects nothing is."""
    sizes = dict(args.prefix_list_size)
    if not args.per_family:
        if sizes:
            raise UsageError("--prefix-list-size counts only with --per-family", PLAN)
        return Limits(args.max_rules_per_group), []
    referenced = {r.key.peer.value for r in rules if r.key.peer.kind == "prefix_list"}
    missing = sorted(referenced - sizes.keys())
    if missing:
        raise UsageError(
            f"--per-family counts a prefix list as its MaxEntries: give --prefix-list-size "
            f"for {', '.join(missing)}",
            PLAN,
        )
    unused = sorted(sizes.keys() - referenced)
    notes = []
    if unused:
        counts = "its size counts" if len(unused) == 1 else "their sizes count"
        notes.append(
            f"--prefix-list-size names {', '.join(unused)}, which no rule in {args.current} or "
            f"{args.desired} references (a typo?): {counts} for nothing"
        )
    return Limits(args.max_rules_per_group, per_family=True, prefix_lists=sizes), notes


def _fingerprint(text: str) -> str:
    if not re.fullmatch(r"[0-9a-fA-F]{16}", text.strip()):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a fingerprint (the 16 hex digits in the plan's brake note)"
        )
    return text.strip().lower()  # the brake writes it in lower case


def _endpoint(text: str) -> str:
    if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not an http(s) URL")
    return text


def _aws_options(parser: argparse.ArgumentParser, title: str, description: str) -> None:
    group = parser.add_argument_group(title, description)
    group.add_argument(
        "--region",
        help="AWS region (default: AWS_REGION, then AWS_DEFAULT_REGION or the profile's)",
    )
    group.add_argument("--profile", help="AWS named profile")
    group.add_argument(
        "--endpoint-url",
        type=_endpoint,
        metavar="URL",
        help="e.g. a moto server, http://127.0.0.1:5000",
    )


def _version() -> str:
    """The installed release (pyproject.toml's version, as `SemanticVersion` in the template)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sg-reconciler")
    except PackageNotFoundError:  # run from a checkout without installing it
        return "(not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Keep security-group ingress rules in line with load balancers, make-before-break.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
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
    _aws_options(
        plan,
        "live mode",
        "read the account (or a local moto server) instead of files; never writes",
    )
    plan.add_argument(
        "--live", action="store_true", help="derive current and desired rules from the account"
    )
    plan.add_argument(
        "--policy",
        type=Path,
        metavar="FILE",
        help="policy file, YAML or JSON (owner and quota come from it, not from the options)",
    )
    plan.add_argument(
        "--max-rules-per-group",
        type=_positive,
        default=DEFAULT_MAX_RULES_PER_GROUP,
        metavar="N",
        help="ingress rule quota per group (default %(default)s)",
    )
    plan.add_argument(
        "--per-family",
        action="store_true",
        help=(
            "count the quota as AWS and the deployed planner do: IPv4 and IPv6 rules apart, "
            "a group reference in both, a prefix list as its MaxEntries (see --prefix-list-size)"
        ),
    )
    plan.add_argument(
        "--prefix-list-size",
        type=_prefix_list_size,
        action=_AppendEachKeyOnce,
        default=[],
        metavar="PL=FAMILY:N",
        help=(
            "with --per-family: the MaxEntries and family of a referenced prefix list, e.g. "
            "pl-0123=IPv4:20 (repeat per list; 'aws ec2 describe-managed-prefix-lists' prints both)"
        ),
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
    adopt = commands.add_parser(
        "adopt",
        help="follow a hand-over of rules from another tool (the AWS Load Balancer Controller)",
        description=(
            "With the policy's adopt_descriptions set, each run takes over the other tool's "
            "rules that are exactly desired rules, in place (owner tag, then this deployment's "
            "description), and authorizes the other desired rules first. This reads the "
            "account and says what the next run will adopt and authorize, what is adopted, "
            "and which of the other tool's rules stay its own (it revokes them when it stops "
            "managing rules). Never writes. Exit 0 when ready (every flow the other tool's "
            "rules admit to a registered target is admitted without them, and no execution "
            "that could hand adopted rules back is running: the other tool may stop), 2 on bad "
            "input, 3 when not ready yet (it says which execution it waits for)."
        ),
    )
    _aws_options(adopt, "AWS access", "the account (or a local moto server); never writes")
    adopt.add_argument("--live", action="store_true", required=True, help="read the account")
    adopt.add_argument(
        "--policy", type=Path, required=True, metavar="FILE", help="policy file, YAML or JSON"
    )
    adopt.add_argument(
        "--output", choices=("table", "json"), default="table", help="table (default) or json"
    )
    init = commands.add_parser(
        "init",
        help="draft a first policy from what the account shows (never writes)",
        description=(
            "Read the account and print a commented policy for what it finds: a binding per "
            "cluster of the AWS Load Balancer Controller (its tags, its backend group, "
            "cluster_group), one per NLB without security groups (admitted by address, with "
            "the clients the account's rules show, else a commented placeholder and a note), "
            "and adopt_descriptions when the controller's rules exist. Never writes. "
            "Exit 0 with a draft, 2 on bad input."
        ),
    )
    _aws_options(init, "AWS access", "the account (or a local moto server); never writes")
    init.add_argument("--live", action="store_true", required=True, help="read the account")
    init.add_argument(
        "--output",
        choices=("text", "json"),
        default="text",
        help="text: the commented YAML policy (default); json: the same as data",
    )
    adopt.add_argument(
        "--state-machine",
        metavar="ARN",
        help=(
            "the stack's apply state machine, to see whether the execution that adopted rules "
            "could still hand them back (default: looked up by the execution's name)"
        ),
    )
    release = commands.add_parser(
        "release-brake",
        help="let one set of revocations held by the brake go, once, for one day",
        description=(
            "The brake holds a plan that would take away an outsized share of the owned rules. "
            "Without --fingerprint, list what it holds; with it, release exactly that set for "
            "one day: the next run revokes it. A set the brake does not hold is refused, and "
            "nothing is written. Exit 0 on success, 2 on bad input or nothing to release."
        ),
    )
    release.add_argument(
        "--lock-table",
        required=True,
        metavar="NAME",
        help="the stack's LockTableName output, where the brake records what it holds",
    )
    release.add_argument(
        "--fingerprint",
        type=_fingerprint,
        help="the set to release, from the plan's note or the planner's log",
    )
    release.add_argument(
        "--by", help="who releases, for the record (default: the caller's AWS identity)"
    )
    _aws_options(release, "AWS access", "the account (or a local moto server) of the stack")
    status = commands.add_parser(
        "status",
        help="how a deployment is doing, or (with --fleet-table) every account and region",
        description=(
            "With --stack: the stack's recent executions and how each ended, what the brake "
            "holds, the last drift the schedule repaired, the policy's bindings. With "
            "--fleet-table: the central stack's table, one line per account and region. Reads "
            "only. Exit 0 when all is well, 3 when something needs attention (an execution that "
            "did not apply, a held brake, a firing alarm), 2 on bad input or an AWS refusal."
        ),
    )
    where = status.add_mutually_exclusive_group(required=True)
    where.add_argument("--stack", metavar="NAME", help="the deployment's stack name")
    where.add_argument(
        "--fleet-table", metavar="NAME", help="the central stack's FleetTableName output"
    )
    status.add_argument(
        "--executions", type=_positive, default=10, metavar="N", help="executions shown (10)"
    )
    status.add_argument(
        "--output", choices=("table", "json"), default="table", help="table (default) or json"
    )
    _aws_options(status, "AWS access", "the account (or a local moto server); never writes")
    bundle = commands.add_parser(
        "release-template",
        help="the template and code of a release, for a service-managed StackSet",
        description=(
            "Translates the SAM template into plain CloudFormation (no Transform, which "
            "service-managed StackSets refuse), zips the code for BUCKET, and checks every "
            "policy with the planner's own loader. Writes OUT/template.json, OUT/artifacts/ (copy "
            "them to the bucket: the commands are printed) and OUT/parameters/<account or OU>.json "
            "(parameter overrides). Exit 0 when written, 2 on bad input."
        ),
    )
    bundle.add_argument(
        "--bucket",
        required=True,
        help="S3 bucket of the code; ${AWS::Region} in it names a bucket per region",
    )
    bundle.add_argument("--prefix", default="", help="key prefix, e.g. the release's version")
    bundle.add_argument(
        "--out", type=Path, default=Path("release"), help="output directory (release)"
    )
    bundle.add_argument(
        "--template",
        type=Path,
        default=Path("template.yaml"),
        help="the SAM template (template.yaml, in the current directory)",
    )
    bundle.add_argument("--policy", type=Path, help="the policy for all accounts, checked")
    bundle.add_argument(
        "--account-policy",
        action="append",
        default=[],
        metavar="ACCOUNT_OR_OU=FILE",
        help="another policy for one account (12 digits) or OU (ou-...), checked; repeatable",
    )
    bundle.add_argument(
        "--regions", default="", help="comma-separated regions, for the copy commands printed"
    )
    demo = commands.add_parser(
        "demo",
        help="play LBC issue #3639 end to end on the embedded AWS emulator (no account needed)",
        description=(
            "Act 1: a new NodePort flows CloudTrail -> EventBridge -> SQS -> planner -> Step "
            "Functions and is applied make-before-break. Act 2: the same change while "
            "AuthorizeSecurityGroupIngress is denied rolls back with nothing missing. Act 3: the "
            "revoke-then-authorize order under the same fault leaves the gap #3639 describes. "
            "Exit 0 when every act behaves as described, 1 when one does not."
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


def _read_live(args: argparse.Namespace, policy: Policy | None = None) -> LivePlan:
    policy = policy or load_policy_file(args.policy)
    return _reading(
        args, lambda c: compute_live_plan(AccountInventory(c.ec2, c.elbv2, policy), policy)
    )


@contextmanager
def _aws_refusals_as_input_errors(what: str = "a call") -> Iterator[None]:
    """Every AWS failure is one line of bad input (exit 2)."""
    try:
        yield
    except ReconcilerError as err:  # an adapter's typed error
        raise InputError(f"AWS refused {what}: {err}") from None
    except ClientError as err:
        error = err.response.get("Error", {})
        raise InputError(
            f"AWS refused {what}: {error.get('Code')}: {error.get('Message')}"
        ) from None
    except NoRegionError:
        raise InputError(
            "no AWS region: give --region, or set AWS_REGION or the profile's region"
        ) from None
    except NoCredentialsError:
        raise InputError(
            "no AWS credentials: give --profile or set AWS_PROFILE (against a local moto "
            "server, any AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY will do)"
        ) from None
    except EndpointConnectionError as err:
        raise InputError(
            f"cannot reach {err.kwargs.get('endpoint_url', 'the endpoint')}: check "
            "--endpoint-url (a local server must be running) or the network"
        ) from None
    except BotoCoreError as err:  # a bad profile, and the rest of the client's own errors
        raise InputError(" ".join(str(err).split())) from None


def _reading(args: argparse.Namespace, read: Callable[[Clients], T]) -> T:
    """Run reads against the account; every AWS failure is one line of bad input."""
    with _aws_refusals_as_input_errors("a read"):
        return read(_clients(args))


def run_live(args: argparse.Namespace) -> int:
    """Plan against the account: the plan contract plus the desired rules (JSON), or a table."""
    if args.current is not None or args.desired is not None:
        raise UsageError("--live reads the account: drop --current and --desired", PLAN)
    if args.policy is None:
        raise UsageError("--live needs --policy FILE", PLAN)
    offline = {
        "--owner": args.owner != DEFAULT_OWNER,
        "--max-rules-per-group": args.max_rules_per_group != DEFAULT_MAX_RULES_PER_GROUP,
        "--per-family": args.per_family,
        "--prefix-list-size": bool(args.prefix_list_size),
    }
    given = [flag for flag, set_ in offline.items() if set_]
    if given:
        raise UsageError(
            "--live takes the owner and the quota from the policy and counts per family: "
            f"drop {' and '.join(given)}",
            PLAN,
        )
    try:
        policy = load_policy_file(args.policy)
        live = _read_live(args, policy)
    except (PolicyError, RuleError) as err:
        raise InputError(str(err)) from None
    if args.output == "json":
        print(json.dumps({**live.to_dict(), "owner": policy.owner}, indent=2))
    else:
        print(render_plan(live.result, live.names, live.needed_by, live.current))
        print(f"desired: {len(live.desired)} managed rule(s) in {len(live.groups)} group(s)")
        print(_owner_line(policy.owner))
        if live.state is not None and live.state.exposure:
            reports = [live.state.exposure[g] for g in live.groups if g in live.state.exposure]
            print(
                f"exposure: {sum(r.exposed_ports for r in reports)} port(s) open beyond need "
                f"(one range per source would open {sum(r.single_range_exposed_ports for r in reports)})"
            )
        for note in live.notes:
            print(f"note: {note}")
    return 0 if isinstance(live.result, Plan) else EXIT_REFUSED


def _owner_line(owner: str) -> str:
    """Whose rules the plan manages: a deployed stack's owner is its OwnerName (the stack name
    unless set), which a policy file read here knows only if it says so."""
    if owner != DEFAULT_OWNER:
        return f"owner: {owner} (the policy's)"
    return (
        f"owner: {owner} (the default; a deployed stack's is its OwnerName, the stack name "
        "unless set: set owner in the policy file to preview that stack's rules)"
    )


def _clients(args: argparse.Namespace) -> Clients:
    """Clients for the flags; AWS_REGION counts as the AWS CLI counts it (over the profile's
    region and AWS_DEFAULT_REGION), which boto3 alone ignores."""
    region = args.region or os.environ.get("AWS_REGION") or None
    return make_clients(region, args.profile, args.endpoint_url)


def run_adopt(args: argparse.Namespace) -> int:
    """Where the hand-over stands; exit 0 when the other tool may stop managing rules."""
    try:
        policy = load_policy_file(args.policy)
        if not policy.adopt_descriptions:
            raise InputError(
                f"{args.policy}: adopt_descriptions is empty: list the other tool's rule "
                "description (the AWS Load Balancer Controller's: "
                f"{LBC_SHARED_DESCRIPTION})"
            )
        live = _read_live(args, policy)
    except (PolicyError, RuleError) as err:
        raise InputError(str(err)) from None
    if isinstance(live.result, Refusal):
        print(render_plan(live.result))
        return EXIT_REFUSED
    desired_state = live.state
    adopters = [
        name
        for r in live.current
        if (name := r.tag(ADOPTED_BY_TAG_KEY)) and r.owned_by(policy.owner)
    ]
    try:
        waiting = (
            in_flight_hand_backs(_clients(args).stepfunctions, adopters, args.state_machine)
            if adopters
            else []
        )
    except ReconcilerError as err:
        raise InputError(f"AWS refused a Step Functions read: {err}") from None
    state = hand_over(
        live.result,
        live.current,
        live.desired,
        policy.adopt_descriptions,
        desired_state.target_ports if desired_state else {},
        desired_state.lookup_misses if desired_state else (),
        live.vpcs,
        waiting,
    )
    if args.output == "json":
        print(json.dumps(handover_to_dict(state), indent=2))
    else:
        print(render_handover(state, live.names, live.needed_by))
    return 0 if state.ready else EXIT_REFUSED


def run_init(args: argparse.Namespace) -> int:
    """Print a first policy drafted from the account (reads only)."""
    draft = draft_policy(_reading(args, lambda c: read_account(c.ec2, c.elbv2)))
    if args.output == "json":
        print(json.dumps(draft.to_dict(), indent=2))
        return 0
    text = draft.to_yaml()
    print(text, end="")
    too_large = parameter_size_problem(text)
    if too_large:  # on stderr: stdout stays the policy file
        print(f"note: the draft is {too_large}: shorten it before deploying", file=sys.stderr)
    return 0


def run_status(args: argparse.Namespace) -> int:
    """One deployment or the fleet; exit 3 when something needs attention."""
    from sg_reconciler_tools import status

    with _aws_refusals_as_input_errors():
        clients = _clients(args)
        if args.fleet_table:
            _check_table(clients, args.fleet_table, "deployment", "FleetTableName")
            fleet = status.read_fleet(clients, args.fleet_table)
            print(
                status.fleet_to_json(fleet) if args.output == "json" else status.render_fleet(fleet)
            )
            attention = any(s.attention() for s in fleet)
        else:
            one = status.read_stack_status(clients, args.stack, args.executions)
            print(
                json.dumps(one.to_dict(), indent=2)
                if args.output == "json"
                else status.render_stack_status(one)
            )
            attention = bool(one.attention())
    return status.EXIT_NEEDS_ATTENTION if attention else 0


def run_release_template(args: argparse.Namespace) -> int:
    from sg_reconciler_tools import release

    try:
        account_policies = release.parse_account_policies(args.account_policy)
    except release.ReleaseError as err:
        raise UsageError(str(err), f"{PROG} release-template") from None
    if not args.template.is_file():
        raise UsageError(
            f"{args.template}: no such template: run this in the project's checkout, or give "
            "--template",
            f"{PROG} release-template",
        )
    print("building the layers and the functions' code (a minute or less)...", file=sys.stderr)
    try:
        built = release.build_release(
            args.template,
            args.out,
            args.bucket,
            args.prefix,
            policy=args.policy,
            account_policies=account_policies,
        )
    except (release.ReleaseError, OSError) as err:
        raise InputError(str(err)) from None
    print(f"wrote {built.template} (no Transform), {len(built.artifacts)} artifact(s)")
    if args.policy is not None:
        print(f"policy for all accounts: {args.policy} checked; give it as PolicyDocument")
    for target, file in sorted(built.policies.items()):
        print(f"policy for {target}: parameter overrides in {file}")
    print("copy the artifacts before creating or updating the StackSet:")
    regions = [r.strip() for r in args.regions.split(",") if r.strip()]
    for command in built.upload_commands(regions):
        print(f"  {command}")
    return 0


def run_release_brake(args: argparse.Namespace) -> int:
    """List the held sets, or release one; every AWS failure is one line, exit 2."""
    with _aws_refusals_as_input_errors():
        clients = _clients(args)
        _check_table(clients, args.lock_table, "group_id", "LockTableName")
        brake = BrakeReleases(clients.dynamodb, args.lock_table)
        if args.fingerprint is None:
            held = brake.held()
            for h in held:
                print(f"held {h.fingerprint} since {_when(h.held_at)}: {h.reason}")
            if not held:
                print("the brake holds nothing")
            return 0
        by = args.by or clients.sts.get_caller_identity()["Arn"]
        try:
            released = brake.release(args.fingerprint, by)
        except BrakeNotHeld as err:
            raise InputError(str(err)) from None
    print(
        f"released {released.fingerprint} for one day, by {by} (held since "
        f"{_when(released.held_at)}: {released.reason}); the next run revokes them"
    )
    return 0


def _check_table(clients: Clients, name: str, key: str, output: str) -> None:
    """That `name` is the table the command reads (its hash key `key`): a wrong one answers
    an empty read, which would pass for "nothing held" or "no deployment"."""
    try:
        table = clients.dynamodb.describe_table(TableName=name)["Table"]
    except ClientError as err:
        code = err.response.get("Error", {}).get("Code")
        if code in ("AccessDeniedException", "AccessDenied"):  # a role without DescribeTable
            print(f"note: {name} not checked (DescribeTable refused)", file=sys.stderr)
            return
        if code != "ResourceNotFoundException":
            raise
        region = clients.dynamodb.meta.region_name
        raise InputError(f"no table {name} in {region}: give the stack's {output} output") from None
    hashed = [k["AttributeName"] for k in table.get("KeySchema", []) if k["KeyType"] == "HASH"]
    if hashed != [key]:
        raise InputError(
            f"{name} is not the table this reads (its key is {', '.join(hashed) or 'none'}, "
            f"not {key}): give the stack's {output} output"
        )


def _when(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime(UTC_SECONDS)


def run_plan(args: argparse.Namespace) -> int:
    if args.live:
        return run_live(args)
    if args.current is None or args.desired is None:
        raise UsageError("plan needs --current and --desired, or --live with --policy", PLAN)
    current = load_current(args.current)
    desired = load_desired(args.desired)
    limits, notes = _offline_limits(args, [*current, *desired])
    try:
        with paused_collector():
            result: Plan | Refusal = make_plan(current, desired, args.owner, limits)
    except RuleError as err:  # a desired rule listed twice, or a current one without its id
        file = {"desired": args.desired, "current": args.current}.get(err.of)
        raise InputError(f"{file}: {err}" if file else str(err)) from None
    if args.output == "json":
        doc = result.to_dict()
        if notes:  # as the live plan adds its own (a refusal's too)
            doc["notes"] = [*doc.get("notes", []), *notes]
        print(json.dumps(doc, indent=2))
    else:
        print(render_plan(result, current=current))
        for note in notes:
            print(f"note: {note}")
    return 0 if isinstance(result, Plan) else EXIT_REFUSED


# What each command runs; its keys are the commands, known before argparse reads a word
RUNS: dict[str, Callable[[argparse.Namespace], int]] = {
    "plan": run_plan,
    "init": run_init,
    "adopt": run_adopt,
    "release-brake": run_release_brake,
    "status": run_status,
    "release-template": run_release_template,
    "demo": run_demo_command,
}
COMMANDS = tuple(RUNS)


def _refuse_flags_before_the_command(given: Sequence[str]) -> None:
    """Flags belong to a command and go after it: written before it (`sg-reconciler --region
    R init`), argparse would read a flag's value as the command, or call a flag given missing."""
    at = next((i for i, word in enumerate(given) if word in COMMANDS), 0)
    before = list(given[:at])
    if not before or not before[0].startswith("-") or {"-h", "--help", "--version"} & set(before):
        return  # argparse says it best: an unknown command, or help or the version asked for
    command = given[at]
    raise UsageError(
        f"{' '.join(before)}: flags go after the command ({PROG} {command} {' '.join(before)} ...)",
        f"{PROG} {command}",
    )


def main(argv: Sequence[str] | None = None) -> int:
    try:
        given = list(sys.argv[1:] if argv is None else argv)
        _refuse_flags_before_the_command(given)
        args, unknown = build_parser().parse_known_args(given)
        vars(args).pop(_GIVEN, None)  # _StoreOnce's record, not an option
        if unknown:  # argparse names the top level: name the command the flag was given to
            raise UsageError(
                f"unrecognized arguments: {' '.join(unknown)}", f"{PROG} {args.command}"
            )
        code = RUNS[args.command](args)
        sys.stdout.flush()  # a reader gone shows here, not at exit, outside this handling
        return code
    except InputError as err:
        print(f"sg-reconciler: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:  # the reader (`| head`) stopped reading: nothing more to say
        # Python would report the broken pipe again when it flushes stdout at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        print("sg-reconciler: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
