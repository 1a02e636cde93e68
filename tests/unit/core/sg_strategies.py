"""Small worlds for property tests: 1-3 groups, a group reference, nested IPv4 CIDRs, an IPv6
CIDR, tcp/udp/-1/icmp; current rules owned or not, desired rules kept, changed or new."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from unit.core.sg_judge import OWNER, OWNER_TAG, Doc, key

GROUPS = ("sg-0aaa", "sg-0bbb", "sg-0ccc")
PEERS: tuple[dict[str, Any], ...] = (
    {"ReferencedGroupInfo": {"GroupId": "sg-0lb"}},
    {"CidrIpv4": "10.0.0.0/15"},
    {"CidrIpv4": "10.1.0.0/16"},
    {"CidrIpv4": "10.1.2.0/24"},
    {"CidrIpv6": "2001:db8::/32"},
)
# A changed rule from the /15 may be split into its two /16 halves (each with its own ports):
# with the quota full, such crosswise splits are where no make-before-break order exists.
HALVES = {"10.0.0.0/15": ("10.0.0.0/16", "10.1.0.0/16")}
PROTOCOL_FIELDS = ("IpProtocol", "FromPort", "ToPort")
PORTS = (80, 443, 8080, 31000, 32000, 32500)

ported = st.tuples(
    st.sampled_from(["tcp", "udp"]), st.sampled_from(PORTS), st.sampled_from(PORTS)
).map(lambda t: (t[0], min(t[1], t[2]), max(t[1], t[2])))
icmp = st.tuples(st.just("icmp"), st.sampled_from([-1, 3, 8]), st.sampled_from([-1, 0, 4])).map(
    lambda t: t if t[1] != -1 else ("icmp", -1, -1)
)
protocols = st.one_of(ported, ported, st.just(("-1", -1, -1)), icmp)


def rule_docs(group: str) -> st.SearchStrategy[Doc]:
    return st.builds(
        lambda proto, p, description: {
            "GroupId": group,
            "IsEgress": False,
            "IpProtocol": proto[0],
            "FromPort": proto[1],
            "ToPort": proto[2],
            **p,
            **({"Description": description} if description else {}),
        },
        protocols,
        st.sampled_from(PEERS),
        st.sampled_from(["", "web"]),
    )


@st.composite
def cases(draw: st.DrawFn, max_current: int = 4, max_new: int = 3) -> tuple[list[Doc], list[Doc]]:
    """A small world: current rules (some owned, some not) and desired managed rules."""
    current: list[Doc] = []
    desired: list[Doc] = []
    groups = draw(st.lists(st.sampled_from(GROUPS), min_size=1, max_size=3, unique=True))
    for group in groups:
        now = draw(st.lists(rule_docs(group), max_size=max_current, unique_by=key))
        for doc in now:
            doc["SecurityGroupRuleId"] = f"sgr-{len(current):05d}"
            tag = draw(st.sampled_from([OWNER, OWNER, "someone-else", None]))
            if tag is not None:
                doc["Tags"] = [{"Key": OWNER_TAG, "Value": tag}]
            current.append(doc)
        # Keep some current rules (possibly relabelled), and add some new ones.
        kept = draw(st.lists(st.sampled_from(now), unique_by=key)) if now else []
        for doc in kept:
            want = {k: v for k, v in doc.items() if k not in ("SecurityGroupRuleId", "Tags")}
            if draw(st.booleans()):
                want["Description"] = "relabelled"
            desired.append(want)
        # New rules: changed versions of current ones (same peer, new ports or protocol, as
        # when a NodePort range grows) and unrelated ones.
        changed = draw(st.lists(st.sampled_from(now), max_size=2)) if now else []
        derived: list[Doc] = []
        for doc in changed:
            peers = [peer_of(doc)]
            if doc.get("CidrIpv4") in HALVES and draw(st.booleans()):
                peers = [{"CidrIpv4": half} for half in HALVES[doc["CidrIpv4"]]]
            for peer in peers:
                fields = dict(zip(PROTOCOL_FIELDS, draw(protocols), strict=True))
                derived.append({"GroupId": group, "IsEgress": False, **fields, **peer})
        fresh = draw(st.lists(rule_docs(group), max_size=max(0, max_new - len(derived))))
        seen = {key(d) for d in desired}
        for doc in derived + fresh:
            if key(doc) not in seen:
                seen.add(key(doc))
                desired.append(doc)
    return current, desired


def peer_of(doc: Doc) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k in ("CidrIpv4", "CidrIpv6", "ReferencedGroupInfo")}


@st.composite
def crosswise_cases(draw: st.DrawFn) -> tuple[list[Doc], list[Doc]]:
    """One group whose owned TCP ports from the /15 are replaced by ranges from its two /16
    halves: with no free slot, whether any safe order exists depends on how they overlap."""
    group = "sg-0aaa"
    singles = st.sampled_from(PORTS).map(lambda p: (p, p))
    ranges = st.tuples(st.sampled_from(PORTS), st.sampled_from(PORTS)).map(
        lambda t: (min(t), max(t))
    )
    olds = draw(st.lists(st.one_of(singles, singles, ranges), min_size=2, max_size=3, unique=True))
    current: list[Doc] = [
        {
            "GroupId": group,
            "IsEgress": False,
            "IpProtocol": "tcp",
            "FromPort": low,
            "ToPort": high,
            "CidrIpv4": "10.0.0.0/15",
            "SecurityGroupRuleId": f"sgr-{n:05d}",
            "Tags": [{"Key": OWNER_TAG, "Value": OWNER}],
        }
        for n, (low, high) in enumerate(olds)
    ]
    desired: list[Doc] = [
        {
            "GroupId": group,
            "IsEgress": False,
            "IpProtocol": "tcp",
            "FromPort": low,
            "ToPort": high,
            "CidrIpv4": half,
        }
        for half in HALVES["10.0.0.0/15"]
        for low, high in [draw(ranges)]
    ]
    return current, desired
