"""The rule model: EC2's spellings normalised, describe shape round-tripped, bad input named."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sg_reconciler.core.rules import (
    DEFAULT_OWNER,
    OWNER_TAG_KEY,
    Peer,
    RuleError,
    RuleKey,
    ingress_rules,
    normalize_protocol,
    rule_from_dict,
    rule_to_dict,
)


def doc(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "GroupId": "sg-0node",
        "IsEgress": False,
        "IpProtocol": "tcp",
        "FromPort": 443,
        "ToPort": 443,
        "CidrIpv4": "10.0.0.0/16",
    }
    base.update(fields)
    return {k: v for k, v in base.items() if v is not None}


@pytest.mark.parametrize(
    ("raw", "name"),
    [
        ("6", "tcp"),
        (6, "tcp"),
        ("tcp", "tcp"),
        ("TCP", "tcp"),
        ("17", "udp"),
        ("udp", "udp"),
        ("1", "icmp"),
        ("icmp", "icmp"),
        ("58", "icmpv6"),
        ("icmpv6", "icmpv6"),
        ("-1", "-1"),
        (-1, "-1"),
        ("all", "-1"),
        ("50", "50"),
        ("050", "50"),
        (" 6 ", "tcp"),
    ],
)
def test_protocol_names_and_numbers_map_to_what_describe_prints(raw: object, name: str) -> None:
    assert normalize_protocol(raw) == name


@pytest.mark.parametrize(("raw", "name"), [("06", "tcp"), ("017", "udp"), ("001", "icmp")])
def test_zero_padded_protocol_numbers_keep_their_ports(raw: str, name: str) -> None:
    # Given TCP written as "06": a number, so it must still be TCP with its port range
    rule = rule_from_dict(doc(IpProtocol=raw, FromPort=8, ToPort=9))
    # Then it is not "protocol 6 with no ports" (all ports of TCP)
    assert (rule.key.protocol, rule.key.from_port, rule.key.to_port) == (name, 8, 9)


@pytest.mark.parametrize("raw", ["tpc", "256", "-2", "", "6.0", None, True])
def test_unknown_protocols_are_rejected(raw: object) -> None:
    with pytest.raises(RuleError, match="unknown protocol"):
        normalize_protocol(raw)


@pytest.mark.parametrize(
    ("peer", "kind", "value"),
    [
        ({"CidrIpv4": "10.1.2.3/16"}, "cidr4", "10.1.0.0/16"),
        ({"CidrIpv4": "192.168.7.9/32"}, "cidr4", "192.168.7.9/32"),
        ({"CidrIpv4": "10.1.2.3"}, "cidr4", "10.1.2.3/32"),
        ({"CidrIpv6": "2001:db8:0:1::5/32"}, "cidr6", "2001:db8::/32"),
        ({"CidrIpv6": "2001:DB8::/64"}, "cidr6", "2001:db8::/64"),
        ({"PrefixListId": "pl-0123"}, "prefix_list", "pl-0123"),
        ({"ReferencedGroupInfo": {"GroupId": "sg-0lb", "UserId": "1234"}}, "group", "sg-0lb"),
    ],
)
def test_peers_are_normalised_with_host_bits_cleared(
    peer: dict[str, Any], kind: str, value: str
) -> None:
    rule = rule_from_dict(doc(**{"CidrIpv4": None, **peer}))
    assert rule.key.peer == Peer(kind, value)  # type: ignore[arg-type]


def test_host_bits_do_not_make_a_second_identity() -> None:
    # Given the same network written with and without host bits
    a = rule_from_dict(doc(CidrIpv4="10.0.0.0/16"))
    b = rule_from_dict(doc(CidrIpv4="10.0.77.1/16"))
    # Then EC2 would see one rule: the keys are equal
    assert a.key == b.key


@pytest.mark.parametrize("protocol", ["-1", "all", "50"])
def test_ports_are_ignored_for_protocols_without_ports(protocol: str) -> None:
    rule = rule_from_dict(doc(IpProtocol=protocol, FromPort=80, ToPort=90))
    assert (rule.key.from_port, rule.key.to_port) == (-1, -1)
    no_ports = rule_from_dict(doc(IpProtocol=protocol, FromPort=None, ToPort=None))
    assert no_ports.key == rule.key


@pytest.mark.parametrize(
    ("protocol", "from_port", "to_port"),
    [("icmp", 8, 0), ("icmp", 3, -1), ("icmp", -1, -1), ("icmpv6", 128, 0), ("1", 0, 0)],
)
def test_icmp_type_and_code_are_kept(protocol: str, from_port: int, to_port: int) -> None:
    rule = rule_from_dict(doc(IpProtocol=protocol, FromPort=from_port, ToPort=to_port))
    assert rule.key.protocol in ("icmp", "icmpv6")
    assert (rule.key.from_port, rule.key.to_port) == (from_port, to_port)


def test_ports_given_as_strings_are_read_as_integers() -> None:
    rule = rule_from_dict(doc(FromPort="31000", ToPort="32000"))
    assert (rule.key.from_port, rule.key.to_port) == (31000, 32000)


@pytest.mark.parametrize("port", [True, 80.5, "eighty", None, [80]])
def test_a_port_that_is_not_an_integer_is_bad_input(port: object) -> None:
    with pytest.raises(RuleError, match="integer FromPort and ToPort"):
        rule_from_dict(doc(FromPort=port, ToPort=80))


def test_ownership_is_the_owner_tag_with_the_owner_name() -> None:
    tags = [{"Key": "team", "Value": "web"}, {"Key": OWNER_TAG_KEY, "Value": DEFAULT_OWNER}]
    mine = rule_from_dict(doc(SecurityGroupRuleId="sgr-1", Tags=tags))
    theirs = rule_from_dict(
        doc(SecurityGroupRuleId="sgr-2", Tags=[{"Key": OWNER_TAG_KEY, "Value": "other"}])
    )
    untagged = rule_from_dict(doc(SecurityGroupRuleId="sgr-3"))
    assert mine.owned_by(DEFAULT_OWNER)
    assert not mine.owned_by("other")
    assert theirs.owned_by("other") and not theirs.owned_by(DEFAULT_OWNER)
    assert not untagged.owned_by(DEFAULT_OWNER)
    assert mine.tag("team") == "web"


def test_description_is_not_part_of_the_identity() -> None:
    a = rule_from_dict(doc(Description="one"))
    b = rule_from_dict(doc(Description="two"))
    assert a.key == b.key and a != b


PEERS = st.one_of(
    st.builds(lambda n: {"CidrIpv4": f"10.{n}.0.0/16"}, st.integers(0, 255)),
    st.builds(
        lambda n: {"CidrIpv6": str(ipaddress.IPv6Network((0x20010DB8 << 96 | n << 80, 48)))},
        st.integers(0, 0xFFFF),
    ),
    st.builds(lambda n: {"PrefixListId": f"pl-{n:08x}"}, st.integers(0, 2**32 - 1)),
    st.builds(lambda n: {"ReferencedGroupInfo": {"GroupId": f"sg-{n:08x}"}}, st.integers(0, 99)),
)
PORTED = st.tuples(
    st.sampled_from(["tcp", "udp"]), st.integers(0, 65535), st.integers(0, 65535)
).map(lambda t: (t[0], min(t[1:]), max(t[1:])))
ICMP = st.tuples(st.sampled_from(["icmp", "icmpv6"]), st.integers(-1, 255), st.integers(-1, 255))
OTHER = st.sampled_from([("-1", -1, -1), ("50", -1, -1)])


@st.composite
def describe_docs(draw: st.DrawFn) -> dict[str, Any]:
    protocol, from_port, to_port = draw(st.one_of(PORTED, ICMP, OTHER))
    out: dict[str, Any] = {
        "GroupId": draw(st.sampled_from(["sg-0a", "sg-0b"])),
        "IsEgress": False,
        "IpProtocol": protocol,
        "FromPort": from_port,
        "ToPort": to_port,
        **draw(PEERS),
    }
    if description := draw(st.sampled_from(["", "NodePorts", "ssh ✓"])):
        out["Description"] = description
    if draw(st.booleans()):
        out["SecurityGroupRuleId"] = f"sgr-{draw(st.integers(0, 10**6)):017d}"
        out["Tags"] = sorted(
            draw(st.sampled_from([[], [{"Key": OWNER_TAG_KEY, "Value": DEFAULT_OWNER}]])),
            key=lambda t: t["Key"],
        )
        if not out["Tags"]:
            del out["Tags"]
    return out


@given(describe_docs())
def test_normalised_rules_round_trip_through_the_describe_shape(original: dict[str, Any]) -> None:
    rule = rule_from_dict(original)
    assert rule_to_dict(rule) == original
    assert rule_from_dict(rule_to_dict(rule)) == rule
    bare = rule_to_dict(rule, with_identity=False)
    assert "SecurityGroupRuleId" not in bare and "Tags" not in bare
    assert rule_from_dict(bare).key == rule.key


def test_rule_key_prints_for_people() -> None:
    key = rule_from_dict(doc(FromPort=31000, ToPort=32500)).key
    assert str(key) == "sg-0node tcp 31000-32500 from 10.0.0.0/16"
    assert isinstance(key, RuleKey)


BAD_RULES: list[tuple[str, object, str]] = [
    ("not an object", ["tcp"], "JSON object"),
    ("no group", doc(GroupId=None), "GroupId"),
    ("empty group", doc(GroupId=""), "GroupId"),
    ("no protocol", doc(IpProtocol=None), "IpProtocol"),
    ("unknown protocol", doc(IpProtocol="tcpp"), "unknown protocol"),
    ("missing ports", doc(FromPort=None), "integer FromPort"),
    ("non-numeric port", doc(ToPort="https"), "integer FromPort"),
    ("port too high", doc(ToPort=65536), "out of range"),
    ("negative tcp port", doc(FromPort=-1, ToPort=80), "out of range"),
    ("reversed ports", doc(FromPort=443, ToPort=80), "greater than ToPort"),
    ("icmp type too high", doc(IpProtocol="icmp", FromPort=256, ToPort=0), "out of range"),
    ("icmp code too low", doc(IpProtocol="icmp", FromPort=3, ToPort=-2), "out of range"),
    ("no peer", doc(CidrIpv4=None), "found none"),
    ("two peers", doc(CidrIpv6="::/0"), "found CidrIpv4, CidrIpv6"),
    ("bad ipv4", doc(CidrIpv4="10.0.0.300/16"), "invalid CidrIpv4"),
    ("v6 in the v4 field", doc(CidrIpv4="2001:db8::/32"), "invalid CidrIpv4"),
    ("bad ipv6", doc(CidrIpv4=None, CidrIpv6="2001:zz8::/32"), "invalid CidrIpv6"),
    ("group without id", doc(CidrIpv4=None, ReferencedGroupInfo={"UserId": "1"}), "GroupId"),
    ("group id empty", doc(CidrIpv4=None, ReferencedGroupInfo={"GroupId": ""}), "GroupId"),
    ("group info not an object", doc(CidrIpv4=None, ReferencedGroupInfo="sg-1"), "GroupId"),
    ("tags not a list", doc(Tags={"Key": "a", "Value": "b"}), "Tags"),
    ("tag without value", doc(Tags=[{"Key": "a"}]), "Tags"),
    ("description not text", doc(Description=7), "Description"),
    ("empty rule id", doc(SecurityGroupRuleId=""), "SecurityGroupRuleId"),
]


@pytest.mark.parametrize(("case", "bad", "message"), BAD_RULES, ids=[c for c, _, _ in BAD_RULES])
def test_every_bad_rule_is_rejected_with_a_reason(case: str, bad: object, message: str) -> None:
    with pytest.raises(RuleError, match=message):
        rule_from_dict(bad)


def test_ingress_rules_skips_egress_and_keeps_order() -> None:
    docs = [
        doc(SecurityGroupRuleId="sgr-1", FromPort=80, ToPort=80),
        doc(SecurityGroupRuleId="sgr-2", IsEgress=True, IpProtocol="-1", CidrIpv4="0.0.0.0/0"),
        doc(SecurityGroupRuleId="sgr-3"),
    ]
    assert [r.rule_id for r in ingress_rules(docs, "current")] == ["sgr-1", "sgr-3"]


def test_ingress_rules_names_the_offending_rule() -> None:
    docs = [doc(SecurityGroupRuleId="sgr-1"), doc(SecurityGroupRuleId="sgr-2", ToPort=80)]
    with pytest.raises(RuleError) as caught:
        ingress_rules(docs, "current")
    message = str(caught.value)
    assert message.startswith("current rule #1 (sgr-2 sg-0node IpProtocol=tcp FromPort=443")
    assert "greater than ToPort" in message and "\n" not in message


def test_ingress_rules_rejects_duplicate_rule_ids() -> None:
    docs = [doc(SecurityGroupRuleId="sgr-1"), doc(SecurityGroupRuleId="sgr-1", FromPort=80)]
    with pytest.raises(RuleError, match=r"rule #1 \(sgr-1 .*duplicate SecurityGroupRuleId"):
        ingress_rules(docs, "current")


def test_ingress_rules_rejects_a_non_boolean_egress_flag() -> None:
    with pytest.raises(RuleError, match=r"rule #0.*IsEgress must be true or false"):
        ingress_rules([doc(IsEgress="no")], "desired")
