"""The drafting of `sg-reconciler init` on hand-built inventories: what it binds, what it
leaves to the user (with a note), and that every draft loads with the real policy loader."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from sg_reconciler.core.account import (
    Inventory,
    LoadBalancer,
    SecurityGroup,
    Target,
    TargetGroup,
    tags_of,
)
from sg_reconciler.core.rules import Rule, rule_from_dict
from sg_reconciler.policy import (
    LBC_SHARED_DESCRIPTION,
    PARAMETER_BYTES,
    PolicyDocument,
    parameter_size_problem,
    parse_policy_document,
)
from sg_reconciler_tools.local.stack import read_template
from sg_reconciler_tools.policy_draft import Draft, draft_policy

ROOT = Path(__file__).resolve().parents[3]

VPC = "vpc-1"
SUBNETS = ("10.0.1.0/24", "10.0.2.0/24")
NODES = "sg-0000000000000000a"
OTHER = "sg-0000000000000000b"
BACKEND = "sg-0000000000000000c"
FRONT = "sg-0000000000000000d"


def lb(
    name: str, groups: tuple[str, ...] = (), scheme: str = "internal", **tags: str
) -> LoadBalancer:
    return LoadBalancer(
        arn=f"arn:lb/{name}",
        name=name,
        type="network",
        security_groups=groups,
        tags=tags_of(tags),
        vpc_id=VPC,
        scheme=scheme,
        subnet_cidrs=SUBNETS,
    )


def tg(name: str, lb_name: str, port: int, groups: tuple[str, ...] = (NODES,)) -> TargetGroup:
    return TargetGroup(
        arn=f"arn:tg/{name}",
        name=name,
        protocol="TCP",
        port=port,
        target_type="instance",
        load_balancer_arns=(f"arn:lb/{lb_name}",),
        vpc_id=VPC,
        targets=(Target("i-1", port, groups, "i-1"),),
    )


def cidr_rule(cidr: str, port: int, protocol: str = "tcp", description: str = "") -> Rule:
    return rule_from_dict(
        {
            "GroupId": NODES,
            "IpProtocol": protocol,
            "FromPort": port if protocol != "-1" else -1,
            "ToPort": port if protocol != "-1" else -1,
            "CidrIpv4": cidr,
            "Description": description,
            "SecurityGroupRuleId": f"sgr-{abs(hash((cidr, port, protocol))) % 10**8:08d}",
        }
    )


GROUPS = {
    NODES: SecurityGroup(NODES, VPC, "nodes", tags_of({"kubernetes.io/cluster/c1": "owned"})),
    OTHER: SecurityGroup(OTHER, VPC, "other"),
    BACKEND: SecurityGroup(
        BACKEND,
        VPC,
        "k8s-traffic-c1",
        tags_of({"elbv2.k8s.aws/cluster": "c1", "elbv2.k8s.aws/resource": "backend-sg"}),
    ),
    FRONT: SecurityGroup(FRONT, VPC, "front"),
}


def inventory(
    lbs: list[LoadBalancer], tgs: list[TargetGroup], rules: Sequence[Rule] = ()
) -> Inventory:
    return Inventory(
        load_balancers=tuple(lbs),
        target_groups=tuple(tgs),
        groups=GROUPS,
        rules=tuple(rules),
        vpc_cidrs={VPC: ("10.0.0.0/16",)},
    )


def loads(draft: Draft) -> PolicyDocument:
    """The text and the data both load, and say the same."""
    policy = parse_policy_document(draft.to_yaml(), "draft")
    assert parse_policy_document(json.dumps(draft.to_dict()["policy"]), "data") == policy
    return policy


def test_an_empty_account_drafts_the_default_policy() -> None:
    draft = draft_policy(Inventory())
    assert loads(draft) == PolicyDocument()
    assert "No load balancer to bind was found" in draft.to_yaml()


def test_a_cluster_binding_uses_the_controllers_backend_group_and_choice() -> None:
    web = lb("web", (FRONT, BACKEND), **{"elbv2.k8s.aws/cluster": "c1"})
    policy = loads(draft_policy(inventory([web], [tg("web", "web", 30080)])))
    (binding,) = policy.bindings or []
    assert (binding.name, binding.rule_source.group_id, binding.destination.cluster_name) == (
        "c1",
        BACKEND,
        "c1",
    )
    assert policy.adopt_descriptions == []  # no controller rule: nothing to adopt


def test_without_one_backend_group_on_every_load_balancer_each_is_admitted_by_its_groups() -> None:
    cluster = {"elbv2.k8s.aws/cluster": "c1"}
    lbs = [lb("web", (FRONT, BACKEND), **cluster), lb("api", (FRONT,), **cluster)]
    draft = draft_policy(inventory(lbs, [tg("web", "web", 30080), tg("api", "api", 30090)]))
    (binding,) = loads(draft).bindings or []
    assert (binding.rule_source.kind, binding.rule_source.group_id) == (
        "load_balancer_groups",
        None,
    )
    assert any("cluster c1" in n and "backend group" in n for n in draft.notes)


def test_an_internet_facing_nlb_whose_clients_no_rule_shows_gets_a_placeholder_not_the_internet() -> (
    None
):
    public = lb("edge", scheme="internet-facing", team="edge")
    # The VPC-wide rule is a health check's (inside the VPC: not a client of a public NLB);
    # an all-traffic rule and a rule on another port show nothing about its clients.
    rules = [
        cidr_rule("10.0.0.0/16", 30500, description=LBC_SHARED_DESCRIPTION),
        cidr_rule("198.51.100.0/24", 0, "-1"),
        cidr_rule("192.0.2.0/24", 22),
    ]
    draft = draft_policy(inventory([public], [tg("edge", "edge", 30500)], rules))
    policy = loads(draft)
    (binding,) = policy.bindings or []
    assert binding.load_balancers.tags == {"team": "edge"}
    assert binding.rule_source.client_cidrs is None
    assert binding.destination.kind == "target_enis"
    assert '# client_cidrs: ["0.0.0.0/0", "::/0"]' in draft.to_yaml()
    assert any("edge" in n and "no client traffic is admitted" in n for n in draft.notes)
    assert policy.adopt_descriptions == [LBC_SHARED_DESCRIPTION]


def test_clients_come_from_the_controllers_rules_when_it_has_some() -> None:
    nlb = lb("legacy", scheme="internet-facing", team="edge")
    rules = [
        cidr_rule("203.0.113.0/24", 30500, description=LBC_SHARED_DESCRIPTION),
        cidr_rule("198.51.100.0/24", 30000),  # someone's wide rule: 30000 only
        cidr_rule("192.0.2.0/24", 30500),  # not the controller's: it shows some, so ignored
    ]
    draft = draft_policy(inventory([nlb], [tg("legacy", "legacy", 30500)], rules))
    (binding,) = loads(draft).bindings or []
    assert binding.rule_source.client_cidrs == ["203.0.113.0/24"]
    without_controller = [r for r in rules if r.description != LBC_SHARED_DESCRIPTION]
    again = draft_policy(inventory([nlb], [tg("legacy", "legacy", 30500)], without_controller))
    (binding,) = loads(again).bindings or []
    assert binding.rule_source.client_cidrs == ["192.0.2.0/24"]


def test_what_no_binding_can_select_alone_is_a_note_not_a_binding() -> None:
    bare = lb("bare")  # no groups, no tags: a selector would take every load balancer
    unbound = lb("ours", (FRONT,), team="x")  # groups, but no controller tag
    draft = draft_policy(inventory([bare, unbound], [tg("bare", "bare", 1), tg("ours", "ours", 2)]))
    assert loads(draft).bindings is None
    assert any("bare" in n and "no tags" in n for n in draft.notes)
    assert any("ours" in n and "no binding selects it" in n for n in draft.notes)


def test_nlbs_one_selector_cannot_tell_apart_share_one_binding_and_a_stray_is_named() -> None:
    one, two = lb("one", team="edge"), lb("two", team="edge")
    stray = lb("three", (FRONT,), team="edge")
    tgs = [tg("one", "one", 1), tg("two", "two", 2), tg("three", "three", 3)]
    draft = draft_policy(inventory([one, two, stray], tgs))
    (binding,) = loads(draft).bindings or []
    assert binding.name == "one-and-more"
    assert any("three" in n and "admitted by address" in n for n in draft.notes)
    # each "why" is a sentence of its own (the JSON lists them), not a wrapped fragment
    (why,) = draft.to_dict()["why"].values()
    assert len(why) >= 3 and all(w.endswith(".") and not w[0].islower() for w in why[1:])


def test_a_target_the_controllers_choice_cannot_place_is_noted() -> None:
    web = lb("web", (FRONT, BACKEND), **{"elbv2.k8s.aws/cluster": "c1"})
    two_untagged = tg("web", "web", 30080, groups=(OTHER, FRONT))
    draft = draft_policy(inventory([web], [two_untagged]))
    assert any("i-1" in n and "0 of its 2 groups" in n for n in draft.notes)


def test_a_cluster_name_cluster_group_cannot_take_goes_by_the_cluster_tag() -> None:
    cluster = {"elbv2.k8s.aws/cluster": "team.c1"}
    lbs = [lb("web", (FRONT, BACKEND), **cluster), lb("bare", **cluster)]
    draft = draft_policy(inventory(lbs, [tg("web", "web", 30080), tg("bare", "bare", 30500)]))
    bindings = loads(draft).bindings or []
    assert [(b.destination.kind, b.destination.tag_key) for b in bindings] == [
        ("tagged_groups", "kubernetes.io/cluster/team.c1")
    ] * 2
    assert [n for n in draft.notes if "team.c1" in n and "tagged_groups" in n] != []
    assert len(draft.notes) == len(set(draft.notes))


def test_a_policy_longer_than_a_stack_parameter_holds_is_named_with_what_to_drop() -> None:
    # A CloudFormation parameter value holds 4,096 bytes; the template's PolicyDocument says so
    long = "load_balancers:\n  tags: {team: a}\n" + "# why\n" * 700
    assert len(long.encode()) > PARAMETER_BYTES and parameter_size_problem(long[:4096]) is None
    problem = parameter_size_problem(long)
    assert problem == (
        f"{len(long)} bytes, over the 4096 a CloudFormation parameter value holds "
        "(PolicyDocument); without its comment lines it is 33 bytes"
    )
    template = read_template(ROOT / "template.yaml")
    assert template["Parameters"]["PolicyDocument"]["MaxLength"] == PARAMETER_BYTES
