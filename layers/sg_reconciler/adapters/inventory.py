"""Read what the desired state depends on, with batched, paginated describes (reads only).

The number of calls grows with pages, not with objects, wherever the API has a batch form:
one paged listing of all load balancers and of all target groups, tags in chunks of 20
ARNs, and instances, interfaces, rules and groups through filters of up to 200 values.
`describe_target_health` takes one target group per call and has no batch form, so it is
one call per managed target group (a few run concurrently); benchmarks/call_estimate.py
counts it apart. At 10,000 target groups it dominates the read: see benchmarks/. Only for
load balancers a binding admits by address: their subnets and VPCs (batched) and one
`describe_target_group_attributes` per target group (client IP preservation).

IP targets are found by any address of their interface (primary, secondary, IPv6) and, when
that misses, by the delegated prefix that can hold them, through their node's instance.

Listeners are not read: a target group's `LoadBalancerArns` already says which load
balancers send it traffic (through a default action or a rule), and listeners have no
account-wide listing, so reading them would cost one call per load balancer for nothing.

Groups are read after their rules: a group deleted while the reader runs is then missing
from the group listing and is dropped from scope, instead of looking like a group with no
rules. Filters never raise `InvalidGroup.NotFound`; if a call does, the batch is split
until the missing ids are isolated and dropped.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from botocore.exceptions import ClientError

from sg_reconciler.core.account import (
    Inventory,
    LoadBalancer,
    SecurityGroup,
    Target,
    TargetGroup,
    TargetKind,
    tags_of,
)
from sg_reconciler.core.desired import ALWAYS_PRESERVED, Binding, source_groups
from sg_reconciler.core.narrow import Narrowing, admitting, narrow, narrowable
from sg_reconciler.core.policy import Policy
from sg_reconciler.core.quota import PrefixListSize
from sg_reconciler.core.rules import OWNER_TAG_KEY, Peer, Rule, RuleError, ingress_rules
from sg_reconciler.core.scope import Locked, Scope

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_elbv2 import ElasticLoadBalancingv2Client

ELB_PAGE_SIZE = 400  # describe_load_balancers / describe_target_groups maximum
EC2_PAGE_SIZE = 1000  # MaxResults maximum of the EC2 describes used here
FILTER_CHUNK = 200  # values per EC2 filter
TAG_CHUNK = 20  # ResourceArns per elbv2 describe_tags
RULE_QUOTA = ("vpc", "L-0EA8095F")  # Service Quotas: inbound rules per security group
TARGET_HEALTH_WORKERS = 4  # concurrent describe_target_health calls (no batch form exists)

GROUP_NOT_FOUND = frozenset({"InvalidGroup.NotFound", "InvalidGroupId.NotFound"})
LB_NOT_FOUND = frozenset({"LoadBalancerNotFound"})
TG_NOT_FOUND = frozenset({"TargetGroupNotFound"})

T = TypeVar("T")
R = TypeVar("R")


def chunks(items: Sequence[T], size: int) -> list[list[T]]:
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def error_code(err: ClientError) -> str:
    return str(err.response.get("Error", {}).get("Code", ""))


def split_on_missing(
    fetch: Callable[[list[T]], list[R]],
    items: list[T],
    codes: frozenset[str],
    dropped: list[T],
) -> list[R]:
    """Run a batched read; when it fails because an item is gone, halve the batch and retry.

    The missing items end up in `dropped`; the rest are read. Messages are never parsed.
    """
    if not items:
        return []
    try:
        return fetch(items)
    except ClientError as err:
        if error_code(err) not in codes:
            raise
    if len(items) == 1:
        dropped.extend(items)
        return []
    mid = len(items) // 2
    return split_on_missing(fetch, items[:mid], codes, dropped) + split_on_missing(
        fetch, items[mid:], codes, dropped
    )


@dataclass
class _Reader:
    ec2: EC2Client
    elbv2: ElasticLoadBalancingv2Client
    policy: Policy
    quotas: Any = None  # a Service Quotas client, or None to plan with the AWS default
    scope: Scope | None = None  # an event's scope: read its peer closure only, if it can
    locked: Locked | None = None  # under the locks: these groups' rules and their closure

    def __post_init__(self) -> None:
        self.notes: list[str] = []
        self.subnets_of: dict[str, tuple[str, ...]] = {}  # load balancer ARN -> subnet ids

    # --- ELBv2 ---------------------------------------------------------------------------

    def load_balancers(self) -> list[LoadBalancer]:
        found: list[dict[str, Any]] = []
        paginator = self.elbv2.get_paginator("describe_load_balancers")
        for page in paginator.paginate(PaginationConfig={"PageSize": ELB_PAGE_SIZE}):
            found.extend(page.get("LoadBalancers", []))  # type: ignore[arg-type]
        tags: dict[str, dict[str, str]] = {}

        def fetch(arns: list[str]) -> list[tuple[str, dict[str, str]]]:
            response = self.elbv2.describe_tags(ResourceArns=arns)
            return [
                (d["ResourceArn"], {t["Key"]: t.get("Value", "") for t in d.get("Tags", [])})
                for d in response.get("TagDescriptions", [])
            ]

        gone: list[str] = []
        for batch in chunks([lb["LoadBalancerArn"] for lb in found], TAG_CHUNK):
            tags.update(split_on_missing(fetch, batch, LB_NOT_FOUND, gone))
        managed = []
        for lb in found:
            arn = lb["LoadBalancerArn"]
            if arn in gone or not self.policy.selects(tags.get(arn, {})):
                continue
            managed.append(
                LoadBalancer(
                    arn=arn,
                    name=lb.get("LoadBalancerName", arn),
                    type=lb.get("Type", ""),
                    security_groups=tuple(lb.get("SecurityGroups", [])),
                    tags=tags_of(tags.get(arn, {})),
                    vpc_id=lb.get("VpcId", ""),
                    scheme=lb.get("Scheme", "internet-facing"),
                    ip_address_type=lb.get("IpAddressType", "ipv4"),
                )
            )
            self.subnets_of[arn] = tuple(
                z["SubnetId"] for z in lb.get("AvailabilityZones", []) if "SubnetId" in z
            )
        return managed

    def subnet_cidrs(self, subnet_ids: Iterable[str]) -> dict[str, tuple[str, ...]]:
        """Subnet id -> its IPv4 and associated IPv6 CIDRs."""
        found: dict[str, tuple[str, ...]] = {}
        paginator = self.ec2.get_paginator("describe_subnets")
        for batch in chunks(sorted(set(subnet_ids)), FILTER_CHUNK):
            pages = paginator.paginate(Filters=[{"Name": "subnet-id", "Values": batch}])
            for page in pages:
                for subnet in page.get("Subnets", []):
                    v6 = _associated(subnet.get("Ipv6CidrBlockAssociationSet", []), "Ipv6")
                    v4 = [subnet["CidrBlock"]] if subnet.get("CidrBlock") else []  # IPv6-only
                    found[subnet["SubnetId"]] = (*v4, *v6)
        return found

    def vpc_cidrs(self, vpc_ids: Iterable[str]) -> dict[str, tuple[str, ...]]:
        """VPC id -> its associated IPv4 and IPv6 CIDRs (internal clients' default)."""
        found: dict[str, tuple[str, ...]] = {}
        paginator = self.ec2.get_paginator("describe_vpcs")
        for batch in chunks(sorted(set(vpc_ids)), FILTER_CHUNK):
            for page in paginator.paginate(Filters=[{"Name": "vpc-id", "Values": batch}]):
                for vpc in page.get("Vpcs", []):
                    v4 = _associated(vpc.get("CidrBlockAssociationSet", []), "")
                    v6 = _associated(vpc.get("Ipv6CidrBlockAssociationSet", []), "Ipv6")
                    found[vpc["VpcId"]] = (*(v4 or [vpc["CidrBlock"]]), *v6)
        return found

    def preserves_client_ip(self, tg: dict[str, Any]) -> bool | None:
        """A target group's preserve_client_ip.enabled (no batch form: one call per group)."""
        try:
            response = self.elbv2.describe_target_group_attributes(
                TargetGroupArn=tg["TargetGroupArn"]
            )
        except ClientError as err:
            if error_code(err) not in TG_NOT_FOUND:
                raise
            return None
        for attribute in response.get("Attributes", []):
            if attribute.get("Key") == "preserve_client_ip.enabled":
                return attribute.get("Value") == "true"
        return None

    def target_groups(self, managed: Iterable[LoadBalancer]) -> list[dict[str, Any]]:
        arns = {lb.arn for lb in managed}
        if not arns:
            return []
        found: list[dict[str, Any]] = []
        paginator = self.elbv2.get_paginator("describe_target_groups")
        for page in paginator.paginate(PaginationConfig={"PageSize": ELB_PAGE_SIZE}):
            for tg in page.get("TargetGroups", []):
                if arns.intersection(tg.get("LoadBalancerArns", [])):
                    found.append(dict(tg))
        return found

    def targets(self, tg: dict[str, Any]) -> list[tuple[str, int | None]] | None:
        """The registered targets of one group (no batch form exists: one call per group)."""
        try:
            response = self.elbv2.describe_target_health(TargetGroupArn=tg["TargetGroupArn"])
        except ClientError as err:
            if error_code(err) not in TG_NOT_FOUND:
                raise
            return None  # deleted since the listing; noted by the caller
        return [
            (d["Target"]["Id"], d["Target"].get("Port"))
            for d in response.get("TargetHealthDescriptions", [])
        ]

    # --- EC2 -----------------------------------------------------------------------------

    def instance_groups(self, instance_ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """Instance id -> groups of its primary interface (where the load balancer sends)."""
        result: dict[str, tuple[str, ...]] = {}
        paginator = self.ec2.get_paginator("describe_instances")
        for batch in chunks(sorted(set(instance_ids)), FILTER_CHUNK):
            pages = paginator.paginate(
                Filters=[{"Name": "instance-id", "Values": batch}],
                PaginationConfig={"PageSize": EC2_PAGE_SIZE},
            )
            for page in pages:
                for reservation in page.get("Reservations", []):
                    for instance in reservation.get("Instances", []):
                        primary = [
                            eni
                            for eni in instance.get("NetworkInterfaces", [])
                            if eni.get("Attachment", {}).get("DeviceIndex") == 0
                        ]
                        groups = primary[0].get("Groups", []) if primary else []
                        if not groups:
                            groups = instance.get("SecurityGroups", [])
                        result[instance["InstanceId"]] = tuple(
                            g["GroupId"] for g in groups if "GroupId" in g
                        )
        return result

    def ip_interfaces(
        self, addresses: Iterable[tuple[str, str]]
    ) -> dict[tuple[str, str], tuple[tuple[str, ...], str | None]]:
        """(VPC, IP) -> (groups, instance id) of the interface holding that address."""
        by_vpc: dict[tuple[str, str], set[str]] = {}
        for vpc_id, ip in addresses:
            name = "ipv6-addresses.ipv6-address" if ":" in ip else "addresses.private-ip-address"
            by_vpc.setdefault((vpc_id, name), set()).add(ip)
        result: dict[tuple[str, str], tuple[tuple[str, ...], str | None]] = {}
        paginator = self.ec2.get_paginator("describe_network_interfaces")
        for (vpc_id, name), ips in sorted(by_vpc.items()):
            for batch in chunks(sorted(ips), FILTER_CHUNK):
                filters: list[Any] = [{"Name": name, "Values": batch}]
                if vpc_id:
                    filters.append({"Name": "vpc-id", "Values": [vpc_id]})
                pages = paginator.paginate(
                    Filters=filters, PaginationConfig={"PageSize": EC2_PAGE_SIZE}
                )
                wanted = set(batch)
                for page in pages:
                    for eni in page.get("NetworkInterfaces", []):
                        groups = tuple(g["GroupId"] for g in eni.get("Groups", []))
                        instance = eni.get("Attachment", {}).get("InstanceId")
                        own = {a.get("PrivateIpAddress") for a in eni.get("PrivateIpAddresses", [])}
                        own |= {a.get("Ipv6Address") for a in eni.get("Ipv6Addresses", [])}
                        own.add(eni.get("PrivateIpAddress"))
                        for ip in wanted & own:
                            result[(vpc_id, ip)] = (groups, instance)
        missed = [(vpc_id, ip) for vpc_id, ip in addresses if (vpc_id, ip) not in result]
        result.update(self.prefix_interfaces(missed))
        return result

    def prefix_interfaces(
        self, addresses: Iterable[tuple[str, str]]
    ) -> dict[tuple[str, str], tuple[tuple[str, ...], str | None]]:
        """(VPC, IP) -> interface, for pods on delegated prefixes (EKS prefix delegation).

        No filter finds an address inside a prefix, but delegated prefixes have fixed sizes
        (/28 IPv4, /80 IPv6, aligned), so each address names its one candidate prefix, and
        DescribeInstances filters on prefixes exactly (DescribeNetworkInterfaces has no such
        filter). The interface whose prefix holds the address is then picked, as the AWS Load
        Balancer Controller does."""
        candidates: dict[tuple[str, str], dict[str, set[str]]] = {}  # -> prefix -> addresses
        for vpc_id, ip in set(addresses):
            length, family = (80, "ipv6") if ":" in ip else (28, "ipv4")
            try:
                prefix = str(ipaddress.ip_network(f"{ip}/{length}", strict=False))
            except ValueError:
                continue  # not an address: it stays a lookup miss
            candidates.setdefault((vpc_id, family), {}).setdefault(prefix, set()).add(ip)
        result: dict[tuple[str, str], tuple[tuple[str, ...], str | None]] = {}
        paginator = self.ec2.get_paginator("describe_instances")
        for (vpc_id, family), prefixes in sorted(candidates.items()):
            item = family.capitalize() + "Prefix"  # Ipv4Prefix, Ipv6Prefix
            for batch in chunks(sorted(prefixes), FILTER_CHUNK):
                filters: list[Any] = [
                    {
                        "Name": f"network-interface.{family}-prefixes.{family}-prefix",
                        "Values": batch,
                    }
                ]
                if vpc_id:
                    filters.append({"Name": "vpc-id", "Values": [vpc_id]})
                pages = paginator.paginate(
                    Filters=filters, PaginationConfig={"PageSize": EC2_PAGE_SIZE}
                )
                for page in pages:
                    for reservation in page.get("Reservations", []):
                        for instance in reservation.get("Instances", []):
                            for eni in instance.get("NetworkInterfaces", []):
                                groups = tuple(g["GroupId"] for g in eni.get("Groups", []))
                                for held in eni.get(item + "es", []):  # type: ignore[attr-defined]
                                    for ip in prefixes.get(_printed(held.get(item, "")), ()):
                                        result[(vpc_id, ip)] = (groups, instance["InstanceId"])
        return result

    def owned_groups(self) -> dict[str, set[Peer]]:
        """Groups that hold a rule with our owner tag (found by a server-side tag filter) ->
        the groups those rules admit."""
        paginator = self.ec2.get_paginator("describe_security_group_rules")
        pages = paginator.paginate(
            Filters=[{"Name": f"tag:{OWNER_TAG_KEY}", "Values": [self.policy.owner]}],
            PaginationConfig={"PageSize": EC2_PAGE_SIZE},
        )
        owned: dict[str, set[Peer]] = {}
        for page in pages:
            for r in page.get("SecurityGroupRules", []):
                if not r.get("IsEgress"):
                    peers = owned.setdefault(r["GroupId"], set())
                    if referenced := r.get("ReferencedGroupInfo", {}).get("GroupId"):
                        peers.add(Peer("group", referenced))
        return owned

    def rules(self, group_ids: Iterable[str]) -> list[Rule]:
        paginator = self.ec2.get_paginator("describe_security_group_rules")

        def fetch(batch: list[str]) -> list[dict[str, Any]]:
            pages = paginator.paginate(
                Filters=[{"Name": "group-id", "Values": batch}],
                PaginationConfig={"PageSize": EC2_PAGE_SIZE},
            )
            return [dict(r) for page in pages for r in page.get("SecurityGroupRules", [])]

        docs: list[dict[str, Any]] = []
        gone: list[str] = []
        for batch in chunks(sorted(set(group_ids)), FILTER_CHUNK):
            docs.extend(split_on_missing(fetch, batch, GROUP_NOT_FOUND, gone))
        parsed: list[Rule] = []
        for doc in docs:
            try:
                parsed.extend(ingress_rules([doc], "current"))
            except RuleError as err:  # a rule we cannot model is reported, never touched
                self.notes.append(f"{doc.get('GroupId')}: skipped an unreadable rule ({err})")
        return parsed

    def groups(self, group_ids: Iterable[str]) -> dict[str, SecurityGroup]:
        paginator = self.ec2.get_paginator("describe_security_groups")

        def fetch(batch: list[str]) -> list[SecurityGroup]:
            pages = paginator.paginate(
                Filters=[{"Name": "group-id", "Values": batch}],
                PaginationConfig={"PageSize": EC2_PAGE_SIZE},
            )
            return [
                SecurityGroup(
                    group_id=g["GroupId"],
                    vpc_id=g.get("VpcId", ""),
                    name=g.get("GroupName", ""),
                    tags=tags_of({t["Key"]: t.get("Value", "") for t in g.get("Tags", [])}),
                )
                for page in pages
                for g in page.get("SecurityGroups", [])
            ]

        found: dict[str, SecurityGroup] = {}
        gone: list[str] = []
        for batch in chunks(sorted(set(group_ids)), FILTER_CHUNK):
            found.update(
                (g.group_id, g) for g in split_on_missing(fetch, batch, GROUP_NOT_FOUND, gone)
            )
        return found

    def prefix_list_sizes(self, list_ids: Iterable[str]) -> dict[str, PrefixListSize]:
        """MaxEntries and family of referenced prefix lists: a reference costs MaxEntries rules."""
        sizes: dict[str, PrefixListSize] = {}
        for batch in chunks(sorted(set(list_ids)), FILTER_CHUNK):
            try:
                pages = self.ec2.get_paginator("describe_managed_prefix_lists").paginate(
                    Filters=[{"Name": "prefix-list-id", "Values": batch}]
                )
                for page in pages:
                    for found in page.get("PrefixLists", []):
                        entries = found.get("MaxEntries")
                        if isinstance(entries, int):
                            sizes[found["PrefixListId"]] = PrefixListSize(
                                found.get("AddressFamily", "IPv4"), entries
                            )
            except ClientError as err:
                self.notes.append(
                    f"prefix lists could not be read ({error_code(err)}): each reference counts as one rule in both families"
                )
        unknown = sorted(set(list_ids) - sizes.keys())
        if unknown:
            self.notes.append(
                f"prefix list(s) {', '.join(unknown)} have no known size: each counts as one rule in both families"
            )
        return sizes

    def account_rule_quota(self) -> int | None:
        if self.quotas is None:
            return None
        service, code = RULE_QUOTA
        try:
            value = self.quotas.get_service_quota(ServiceCode=service, QuotaCode=code)
            return int(value["Quota"]["Value"])
        except ClientError as err:
            self.notes.append(
                f"the account's rule quota ({code}) could not be read ({error_code(err)}): "
                "the AWS default of 60 applies unless the policy sets quota"
            )
            return None

    # --- composition ---------------------------------------------------------------------

    def addresses(
        self, lbs: list[LoadBalancer], raw_tgs: list[dict[str, Any]], pool: ThreadPoolExecutor
    ) -> tuple[list[LoadBalancer], dict[str, bool | None], dict[str, tuple[str, ...]]]:
        """What a binding admitting load balancers by address needs, read only for those:
        their subnets' CIDRs, their VPCs' CIDRs and their target groups' client IP
        preservation."""
        bindings = self.policy.desired_settings().bindings
        by_address = {
            lb.arn
            for lb in lbs
            if any(b.source == "load_balancer_addresses" and b.selects(lb.tags) for b in bindings)
        }
        if not by_address:
            return lbs, {}, {}
        subnets = self.subnet_cidrs(s for arn in by_address for s in self.subnets_of.get(arn, ()))
        lbs = [
            replace(
                lb,
                subnet_cidrs=tuple(
                    c for s in self.subnets_of.get(lb.arn, ()) for c in subnets.get(s, ())
                ),
            )
            if lb.arn in by_address
            else lb
            for lb in lbs
        ]
        vpcs = self.vpc_cidrs(lb.vpc_id for lb in lbs if lb.arn in by_address and lb.vpc_id)
        tgs = [
            tg
            for tg in raw_tgs
            if by_address.intersection(tg.get("LoadBalancerArns", []))
            and str(tg.get("Protocol", "")).upper() not in ALWAYS_PRESERVED  # nothing to read
        ]
        preserved = dict(
            zip(
                (tg["TargetGroupArn"] for tg in tgs),
                pool.map(self.preserves_client_ip, tgs),
                strict=True,
            )
        )
        return lbs, preserved, vpcs

    def narrowing(self, lbs: list[LoadBalancer], raw_tgs: list[dict[str, Any]]) -> Narrowing | None:
        """The peer closure of the event's scope (core/narrow.py), when it has one that
        leaves some target group out (else the read is the full one, and says so)."""
        settings = self.policy.desired_settings()
        if self.scope is None or not narrowable(self.scope, settings):
            return None
        attached = {tg["TargetGroupArn"]: tg.get("LoadBalancerArns", []) for tg in raw_tgs}
        found = narrow(self.scope, settings.bindings, lbs, attached)
        if found is None or found.target_groups >= attached.keys():
            return None
        self.notes.append(
            f"event-scoped read: {len(found.target_groups)} of {len(raw_tgs)} target "
            "group(s), the ones that share a rule source with the event's"
        )
        return found

    def closure(self, lbs: list[LoadBalancer], raw_tgs: list[dict[str, Any]]) -> Narrowing:
        """Under the locks: the target groups whose load balancer admits a peer whose rule
        the plan revokes (core/narrow.py `admitting`), the only traffic such a revoke can
        remove."""
        assert self.locked is not None
        peers = self.locked.peers
        attached = {tg["TargetGroupArn"]: tg.get("LoadBalancerArns", []) for tg in raw_tgs}
        found = admitting(peers, self.policy.desired_settings().bindings, lbs, attached)
        if peers:
            self.notes.append(
                f"read under the locks: {len(found)} of {len(raw_tgs)} target group(s), the "
                "ones whose load balancer admits a peer whose rule the plan revokes"
            )
        return Narrowing(peers, found)

    def read(self) -> Inventory:
        policy = self.policy
        locked = self.locked
        if locked is not None and not locked.peers:
            lbs, raw_tgs = [], []  # nothing to revoke: the locked groups' rules are enough
        else:
            lbs = self.load_balancers()
            raw_tgs = self.target_groups(lbs)
        narrowed = self.narrowing(lbs, raw_tgs) if locked is None else self.closure(lbs, raw_tgs)
        if narrowed is not None:
            raw_tgs = [tg for tg in raw_tgs if tg["TargetGroupArn"] in narrowed.target_groups]
        # One call per target group, so they run a few at a time (boto3 clients are
        # thread-safe); results are gathered in listing order, so the read is deterministic.
        with ThreadPoolExecutor(max_workers=TARGET_HEALTH_WORKERS) as pool:
            healths = list(pool.map(self.targets, raw_tgs))
            lbs, preserved, vpc_cidrs = self.addresses(lbs, raw_tgs, pool)
        registered: dict[str, list[tuple[str, int | None]]] = {}
        for tg, targets in zip(raw_tgs, healths, strict=True):
            if targets is None:
                self.notes.append(
                    f"target group {tg.get('TargetGroupName')} vanished while reading"
                )
            else:
                registered[tg["TargetGroupArn"]] = targets
        bindings = policy.desired_settings().bindings
        need_interfaces = any(b.needs_interfaces for b in bindings)
        instance_ids = [
            tid
            for tg in raw_tgs
            if tg.get("TargetType") == "instance"
            for tid, _ in registered.get(tg["TargetGroupArn"], [])
        ]
        addresses = [
            (tg.get("VpcId", ""), tid)
            for tg in raw_tgs
            if tg.get("TargetType") == "ip"
            for tid, _ in registered.get(tg["TargetGroupArn"], [])
        ]
        by_instance = self.instance_groups(instance_ids) if need_interfaces else {}
        by_ip = self.ip_interfaces(addresses) if need_interfaces else {}

        target_groups: list[TargetGroup] = []
        for tg in raw_tgs:
            arn = tg["TargetGroupArn"]
            if arn not in registered:
                continue
            kind: TargetKind = tg.get("TargetType", "instance")
            members: list[Target] = []
            for tid, port in registered[arn]:
                where: tuple[tuple[str, ...], str | None] = ((), None)
                if kind == "instance":
                    where = (by_instance.get(tid, ()), tid)
                elif kind == "ip":
                    where = by_ip.get((tg.get("VpcId", ""), tid), where)
                members.append(Target(tid, port, *where))
            target_groups.append(
                TargetGroup(
                    arn=arn,
                    name=tg.get("TargetGroupName", arn),
                    protocol=tg.get("Protocol", ""),
                    port=tg.get("Port"),
                    target_type=kind,
                    health_check_port=str(tg.get("HealthCheckPort") or "traffic-port"),
                    health_check_protocol=tg.get("HealthCheckProtocol") or "TCP",
                    health_check_enabled=bool(tg.get("HealthCheckEnabled", True)),
                    load_balancer_arns=tuple(tg.get("LoadBalancerArns", [])),
                    vpc_id=tg.get("VpcId", ""),
                    targets=tuple(members),
                    preserve_client_ip=preserved.get(arn),
                    ip_address_type=tg.get("IpAddressType") or "ipv4",
                )
            )

        hosts: set[str] = {r.group_id for r in policy.desired_settings().static_rules}
        hosts |= policy.named_groups
        for tg_model in target_groups:
            for target in tg_model.targets:
                hosts.update(target.group_ids)
        if locked is not None:  # the locked groups' rules, not the account's
            rule_hosts = set(locked.groups)
            hosts |= rule_hosts
            owned: set[str] = set()
        else:
            owned_peers = self.owned_groups()
            if narrowed is not None:  # only groups whose rules from the closure's peers may go
                owned_peers = {g: p for g, p in owned_peers.items() if p & narrowed.peers}
            owned = set(owned_peers)
            hosts |= owned
            rule_hosts = set(hosts)  # the targets' groups and the owned ones
        read_lbs = {arn for tg in raw_tgs for arn in tg.get("LoadBalancerArns", [])}
        peers = rule_sources(
            (lb for lb in lbs if narrowed is None or lb.arn in read_lbs),
            policy.desired_settings().bindings,
        )
        peers |= policy.backend_groups
        peers |= {
            r.key.peer.value
            for r in policy.desired_settings().static_rules
            if r.key.peer.kind == "group"
        }
        rules = self.rules(rule_hosts)
        if locked is not None:
            owned = {r.group_id for r in rules if r.owned_by(policy.owner)}
        groups = self.groups(hosts | peers)  # after the rules: see the module docstring
        # noted by the desired state, once, with the group's role (a static rule's, ...)
        missing = frozenset(g for g in rule_hosts if g not in groups)
        kept = tuple(r for r in rules if r.group_id in groups)
        lists = {r.key.peer.value for r in kept if r.key.peer.kind == "prefix_list"}
        lists |= {
            r.key.peer.value
            for r in policy.desired_settings().static_rules
            if r.key.peer.kind == "prefix_list"
        }
        sizes = self.prefix_list_sizes(lists) if lists else {}
        quota = self.account_rule_quota()
        return Inventory(
            load_balancers=tuple(lbs),
            target_groups=tuple(target_groups),
            groups=groups,
            rules=kept,
            owned_groups=frozenset(g for g in owned if g in groups),
            notes=tuple(self.notes),
            missing_groups=missing,
            prefix_lists=sizes,
            account_rule_quota=quota,
            vpc_cidrs=vpc_cidrs,
            narrowed_to=None if narrowed is None else narrowed.peers,
        )


def rule_sources(lbs: Iterable[LoadBalancer], bindings: Iterable[Binding]) -> set[str]:
    """The groups the bindings name as rule sources for these load balancers
    (core/desired.py `source_groups`): a binding with a backend group admits from it alone,
    so behind the controller's shared backend group a load balancer's own groups are not
    read (they are no rule's peer), and the read stays one call at any account size
    (docs/architecture.md, "The inventory index"). A binding that admits by address reads
    them all (the policy draft tells the controller's backend group by them)."""
    chosen = list(bindings)
    return {
        g
        for lb in lbs
        for binding in chosen
        if binding.selects(lb.tags)
        for g in (
            lb.security_groups
            if binding.source == "load_balancer_addresses"
            else source_groups(lb, binding)
        )
    }


def read_locked(
    ec2: EC2Client,
    elbv2: ElasticLoadBalancingv2Client,
    policy: Policy,
    locked: Locked,
    quotas: Any = None,
) -> Inventory:
    """The locked groups' rules and the closure of `locked.peers`, exact for those peers
    (`narrowed_to`); no ELBv2 call at all when there are none."""
    return _Reader(ec2, elbv2, policy, quotas, None, locked).read()


def _associated(blocks: Iterable[Any], family: str) -> list[str]:
    """The CIDRs of an association set still associated (`family` "" or "Ipv6")."""
    state = f"{family}CidrBlockState"
    return [
        b[f"{family}CidrBlock"] for b in blocks if b.get(state, {}).get("State") == "associated"
    ]


def _printed(prefix: str) -> str:
    """A prefix as `ipaddress` prints it (AWS may print IPv6 in another form)."""
    try:
        return str(ipaddress.ip_network(prefix, strict=False))
    except ValueError:
        return prefix


def read_inventory(
    ec2: EC2Client,
    elbv2: ElasticLoadBalancingv2Client,
    policy: Policy,
    quotas: Any = None,
    scope: Scope | None = None,
) -> Inventory:
    """Everything the desired state of `policy` depends on, plus the rules of the groups in
    play; with an event's `scope`, only its peer closure when it has one (core/narrow.py)."""
    return _Reader(ec2, elbv2, policy, quotas, scope).read()


@dataclass(frozen=True)
class AccountInventory:
    """The InventoryReader port (core/ports.py) on the account: the deployment's clients and
    policy, bound once (wiring.py), so the use cases ask only what to read."""

    ec2: EC2Client
    elbv2: ElasticLoadBalancingv2Client
    policy: Policy
    quotas: Any = None  # a Service Quotas client: the account's rule quota; None: the default

    def read(self, narrow: Scope | None = None) -> Inventory:
        return read_inventory(self.ec2, self.elbv2, self.policy, self.quotas, narrow)

    def read_locked(self, locked: Locked) -> Inventory:
        return read_locked(self.ec2, self.elbv2, self.policy, locked, self.quotas)
