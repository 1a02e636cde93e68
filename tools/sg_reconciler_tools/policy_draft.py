"""`sg-reconciler init`: a first policy drafted from what the account already says.

A new user should not write the first policy from docs/configuration.md: the AWS Load Balancer
Controller tags each load balancer with its cluster (`elbv2.k8s.aws/cluster`) and its shared
backend group (`elbv2.k8s.aws/resource: backend-sg`), node groups carry
`kubernetes.io/cluster/<name>`, an NLB with security groups can be told from one without,
and the controller's rules (its description) show the clients an NLB without groups admits.

`read_account` only reads (the live planner's own reader, asked for every load balancer);
`draft_policy` is pure: it takes that inventory and returns the draft, which prints as a
commented YAML policy or as data. What it cannot know (an NLB's clients that no rule shows)
is left as a commented placeholder with a note, never guessed open.
"""

from __future__ import annotations

import ipaddress
import json
import re
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sg_reconciler.adapters.inventory import read_inventory
from sg_reconciler.core.account import Inventory, LoadBalancer, TargetGroup
from sg_reconciler.core.desired import CLUSTER_TAG_PREFIX, TRAFFIC_PROTOCOLS, preserves_client_ip
from sg_reconciler.core.policy import Policy
from sg_reconciler.core.rules import OWNER_TAG_KEY, Rule
from sg_reconciler.policy import LBC_SHARED_DESCRIPTION, PolicyDocument

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_elbv2 import ElasticLoadBalancingv2Client

# The controller's tags (its source: pkg/networking/backend_sg_provider.go, pkg/deploy/
# tracking): every resource it creates names the cluster; its backend group says what it is;
# a Service's or an Ingress's load balancer names its stack (namespace/name).
LBC_CLUSTER_TAG = "elbv2.k8s.aws/cluster"
LBC_RESOURCE_TAG = "elbv2.k8s.aws/resource"
LBC_BACKEND_VALUE = "backend-sg"
LBC_STACK_TAGS = ("service.k8s.aws/stack", "ingress.k8s.aws/stack")

_NAME = re.compile(r"[^A-Za-z0-9._-]")
CLUSTER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")  # the policy's cluster_name


@dataclass(frozen=True)
class DraftBinding:
    """One binding of the draft, with why it is there (printed as comments above it)."""

    doc: dict[str, Any]  # the binding as the policy spells it
    why: tuple[str, ...] = ()
    placeholder: str | None = None  # a commented line the user completes (client_cidrs)

    @property
    def name(self) -> str:
        return str(self.doc["name"])


@dataclass(frozen=True)
class Draft:
    bindings: tuple[DraftBinding, ...] = ()
    adopt_descriptions: tuple[str, ...] = ()
    adopt_why: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def policy(self) -> dict[str, Any]:
        """The policy document (placeholders left out: unset fields take their defaults)."""
        doc: dict[str, Any] = {}
        if self.adopt_descriptions:
            doc["adopt_descriptions"] = list(self.adopt_descriptions)
        if self.bindings:
            doc["bindings"] = [b.doc for b in self.bindings]
        return doc

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy(),
            "why": {b.name: list(b.why) for b in self.bindings},
            "placeholders": [
                {"binding": b.name, "field": "rule_source.client_cidrs", "line": b.placeholder}
                for b in self.bindings
                if b.placeholder
            ],
            "notes": list(self.notes),
        }

    def to_yaml(self) -> str:
        lines = [
            "# Drafted by `sg-reconciler init --live` from what the account shows. Review it,",
            "# then `sg-reconciler plan --live --policy FILE` before deploying it",
            "# (docs/configuration.md). owner is unset: in AWS the stack's OwnerName is the one source.",
        ]
        if self.notes:
            lines.append("#")
            lines.append("# Notes:")
            for note in self.notes:
                lines += textwrap.wrap(
                    note, width=92, initial_indent="#   - ", subsequent_indent="#     "
                )
        if not self.bindings:
            lines.append("#")
            lines += _comment(
                [
                    "No load balancer to bind was found: the policy below is the default "
                    "(load balancers tagged sg-reconciler/managed=true)."
                ],
                0,
            )
        if self.adopt_descriptions:
            lines += ["", *_comment(self.adopt_why, 0), "adopt_descriptions:"]
            lines += [f"  - {_scalar(d)}" for d in self.adopt_descriptions]
        if self.bindings:
            lines += ["", "bindings:"]
            for binding in self.bindings:
                lines += _comment(binding.why, 2)
                body = _block(binding.doc, 4)
                body[0] = "  - " + body[0].lstrip()
                if binding.placeholder:
                    at = next(
                        i for i, line in enumerate(body) if line.startswith("    rule_source:")
                    )
                    end = at + 1
                    while end < len(body) and body[end].startswith("      "):
                        end += 1
                    body.insert(end, f"      # {binding.placeholder}")
                lines += body
        if not self.adopt_descriptions and not self.bindings:
            lines.append("{}")
        return "\n".join(lines) + "\n"


_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_YAML_WORDS = frozenset({"true", "false", "yes", "no", "on", "off", "null", "y", "n"})


def _scalar(value: object) -> str:
    """A YAML scalar: plain when YAML reads it back as the same string, else JSON's quoting
    (valid YAML), which keeps "true", "*" or "a: b" strings."""
    if isinstance(value, str) and _PLAIN.fullmatch(value) and value.lower() not in _YAML_WORDS:
        return value
    return json.dumps(value)


def _comment(sentences: Iterable[str], indent: int) -> list[str]:
    pad = " " * indent + "# "
    return textwrap.wrap(" ".join(sentences), width=92, initial_indent=pad, subsequent_indent=pad)


def _block(doc: Mapping[str, Any], indent: int) -> list[str]:
    pad = " " * indent
    lines: list[str] = []
    for key, value in doc.items():
        name = key if re.fullmatch(r"[a-z_]+", key) else _scalar(key)
        if isinstance(value, Mapping):
            lines.append(f"{pad}{name}:")
            lines += _block(value, indent + 2) if value else [f"{pad}  {{}}"]
        elif isinstance(value, list):
            lines.append(f"{pad}{name}: [{', '.join(_scalar(v) for v in value)}]")
        else:
            lines.append(f"{pad}{name}: {_scalar(value)}")
    return lines


# --- reads --------------------------------------------------------------------------------


def survey_policy() -> Policy:
    """A policy that makes the live reader read every load balancer as an address binding
    would (subnets, VPCs, client IP preservation) and every target's interface groups and
    their rules. It is only read with, never planned with."""
    return PolicyDocument.model_validate(
        {
            "bindings": [
                {
                    "name": "survey",
                    "load_balancers": {"tags": {}},
                    "rule_source": {"kind": "load_balancer_addresses"},
                }
            ]
        }
    ).to_policy()


def read_account(ec2: EC2Client, elbv2: ElasticLoadBalancingv2Client) -> Inventory:
    """Everything the draft needs, through describe calls only."""
    return read_inventory(ec2, elbv2, survey_policy())


# --- drafting -----------------------------------------------------------------------------


@dataclass
class _Names:
    used: set[str] = field(default_factory=set)

    def unique(self, wanted: str) -> str:
        base = _NAME.sub("-", wanted).strip("-._")[:60] or "binding"
        if not base[0].isalnum():
            base = "b" + base
        name, n = base, 2
        while name in self.used:
            name, n = f"{base}-{n}", n + 1
        self.used.add(name)
        return name


def draft_policy(inventory: Inventory) -> Draft:
    """The first policy for what the inventory shows: a binding per cluster, one per NLB
    without security groups (or per set of them one selector cannot tell apart), and the
    controller's description to adopt when its rules exist."""
    names = _Names()
    notes: list[str] = []
    lbs = sorted(inventory.load_balancers, key=lambda lb: lb.name)
    by_group = [lb for lb in lbs if lb.security_groups]
    clusters = sorted({c for lb in by_group if (c := _tags(lb).get(LBC_CLUSTER_TAG))})
    bindings = [_cluster_binding(c, lbs, inventory, names, notes) for c in clusters]
    group_bound = {lb.arn for lb in by_group if _tags(lb).get(LBC_CLUSTER_TAG)}
    for lb in by_group:
        if lb.arn not in group_bound:
            notes.append(
                f"load balancer {lb.name} has security groups but no {LBC_CLUSTER_TAG} tag: no "
                "binding selects it (add one with rule_source load_balancer_groups to manage it)"
            )
    bindings += _address_bindings(
        [lb for lb in lbs if not lb.security_groups], lbs, group_bound, inventory, names, notes
    )
    controller = [r for r in inventory.rules if _controller_rule(r)]
    adopt: tuple[str, ...] = ()
    adopt_why: tuple[str, ...] = ()
    if controller:
        groups = sorted({r.group_id for r in controller})
        adopt = (LBC_SHARED_DESCRIPTION,)
        adopt_why = (
            f"The AWS Load Balancer Controller has {len(controller)} rule(s) in "
            f"{_listed(groups)}. Each run takes over those that are exactly a desired rule, in "
            "place (docs/handover.md);",
            "`sg-reconciler adopt --live --policy FILE` says when the controller may stop.",
        )
    return Draft(tuple(bindings), adopt, adopt_why, tuple(dict.fromkeys(notes)))


def _tags(lb: LoadBalancer) -> dict[str, str]:
    return dict(lb.tags)


def _controller_rule(rule: Rule) -> bool:
    return rule.description == LBC_SHARED_DESCRIPTION and rule.tag(OWNER_TAG_KEY) is None


def _listed(items: Sequence[str], most: int = 4) -> str:
    shown = ", ".join(items[:most])
    return shown + (f" and {len(items) - most} more" if len(items) > most else "")


def _cluster_binding(
    cluster: str,
    lbs: Sequence[LoadBalancer],
    inventory: Inventory,
    names: _Names,
    notes: list[str],
) -> DraftBinding:
    """The controller's load balancers with groups: from its backend group into the group it
    would choose (cluster_group). The binding also selects the cluster's NLBs without groups;
    their own binding admits those by address (docs/configuration.md, Bindings)."""
    mine = [lb for lb in lbs if _tags(lb).get(LBC_CLUSTER_TAG) == cluster]
    with_groups = [lb for lb in mine if lb.security_groups]
    backends = sorted(
        {
            g
            for lb in with_groups
            for g in lb.security_groups
            if (sg := inventory.groups.get(g)) is not None
            and sg.tag(LBC_RESOURCE_TAG) == LBC_BACKEND_VALUE
            and sg.tag(LBC_CLUSTER_TAG) == cluster
        }
    )
    name = names.unique(cluster)
    lb_names = _listed([lb.name for lb in with_groups])
    why = [
        f"Cluster {cluster}: {len(with_groups)} load balancer(s) with security groups ({lb_names})."
    ]
    source: dict[str, Any]
    if len(backends) == 1 and all(backends[0] in lb.security_groups for lb in with_groups):
        backend = inventory.groups[backends[0]]
        source = {"kind": "backend_group", "group_id": backend.group_id}
        why += [
            f"Rules come from the controller's backend group {backend.group_id} ({backend.name}).",
            "For the hand-over, replace it with a group you specify that stays on the load "
            "balancers (docs/handover.md, step 1 of the hand-over).",
        ]
    else:
        source = {"kind": "load_balancer_groups"}
        found = "several" if len(backends) > 1 else "no"
        notes.append(
            f"cluster {cluster}: {found} backend group (tagged {LBC_RESOURCE_TAG}="
            f"{LBC_BACKEND_VALUE}) carried by all its load balancers: binding {name} admits "
            "each load balancer by its own groups"
        )
        why.append("Rules come from each load balancer's own groups (no single backend group).")
    why.append(
        f"They go into the group the controller chooses: the interface's only group, else its "
        f"one group tagged {CLUSTER_TAG_PREFIX}{cluster}."
    )
    notes += _placement_notes(cluster, with_groups, inventory)
    return DraftBinding(
        {
            "name": name,
            "load_balancers": {"tags": {LBC_CLUSTER_TAG: cluster}},
            "rule_source": source,
            "destination": _destination(cluster, notes),
        },
        tuple(why),
    )


def _destination(cluster: str, notes: list[str]) -> dict[str, Any]:
    """The controller's choice of group, when the policy can name the cluster (EKS names
    fit; another tool's tag value may not): else every group tagged for the cluster."""
    if CLUSTER_NAME.fullmatch(cluster):
        return {"kind": "cluster_group", "cluster_name": cluster}
    notes.append(
        f"cluster {cluster!r} is not a name cluster_group accepts: its rules go into every "
        f"interface group tagged {CLUSTER_TAG_PREFIX}{cluster} (tagged_groups)"
    )
    return {"kind": "tagged_groups", "tag_key": CLUSTER_TAG_PREFIX + cluster}


def _placement_notes(cluster: str, lbs: Sequence[LoadBalancer], inventory: Inventory) -> list[str]:
    """Targets whose group the controller's choice cannot find: the plan holds their ports."""
    key = CLUSTER_TAG_PREFIX + cluster
    notes: list[str] = []
    for tg in _target_groups(lbs, inventory):
        for target in tg.targets:
            ids = target.group_ids
            if not ids:
                notes.append(
                    f"target {target.target_id} of {tg.name} (cluster {cluster}): its interface "
                    "was not found, so its ports are held until it is"
                )
            elif len(ids) > 1:
                tagged = [
                    g for g in ids if (sg := inventory.groups.get(g)) and sg.tag(key) is not None
                ]
                if len(tagged) != 1:
                    notes.append(
                        f"target {target.target_id} of {tg.name}: {len(tagged)} of its "
                        f"{len(ids)} groups are tagged {key}; tag exactly one, or its ports are held"
                    )
    return notes


def _target_groups(lbs: Iterable[LoadBalancer], inventory: Inventory) -> list[TargetGroup]:
    arns = {lb.arn for lb in lbs}
    return [
        tg
        for tg in inventory.target_groups
        if arns.intersection(tg.load_balancer_arns) and tg.target_type in ("instance", "ip")
    ]


def _selector(lb: LoadBalancer, lbs: Sequence[LoadBalancer]) -> dict[str, str]:
    """Tags that select this load balancer alone, when its tags allow: the controller's
    cluster and stack tags (namespace/name of its Service or Ingress), else all its tags."""
    tags = _tags(lb)
    for stack in LBC_STACK_TAGS:
        wanted = {k: tags[k] for k in (LBC_CLUSTER_TAG, stack) if k in tags}
        if stack in wanted and _selected(wanted, lbs) == [lb]:
            return wanted
    return tags


def _selected(selector: Mapping[str, str], lbs: Iterable[LoadBalancer]) -> list[LoadBalancer]:
    return [lb for lb in lbs if all(_tags(lb).get(k) == v for k, v in selector.items())]


def _address_bindings(
    bare: Sequence[LoadBalancer],
    lbs: Sequence[LoadBalancer],
    group_bound: set[str],
    inventory: Inventory,
    names: _Names,
    notes: list[str],
) -> list[DraftBinding]:
    """NLBs without security groups, admitted by address: their subnets' CIDRs, and their
    clients as the account shows them (rules that admit their traffic ports today)."""
    sets: dict[tuple[tuple[str, str], ...], list[LoadBalancer]] = {}
    for lb in bare:
        if lb.type != "network":
            continue  # a gateway load balancer has no ports to open
        selector = _selector(lb, lbs)
        if not selector:
            notes.append(
                f"load balancer {lb.name} has no security groups and no tags: no binding can "
                "select it alone (tag it, then add a load_balancer_addresses binding)"
            )
            continue
        sets.setdefault(tuple(sorted(selector.items())), []).append(lb)
    drafts: list[DraftBinding] = []
    for key, members in sets.items():
        selector = dict(key)
        selected = _selected(selector, lbs)
        stray = [lb.name for lb in selected if lb.security_groups and lb.arn not in group_bound]
        if stray:
            notes.append(
                f"the selector of {_listed([m.name for m in members])} also selects "
                f"{_listed(stray)}, which has security groups and no other binding: it would "
                "be admitted by address (give it a load_balancer_groups binding)"
            )
        drafts.append(_address_binding(selector, members, inventory, names, notes))
    return drafts


def _address_binding(
    selector: dict[str, str],
    members: Sequence[LoadBalancer],
    inventory: Inventory,
    names: _Names,
    notes: list[str],
) -> DraftBinding:
    lb_names = [lb.name for lb in members]
    name = names.unique(members[0].name if len(members) == 1 else f"{members[0].name}-and-more")
    why = [
        f"{_listed(lb_names)}: Network Load Balancer(s) without security groups, admitted by "
        "address."
    ]
    clusters = {_tags(lb).get(LBC_CLUSTER_TAG) for lb in members}
    cluster = next(iter(clusters)) if len(clusters) == 1 else None
    source: dict[str, Any] = {"kind": "load_balancer_addresses"}
    preserving = [lb for lb in members if _preserved(lb, inventory)]
    placeholder: str | None = None
    if not preserving:
        why.append(
            "Their subnets' CIDRs carry all traffic (client IP preservation is off on their "
            "target groups)."
        )
    else:
        found = _client_evidence(preserving, inventory)
        if found:
            source["client_cidrs"] = sorted(found, key=_cidr_order)
            shown = "; ".join(f"{c}: {_listed(sorted(ids), 3)}" for c, ids in sorted(found.items()))
            why += [
                "Their subnets' CIDRs carry health checks; the clients (client IP preservation "
                "is on) are those the "
                f"account's rules admit on the traffic ports today ({shown})."
            ]
        else:
            public = any(lb.scheme != "internal" for lb in preserving)
            example = ["0.0.0.0/0", "::/0"] if public else _vpc_cidrs(preserving, inventory)
            placeholder = (
                f"client_cidrs: [{', '.join(map(_scalar, example))}]  # the clients "
                "(the Service's loadBalancerSourceRanges): check, then uncomment"
            )
            default = (
                "no client traffic is admitted"
                if public
                else "its VPC's CIDRs are admitted as clients"
            )
            why.append(
                "Their subnets' CIDRs carry health checks; no rule shows the clients (see the "
                "notes)."
            )
            notes.append(
                f"load balancer {_listed([lb.name for lb in preserving])} preserves client "
                f"addresses but no rule shows its clients: binding {name} has a commented "
                f"client_cidrs placeholder (left unset, {default})"
            )
    destination: dict[str, Any]
    if cluster:
        destination = _destination(cluster, notes)
        why.append(f"Rules go where the controller puts them (cluster {cluster}).")
        notes += _placement_notes(cluster, members, inventory)
    else:
        destination = {"kind": "target_enis"}
        why.append("Rules go into every group of each target's interface.")
    doc = {
        "name": name,
        "load_balancers": {"tags": selector},
        "rule_source": source,
        "destination": destination,
    }
    return DraftBinding(doc, tuple(why), placeholder)


def _vpc_cidrs(lbs: Iterable[LoadBalancer], inventory: Inventory) -> list[str]:
    return sorted(
        {c for lb in lbs for c in inventory.vpc_cidrs.get(lb.vpc_id, ())}, key=_cidr_order
    )


def _preserved(lb: LoadBalancer, inventory: Inventory) -> bool:
    return any(preserves_client_ip(lb, tg) for tg in _target_groups([lb], inventory))


def _cidr_order(cidr: str) -> tuple[int, str]:
    return (ipaddress.ip_network(cidr).version, cidr)


def _client_evidence(lbs: Sequence[LoadBalancer], inventory: Inventory) -> dict[str, set[str]]:
    """Client CIDRs -> the rules that show them: CIDR rules in the targets' groups whose
    protocol and ports admit a traffic port of a target group that preserves client
    addresses. The load balancer's own addresses are not clients: for an internal one its
    subnets' CIDRs, for an internet-facing one anything inside its VPC (clients reach it
    from the internet). When the controller's rules show some, only they count."""
    by_group: dict[str, list[Rule]] = {}
    for rule in inventory.rules:
        if rule.key.peer.kind in ("cidr4", "cidr6"):
            by_group.setdefault(rule.group_id, []).append(rule)
    seen: dict[str, set[str]] = {}
    controller: dict[str, set[str]] = {}
    for lb in lbs:
        own = [ipaddress.ip_network(c) for c in lb.subnet_cidrs]
        if lb.scheme != "internal":
            own = [ipaddress.ip_network(c) for c in inventory.vpc_cidrs.get(lb.vpc_id, ())]
        for tg in _target_groups([lb], inventory):
            if not preserves_client_ip(lb, tg):
                continue
            protocols = TRAFFIC_PROTOCOLS.get(tg.protocol.upper(), ())
            for target in tg.targets:
                port = target.port if target.port is not None else tg.port
                for group in target.group_ids:
                    for rule in by_group.get(group, ()):
                        key = rule.key
                        if key.protocol not in protocols or port is None:
                            continue
                        if not key.from_port <= port <= key.to_port:
                            continue
                        network = ipaddress.ip_network(key.peer.value)
                        if any(
                            network.version == o.version and network.subnet_of(o)  # type: ignore[arg-type]
                            for o in own
                        ):
                            continue
                        into = controller if _controller_rule(rule) else seen
                        into.setdefault(key.peer.value, set()).add(rule.rule_id or "")
    return controller or seen
