"""The planner's read through the inventory index (docs/architecture.md, "The inventory index").

The same read as `adapters/inventory.py` (it is that reader with its ELBv2 half and its
interface lookups served from the index), except:

- an event's own load balancers and target groups are read fresh (a few calls: the load
  balancers by ARN with their tags, the target groups by ARN or by load balancer, and one
  DescribeTargetHealth per target group), and so are the interfaces the index does not know
  afresh and those of the instances whose groups the event changed;
- the schedule lists the load balancers and the target groups (a few paged calls), reads
  the tags (one call per 20) of the load balancers the index lacks or verified longest
  ago, and the targets of the target groups the index lacks or verified longest ago
  (`core/inventory_index.to_verify`), at most `max_fresh` of them;
- every other load balancer's tags, target group's targets and known interface's groups
  come from the index.

The security groups and their rules are always read fresh (EC2, filtered by group id), so a
plan's current state is never the index's. What was read fresh is handed back as entries for
the index, with what the verification found the index had wrong (drift).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sg_reconciler.adapters.inventory import (
    ELB_PAGE_SIZE,
    LB_NOT_FOUND,
    TAG_CHUNK,
    TG_NOT_FOUND,
    _Reader,
    chunks,
    split_on_missing,
)
from sg_reconciler.core.account import LoadBalancer, SecurityGroup, Target, TargetGroup, tags_of
from sg_reconciler.core.index_events import Version
from sg_reconciler.core.inventory_index import (
    Entry,
    IndexedRead,
    IndexView,
    Kind,
    drift,
    gone_entry,
    load_balancer_entry,
    load_balancer_of,
    overlaid,
    owned_entry,
    owned_of,
    slice_size,
    target_entry,
    target_group_entry,
    target_key,
    to_verify,
)
from sg_reconciler.core.narrow import Narrowing, narrow, narrowable
from sg_reconciler.core.policy import Policy
from sg_reconciler.core.rules import Peer, Rule
from sg_reconciler.core.scope import Scope

ARNS_PER_CALL = 20  # DescribeLoadBalancers / DescribeTargetGroups by ARN, as DescribeTags


@dataclass
class Ec2Reads:
    """The EC2 reads of one planner invocation, by group: an event's narrow plan that does
    not stand is planned again from the whole index moments later, in the same invocation,
    and reads only the groups the first read did not (the rules under the locks are read
    fresh again by the refresh, docs/architecture.md "Reads"). Never kept across
    invocations."""

    owned: dict[str, set[Peer]] | None = None
    rules: dict[str, tuple[Rule, ...]] = field(default_factory=dict)
    notes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    groups: dict[str, SecurityGroup | None] = field(default_factory=dict)


class _InterfacesFromIndex(_Reader):
    """Interfaces' groups from the index where it knows them afresh (within the period),
    else from EC2 (filtered by id); what EC2 said goes back as entries for the index."""

    view: IndexView
    version: Version
    period: float
    out: list[Entry]

    def _read_anyway(self, key: str) -> bool:
        """A target the read must see fresh, whatever the index holds."""
        return False

    def _known(self, key: str) -> Entry | None:
        entry = self.view.targets.get(key)
        if (
            entry is None
            or self._read_anyway(key)
            or entry.stale(self.version.seconds(), self.period)
        ):
            return None
        return entry

    def instance_groups(self, instance_ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        result: dict[str, tuple[str, ...]] = {}
        ask = []
        for iid in sorted(set(instance_ids)):
            if (entry := self._known(iid)) is None:
                ask.append(iid)
            else:
                result[iid] = tuple(entry.doc.get("groups", ()))
        read = super().instance_groups(ask) if ask else {}
        self.out += [target_entry(i, g, i, self.version) for i, g in read.items()]
        result.update(read)
        return result

    def ip_interfaces(
        self, addresses: Iterable[tuple[str, str]]
    ) -> dict[tuple[str, str], tuple[tuple[str, ...], str | None]]:
        result: dict[tuple[str, str], tuple[tuple[str, ...], str | None]] = {}
        ask = []
        for vpc, ip in sorted(set(addresses)):
            if (entry := self._known(target_key("ip", vpc, ip))) is None:
                ask.append((vpc, ip))
            else:
                result[(vpc, ip)] = (
                    tuple(entry.doc.get("groups", ())),
                    entry.doc.get("instance_id"),
                )
        read = super().ip_interfaces(ask) if ask else {}
        for (vpc, ip), (groups, instance) in read.items():
            self.out.append(target_entry(target_key("ip", vpc, ip), groups, instance, self.version))
        result.update(read)
        return result


class _IndexedReader(_InterfacesFromIndex):
    """`_Reader` with its ELBv2 half and interface lookups served from the index."""

    def setup(
        self,
        view: IndexView,
        event: Scope | None,
        read: Version,
        period: float,
        max_fresh: int,
        whole_index: bool = False,
        memo: Ec2Reads | None = None,
    ) -> None:
        self.memo = Ec2Reads() if memo is None else memo
        self.view, self.event, self.version = view, event, read
        self.period, self.max_fresh = period, max_fresh
        # An event's plan that did not stand is planned again from the whole index (its
        # objects were just read fresh): no listing, no narrowing.
        self.whole_index = whole_index and bool(view)
        if self.whole_index:
            event = self.event = Scope()
        # The schedule, an event that names no object (an interface change), or an index
        # still empty (its first run fills it) list the account.
        # So does an event that a narrow read cannot serve (it names security groups, or
        # the policy admits load balancers by address): those read in full, as without the
        # index (docs/architecture.md, "Reads").
        self.listing = not self.whole_index and (
            event is None
            or event.full
            or not view
            or not narrowable(event, self.policy.desired_settings())
        )
        self.narrow_failed = False
        self.listing_calls = 0  # ELBv2 calls of the schedule's listing, before its slice
        self.event_tgs: list[dict[str, Any]] = []
        self.fresh_tgs: set[str] = set()
        self.out: list[Entry] = []
        self.found_drift: list[str] = []
        self.gone: list[tuple[Kind, str]] = []
        self.unread = 0
        self.stale = 0
        self.fresh_instances = set(event.regrouped_instances) if event is not None else set()

    # --- load balancers ----------------------------------------------------------------

    def load_balancers(self) -> list[LoadBalancer]:
        if self.listing:
            found = self._listed_load_balancers()
        else:
            self.event_tgs = self._event_target_groups()
            wanted = set(self.event.load_balancer_arns) if self.event else set()
            wanted |= {  # a new target group's load balancers the index does not hold yet
                arn
                for tg in self.event_tgs
                for arn in tg.get("LoadBalancerArns", ())
                if arn not in self.view.load_balancers
            }
            fresh = self._load_balancers_by_arn(sorted(wanted))
            found = {arn: load_balancer_of(e) for arn, e in self.view.load_balancers.items()}
            for arn in wanted:
                found.pop(arn, None)
            found.update((lb.arn, lb) for lb in fresh)
        return sorted(
            (lb for lb in found.values() if self.policy.selects(dict(lb.tags))),
            key=lambda lb: lb.arn,
        )

    def _listed_load_balancers(self) -> dict[str, LoadBalancer]:
        """Every load balancer (paged), and the tags (one call per 20) of those the index
        lacks and of a slice verified longest ago, as the target groups' targets: the other
        load balancers' tags come from the index, kept by AddTags and RemoveTags events. A
        revoke never rests on them: under the locks its closure reads the tags fresh. The
        index's entries are rewritten when changed or due; a due entry whose tags were wrong
        is drift."""
        docs: list[dict[str, Any]] = []
        paginator = self.elbv2.get_paginator("describe_load_balancers")
        for page in paginator.paginate(PaginationConfig={"PageSize": ELB_PAGE_SIZE}):
            docs.extend(page.get("LoadBalancers", []))  # type: ignore[arg-type]
            self.listing_calls += 1
        held = self.view.load_balancers
        arns = [d["LoadBalancerArn"] for d in docs]
        known = sorted((a for a in arns if a in held), key=lambda a: (_age(held[a]), a))
        due = set(known[: slice_size(len(arns), self.period, self._interval(held.values()))])
        asked = [a for a in arns if a not in held or a in due]
        tags = self._tags(asked)
        self.listing_calls += -(-len(asked) // TAG_CHUNK)
        self.gone += [("lb", a) for a in held if a not in set(arns)]
        found: dict[str, LoadBalancer] = {}
        for doc in docs:
            arn = doc["LoadBalancerArn"]
            entry = held.get(arn)
            if arn in tags:
                lb = _load_balancer(doc, tags[arn])
                if entry is not None and load_balancer_of(entry).tags != lb.tags:
                    self.found_drift.append(f"{arn}: its tags changed")
            elif arn not in asked and entry is not None:
                lb = _load_balancer(doc, dict(load_balancer_of(entry).tags))
            else:
                continue  # gone between the listing and its tags
            found[arn] = lb
            if arn in due or _changed(entry, lb):
                self.out.append(load_balancer_entry(lb, self.version))
        return found

    def _load_balancers_by_arn(self, arns: Sequence[str]) -> list[LoadBalancer]:
        gone: list[str] = []

        def fetch(batch: list[str]) -> list[dict[str, Any]]:
            response = self.elbv2.describe_load_balancers(LoadBalancerArns=batch)
            return list(response.get("LoadBalancers", []))  # type: ignore[arg-type]

        docs: list[dict[str, Any]] = []
        for batch in chunks(list(arns), ARNS_PER_CALL):
            docs += split_on_missing(fetch, batch, LB_NOT_FOUND, gone)
        tags = self._tags([d["LoadBalancerArn"] for d in docs])
        self.gone += [("lb", a) for a in gone]
        lbs = [_load_balancer(d, tags.get(d["LoadBalancerArn"], {})) for d in docs]
        self.out += [load_balancer_entry(lb, self.version) for lb in lbs]
        return lbs

    def _tags(self, arns: Sequence[str]) -> dict[str, dict[str, str]]:
        def fetch(batch: list[str]) -> list[tuple[str, dict[str, str]]]:
            response = self.elbv2.describe_tags(ResourceArns=batch)
            return [
                (d["ResourceArn"], {t["Key"]: t.get("Value", "") for t in d.get("Tags", [])})
                for d in response.get("TagDescriptions", [])
            ]

        found: dict[str, dict[str, str]] = {}
        missing: list[str] = []
        for batch in chunks(list(arns), TAG_CHUNK):
            found.update(split_on_missing(fetch, batch, LB_NOT_FOUND, missing))
        return found

    def _interval(self, entries: Iterable[Entry]) -> float:
        """Seconds since the index's last verification (the schedule's interval, measured)."""
        newest = max((e.verified.seconds() for e in entries if e.verified), default=None)
        if newest is None:
            return self.period
        return max(1.0, self.version.seconds() - newest)

    # --- target groups -----------------------------------------------------------------

    def target_groups(self, managed: Iterable[LoadBalancer]) -> list[dict[str, Any]]:
        arns = {lb.arn for lb in managed}
        if not arns:
            return []
        if self.listing:
            docs = super().target_groups(managed)
            listed = [d["TargetGroupArn"] for d in docs]
            self.listing_calls += 1 + len(listed) // ELB_PAGE_SIZE
            due = to_verify(
                listed, self.view, self.period, self._interval(self.view.target_groups.values())
            )
            missing = [a for a in listed if a not in self.view.target_groups]
            self.fresh_tgs = set(due[: max(self.max_fresh - self.listing_calls, 0)])
            self.unread = len([a for a in missing if a not in self.fresh_tgs])
            self.gone += [("tg", a) for a in self.view.target_groups if a not in set(listed)]
            return docs
        event = self.event or Scope()
        by_arn = {a: _raw(e) for a, e in self.view.target_groups.items()}
        for kind, arn in self.gone:
            if kind == "tg":
                by_arn.pop(arn, None)
        fresh = list(self.event_tgs)
        for lb_arn in sorted(event.load_balancer_arns & arns):
            pages = self.elbv2.get_paginator("describe_target_groups").paginate(
                LoadBalancerArn=lb_arn, PaginationConfig={"PageSize": ELB_PAGE_SIZE}
            )
            attached = [dict(tg) for page in pages for tg in page.get("TargetGroups", [])]
            for arn, doc in list(by_arn.items()):  # groups no longer attached to it
                if lb_arn in doc.get("LoadBalancerArns", ()) and arn not in {
                    d["TargetGroupArn"] for d in attached
                }:
                    fresh.append(
                        dict(
                            doc,
                            LoadBalancerArns=[
                                a for a in doc.get("LoadBalancerArns", ()) if a != lb_arn
                            ],
                        )
                    )
            fresh += attached
        for doc in fresh:
            by_arn[doc["TargetGroupArn"]] = dict(doc)
            self.fresh_tgs.add(doc["TargetGroupArn"])
        return [
            d for _, d in sorted(by_arn.items()) if arns.intersection(d.get("LoadBalancerArns", []))
        ]

    def narrowing(self, lbs: list[LoadBalancer], raw_tgs: list[dict[str, Any]]) -> Narrowing | None:
        """An event's peer closure over the index (core/narrow.py): its plan stands only if
        it just authorizes (an authorization may come from the index, a revoke never does),
        else the planner plans again from the schedule's read. An event naming an object
        neither the index nor a fresh read knows (deleted) is read as the schedule reads."""
        if self.listing or self.event is None or self.whole_index:
            return None
        settings = self.policy.desired_settings()
        attached = {tg["TargetGroupArn"]: tg.get("LoadBalancerArns", []) for tg in raw_tgs}
        found = narrow(self.event, settings.bindings, lbs, attached)
        if found is None:
            self.narrow_failed = True
            return Narrowing(frozenset(), frozenset())
        self.notes.append(
            f"event-scoped read through the inventory index: {len(self.fresh_tgs)} target "
            f"group(s) read fresh, {len(found.target_groups)} in the closure from the index"
        )
        return found

    def _event_target_groups(self) -> list[dict[str, Any]]:
        """The event's own target groups, by ARN (one call per 20); the gone ones noted."""
        arns = sorted(self.event.target_group_arns) if self.event else []
        gone: list[str] = []

        def fetch(batch: list[str]) -> list[dict[str, Any]]:
            response = self.elbv2.describe_target_groups(TargetGroupArns=batch)
            return [dict(tg) for tg in response.get("TargetGroups", [])]

        found: list[dict[str, Any]] = []
        for batch in chunks(arns, ARNS_PER_CALL):
            found += split_on_missing(fetch, batch, TG_NOT_FOUND, gone)
        self.gone += [("tg", a) for a in gone]
        return found

    def targets(self, tg: dict[str, Any]) -> list[tuple[str, int | None]] | None:
        arn = tg["TargetGroupArn"]
        entry = self.view.target_groups.get(arn)
        if arn not in self.fresh_tgs:
            if entry is None:
                return []  # listed, not yet read: counted in `unread`, revokes wait
            if entry.stale(self.version.seconds(), self.period):
                self.stale += 1  # revokes wait (app/indexed_plan.py)
            if self.listing:  # the listing's fields are fresh, the targets are the index's
                model = _model(tg, [(m.target_id, m.port) for m in entry.members if m.present])
                if drift(entry, model):
                    self.out.append(
                        target_group_entry(model, entry.verified or entry.version, entry)
                    )
            return [(m.target_id, m.port) for m in entry.members if m.present]
        found = super().targets(tg)
        if found is None:
            self.gone.append(("tg", arn))
            return None
        model = _model(tg, found)
        self.found_drift += drift(entry, model) if entry is not None else []
        self.out.append(target_group_entry(model, self.version, entry))
        return found

    # --- security groups (once per invocation, `Ec2Reads`) -----------------------------

    def owned_groups(self) -> dict[str, set[Peer]]:
        """A read that lists the account (the schedule's) scans it for the groups that hold
        our rules (one paged call) and keeps what it found in the index; an event's read of
        its own objects takes them from there while that is younger than the period
        (`owned_entry`: they only widen its read, so a group that got its first rule since
        is reached by the schedule)."""
        if self.memo.owned is None:
            held = self.view.owned.get(self.policy.owner)
            if not self.listing and held is not None and not self._stale(held):
                self.memo.owned = {
                    g: {Peer("group", p) for p in peers} for g, peers in owned_of(held).items()
                }
            else:
                self.memo.owned = super().owned_groups()
                found = {
                    g: {p.value for p in peers if p.kind == "group"}
                    for g, peers in self.memo.owned.items()
                }
                kept = owned_entry(self.policy.owner, found, self.version)
                if kept is None and held is not None:  # too many to keep: events scan
                    self.gone.append(("owned", self.policy.owner))
                elif kept is not None and (
                    held is None or owned_of(held) != found or self._stale(held, 0.5)
                ):
                    self.out.append(kept)
        return {g: set(p) for g, p in self.memo.owned.items()}

    def _stale(self, entry: Entry, share: float = 1.0) -> bool:
        """Older than `share` of the verification period."""
        return entry.stale(self.version.seconds(), self.period * share)

    def rules(self, group_ids: Iterable[str]) -> list[Rule]:
        wanted = sorted(set(group_ids))
        ask = [g for g in wanted if g not in self.memo.rules]
        if ask:
            before = len(self.notes)
            read = super().rules(ask)
            by_group: dict[str, list[Rule]] = {g: [] for g in ask}
            for rule in read:
                by_group.setdefault(rule.group_id, []).append(rule)
            for g, found in by_group.items():
                self.memo.rules[g] = tuple(found)
            for note in self.notes[before:]:
                g = note.split(":", 1)[0]
                self.memo.notes[g] = (*self.memo.notes.get(g, ()), note)
            del self.notes[before:]
        for g in wanted:
            self.notes.extend(self.memo.notes.get(g, ()))
        return [r for g in wanted for r in self.memo.rules.get(g, ())]

    def groups(self, group_ids: Iterable[str]) -> dict[str, SecurityGroup]:
        wanted = sorted(set(group_ids))
        ask = [g for g in wanted if g not in self.memo.groups]
        if ask:
            found = super().groups(ask)
            self.memo.groups.update((g, found.get(g)) for g in ask)
        return {g: sg for g in wanted if (sg := self.memo.groups[g]) is not None}

    def _read_anyway(self, key: str) -> bool:
        """An instance whose groups the event changed is read fresh, whatever the index
        holds."""
        return key in self.fresh_instances


def read_through_index(
    ec2: Any,
    elbv2: Any,
    policy: Policy,
    view: IndexView,
    *,
    scope: Scope | None,
    now: float,
    period_seconds: float,
    max_fresh: int,
    quotas: Any = None,
    whole_index: bool = False,
    memo: Ec2Reads | None = None,
) -> IndexedRead:
    """The inventory from the index plus fresh reads: of an event's own objects (`scope` not
    full), or of the schedule's slice (`scope` None or full); `whole_index`: the index alone
    (after an event's read, whose plan did not stand), no listing. `memo`: the EC2 reads
    this invocation made already."""
    memo = Ec2Reads() if memo is None else memo
    reader = _IndexedReader(ec2, elbv2, policy, quotas)
    reader.setup(view, scope, Version.of_read(now), period_seconds, max_fresh, whole_index, memo)
    inventory = reader.read()
    if reader.narrow_failed:  # the event names what is gone: its old rules need the listing
        first = reader
        reader = _IndexedReader(ec2, elbv2, policy, quotas)
        # over the index as the event's fresh reads left it (a load balancer's new tags)
        after = overlaid(
            view, [*first.out, *(gone_entry(k, a, first.version) for k, a in first.gone)]
        )
        reader.setup(after, None, Version.of_read(now), period_seconds, max_fresh, memo=memo)
        inventory = reader.read()
        reader.out = [*first.out, *reader.out]
        reader.gone = [*first.gone, *reader.gone]
    return IndexedRead(
        inventory, reader.out, reader.found_drift, reader.gone, reader.unread, reader.stale
    )


def _age(entry: Entry) -> str:
    return entry.verified.text() if entry.verified is not None else ""


def _load_balancer(doc: dict[str, Any], tags: dict[str, str]) -> LoadBalancer:
    return LoadBalancer(
        arn=doc["LoadBalancerArn"],
        name=doc.get("LoadBalancerName", doc["LoadBalancerArn"]),
        type=doc.get("Type", ""),
        security_groups=tuple(doc.get("SecurityGroups", [])),
        tags=tags_of(tags),
        vpc_id=doc.get("VpcId", ""),
        scheme=doc.get("Scheme", "internet-facing"),
        ip_address_type=doc.get("IpAddressType", "ipv4"),
    )


def _changed(entry: Entry | None, lb: LoadBalancer) -> bool:
    return entry is None or load_balancer_of(entry) != lb


def _raw(entry: Entry) -> dict[str, Any]:
    """A target group entry in DescribeTargetGroups' shape, for the reader."""
    doc = entry.doc
    return {
        "TargetGroupArn": entry.key,
        "TargetGroupName": doc.get("name", entry.key),
        "Protocol": doc.get("protocol", ""),
        "Port": doc.get("port"),
        "TargetType": doc.get("target_type", "instance"),
        "HealthCheckPort": doc.get("health_check_port", "traffic-port"),
        "HealthCheckProtocol": doc.get("health_check_protocol", "TCP"),
        "HealthCheckEnabled": doc.get("health_check_enabled", True),
        "LoadBalancerArns": list(doc.get("load_balancer_arns", ())),
        "VpcId": doc.get("vpc_id", ""),
        "IpAddressType": doc.get("ip_address_type", "ipv4"),
    }


def _model(tg: dict[str, Any], targets: Sequence[tuple[str, int | None]]) -> TargetGroup:
    return TargetGroup(
        arn=tg["TargetGroupArn"],
        name=tg.get("TargetGroupName", tg["TargetGroupArn"]),
        protocol=tg.get("Protocol", ""),
        port=tg.get("Port"),
        target_type=tg.get("TargetType", "instance"),
        health_check_port=str(tg.get("HealthCheckPort") or "traffic-port"),
        health_check_protocol=tg.get("HealthCheckProtocol") or "TCP",
        health_check_enabled=bool(tg.get("HealthCheckEnabled", True)),
        load_balancer_arns=tuple(tg.get("LoadBalancerArns", [])),
        vpc_id=tg.get("VpcId", ""),
        targets=tuple(Target(t, p) for t, p in targets),
        ip_address_type=tg.get("IpAddressType") or "ipv4",
    )


@dataclass(frozen=True)
class IndexFetch:
    """`read_through_index` with the deployment's clients and policy bound (wiring.py), so
    the use case (app/indexed_plan.py) asks only what to read. Made per invocation: its
    `memo` holds that invocation's EC2 reads (`Ec2Reads`)."""

    ec2: Any
    elbv2: Any
    policy: Policy
    quotas: Any = None
    memo: Ec2Reads = field(default_factory=Ec2Reads)

    def __call__(
        self,
        view: IndexView,
        *,
        scope: Scope | None,
        now: float,
        period_seconds: float,
        max_fresh: int,
        whole_index: bool = False,
    ) -> IndexedRead:
        return read_through_index(
            self.ec2,
            self.elbv2,
            self.policy,
            view,
            scope=scope,
            now=now,
            period_seconds=period_seconds,
            max_fresh=max_fresh,
            quotas=self.quotas,
            whole_index=whole_index,
            memo=self.memo,
        )
