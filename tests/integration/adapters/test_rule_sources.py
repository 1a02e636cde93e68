"""Which groups the reader describes as rule sources (adapters/inventory.rule_sources): the
groups a binding admits from, not every group a load balancer carries, so behind the
controller's shared backend group the read does not grow with the load balancers
(docs/architecture.md, "The inventory index")."""

from __future__ import annotations

from sg_reconciler.adapters.inventory import rule_sources
from sg_reconciler.core.account import LoadBalancer
from sg_reconciler.core.desired import Binding


def nlb(n: int, cluster: str) -> LoadBalancer:
    return LoadBalancer(
        arn=f"arn:lb/{cluster}-{n}",
        name=f"{cluster}-{n}",
        type="network",
        security_groups=(f"sg-own-{cluster}-{n}", f"sg-back-{cluster}"),
        tags=(("cluster", cluster),),
    )


def test_a_backend_binding_reads_its_backend_group_alone_at_any_size() -> None:
    backend = Binding(name="a", load_balancer_tags=(("cluster", "a"),), backend_group="sg-back-a")
    for size in (2, 50):
        assert rule_sources([nlb(n, "a") for n in range(size)], [backend]) == {"sg-back-a"}


def test_a_load_balancer_groups_binding_reads_each_selected_load_balancer_s_groups() -> None:
    own = Binding(name="b", load_balancer_tags=(("cluster", "b"),))
    lbs = [nlb(0, "a"), nlb(1, "b")]
    assert rule_sources(lbs, [own]) == {"sg-own-b-1", "sg-back-b"}


def test_an_address_binding_reads_every_group_of_its_load_balancers() -> None:
    by_address = Binding(name="c", source="load_balancer_addresses")
    lbs = [nlb(0, "a"), nlb(1, "b")]
    assert rule_sources(lbs, [by_address]) == {g for lb in lbs for g in lb.security_groups}
