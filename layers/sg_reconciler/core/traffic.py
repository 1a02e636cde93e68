"""Allowed traffic as sets of (group, peer, protocol, port), by interval arithmetic.

Safety is judged on what traffic the rules allow, not on the rules themselves: an old
31000-32000 rule and a new 31000-32500 rule overlap, a /16 contains a /24 and protocol -1
covers TCP. Each (group, peer family) holds a canonical union of boxes over three integer
dimensions (peer address, protocol number, port), so a rule costs the same whatever its
width, and two sets are equal exactly when their canonical forms are.
"""

from __future__ import annotations

import functools
import ipaddress
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sg_reconciler.core.rules import Peer, Rule, RuleKey, cidr_peer, protocol_number

# A canonical union of boxes: a sorted tuple of disjoint half-open intervals on the first
# dimension, each with the canonical set of the remaining dimensions; adjacent intervals with
# equal children are merged. The last dimension's children are the empty tuple.
Cells = tuple[tuple[int, int, "Cells"], ...]
Box = tuple[tuple[int, int], ...]
FamilyKey = tuple[str, str]  # (group id, peer family: "ipv4", "ipv6", "pl-...", "sg-...")
KeyBox = tuple[FamilyKey, Box]  # the traffic one rule allows

_EMPTY: Cells = ()
_DIMENSIONS = 3
ALL_PROTOCOLS = (0, 256)
ALL_PORTS = (0, 65536)


def _combine(a: Cells, b: Cells, depth: int, keep: Callable[[bool, bool], bool]) -> Cells:
    """Pointwise boolean combination of two canonical sets."""
    if not a and not b:
        return _EMPTY
    points = sorted(
        {x for lo, hi, _ in a for x in (lo, hi)} | {x for lo, hi, _ in b for x in (lo, hi)}
    )
    out: list[tuple[int, int, Cells]] = []
    ia = ib = 0
    last = depth == _DIMENSIONS - 1
    for lo, hi in itertools.pairwise(points):
        while ia < len(a) and a[ia][1] <= lo:
            ia += 1
        while ib < len(b) and b[ib][1] <= lo:
            ib += 1
        ca = a[ia][2] if ia < len(a) and a[ia][0] <= lo else None
        cb = b[ib][2] if ib < len(b) and b[ib][0] <= lo else None
        if last:
            present = keep(ca is not None, cb is not None)
            child: Cells | None = _EMPTY if present else None
        else:
            merged = _combine(ca or _EMPTY, cb or _EMPTY, depth + 1, keep)
            child = merged or None
        if child is None:
            continue
        if out and out[-1][1] == lo and out[-1][2] == child:
            out[-1] = (out[-1][0], hi, child)
        else:
            out.append((lo, hi, child))
    return tuple(out)


def _from_boxes(boxes: list[Box], depth: int = 0) -> Cells:
    if not boxes:
        return _EMPTY
    if len(boxes) == 1:  # one box is its own canonical form (the common case: one rule)
        cells = _EMPTY
        for lo, hi in reversed(boxes[0][depth:]):
            cells = ((lo, hi, cells),)
        return cells
    points = sorted({x for box in boxes for x in box[depth]})
    out: list[tuple[int, int, Cells]] = []
    for lo, hi in itertools.pairwise(points):
        covering = [box for box in boxes if box[depth][0] <= lo and hi <= box[depth][1]]
        if not covering:
            continue
        child = _EMPTY if depth == _DIMENSIONS - 1 else _from_boxes(covering, depth + 1)
        if out and out[-1][1] == lo and out[-1][2] == child:
            out[-1] = (out[-1][0], hi, child)
        else:
            out.append((lo, hi, child))
    return tuple(out)


def _contains(cells: Cells, point: tuple[int, ...]) -> bool:
    for value in point:
        for lo, hi, child in cells:
            if lo <= value < hi:
                cells = child
                break
        else:
            return False
    return True


def peer_family(peer: Peer) -> tuple[str, int, int]:
    """The peer's family and its address interval (half-open) within that family."""
    if peer.kind in ("cidr4", "cidr6"):
        start, end = _span(peer.value)
        return ("ipv4" if peer.kind == "cidr4" else "ipv6"), start, end
    return peer.value, 0, 1


@functools.lru_cache(maxsize=65536)
def _span(cidr: str) -> tuple[int, int]:
    """A CIDR's addresses as a half-open interval; cached, parsing is slow and CIDRs repeat."""
    net = ipaddress.ip_network(cidr)
    start = int(net.network_address)
    return start, start + net.num_addresses


@functools.lru_cache(maxsize=1 << 18)
def key_box(key: RuleKey) -> KeyBox:
    """The traffic one rule allows, as a box in its (group, peer family); cached, as the
    planner and its checker ask for the same rules' boxes many times."""
    family, addr_lo, addr_hi = peer_family(key.peer)
    number = protocol_number(key.protocol)
    protocols = ALL_PROTOCOLS if number is None else (number, number + 1)
    if key.protocol in ("tcp", "udp"):
        ports = (key.from_port, key.to_port + 1)
    elif key.protocol in ("icmp", "icmpv6"):
        # ICMP type and code share the port dimension: type * 256 + code; -1 means all.
        if key.from_port == -1:
            ports = ALL_PORTS
        elif key.to_port == -1:
            ports = (key.from_port * 256, key.from_port * 256 + 256)
        else:
            ports = (key.from_port * 256 + key.to_port, key.from_port * 256 + key.to_port + 1)
    else:
        ports = ALL_PORTS
    return (key.group_id, family), ((addr_lo, addr_hi), protocols, ports)


def touching(keys: Iterable[RuleKey], others: Iterable[RuleKey]) -> list[RuleKey]:
    """The keys whose traffic may meet some of `others`' (their boxes overlap): a cheap
    prefilter before a traffic build, since disjoint rules never change the answer."""
    near: dict[FamilyKey, list[Box]] = {}
    for other in others:
        family, box = key_box(other)
        near.setdefault(family, []).append(box)
    found = []
    for key in keys:
        family, box = key_box(key)
        if family in near and any(_overlap(box, b) for b in near[family]):
            found.append(key)
    return found


def sharing_ports(keys: Iterable[RuleKey], others: Iterable[RuleKey]) -> list[RuleKey]:
    """The keys that overlap some of `others` on protocol and ports, whatever the peers (one
    source can be admitted through peers of different families)."""
    boxes = [key_box(other)[1][1:] for other in others]
    found = []
    for key in keys:
        _, (_, (p_lo, p_hi), (lo, hi)) = key_box(key)
        if any(p_lo < b[0][1] and b[0][0] < p_hi and lo < b[1][1] and b[1][0] < hi for b in boxes):
            found.append(key)
    return found


def _overlap(a: Box, b: Box) -> bool:
    (a0, a1, a2), (b0, b1, b2) = a, b  # unrolled: called for every pair of nearby rules
    return (
        a2[0] < b2[1]
        and b2[0] < a2[1]
        and a1[0] < b1[1]
        and b1[0] < a1[1]
        and a0[0] < b0[1]
        and b0[0] < a0[1]
    )


def overlapping(old: Iterable[RuleKey], new: Iterable[RuleKey]) -> list[tuple[RuleKey, RuleKey]]:
    """Each pair of an `old` and a `new` rule whose traffic meets (their boxes overlap)."""
    news: dict[FamilyKey, list[tuple[RuleKey, Box]]] = {}
    for key in new:
        family, box = key_box(key)
        news.setdefault(family, []).append((key, box))
    pairs = []
    for key in old:
        family, box = key_box(key)
        pairs += [(key, other) for other, near in news.get(family, ()) if _overlap(box, near)]
    return pairs


@dataclass(frozen=True)
class Stake:
    """Traffic that changing rules must keep covering, cut into pieces that each rule covers
    whole or not at all. A search asks "do these rules still cover it?" thousands of times:
    with the pieces that is a few integer operations (a bit per rule, per piece the bits of
    the rules that cover it), not a traffic build."""

    bits: dict[RuleKey, int]  # a bit per changing rule (old or new)
    pieces: frozenset[int]

    def bit(self, key: RuleKey) -> int:
        return self.bits.get(key, 0)

    def covered(self, present: int) -> bool:
        """Whether the rules of bitmask `present` cover all the traffic."""
        return all(piece & present for piece in self.pieces)

    def partners(self, bit: int) -> int:
        """The bits of the rules that cover some of the traffic that rule `bit` covers."""
        found = 0
        for piece in self.pieces:
            if piece & bit:
                found |= piece
        return found


def stake(old: Iterable[RuleKey], new: Iterable[RuleKey], stable: Iterable[RuleKey]) -> Stake:
    """(∪old ∩ ∪new) − ∪stable as pieces: the cells of the rules' boxes, family by family,
    that lie in an old box, a new box and no stable one (bit 0 marks the stable boxes)."""
    bits: dict[RuleKey, int] = {}
    sides: list[dict[FamilyKey, list[tuple[Box, int]]]] = [{}, {}]
    masks = [0, 0]
    for side, keys in enumerate((old, new)):
        for key in keys:
            family, box = key_box(key)
            bit = bits.setdefault(key, 2 << len(bits))
            masks[side] |= bit
            sides[side].setdefault(family, []).append((box, bit))
    shared = {f: [*sides[0][f], *sides[1][f]] for f in sides[0].keys() & sides[1].keys()}
    for key in stable:
        family, box = key_box(key)
        if family in shared:
            shared[family].append((box, 1))
    pieces: set[int] = set()
    for items in shared.values():
        if len(items) == 2:  # one old and one new box, no stable one (often): where they meet
            (old_box, old_bit), (new_box, new_bit) = items
            if _overlap(old_box, new_box):
                pieces.add(old_bit | new_bit)
        else:
            _cells(items, 0, masks[0], masks[1], pieces)
    return Stake(bits, frozenset(pieces))


def _cells(items: list[tuple[Box, int]], depth: int, old: int, new: int, found: set[int]) -> None:
    """Add to `found` the masks of the cells of the boxes' arrangement that lie in some box of
    `old`, some of `new` and no stable one; slabs without both are not cut further."""
    points = sorted({x for box, _ in items for x in box[depth]})
    for lo, hi in itertools.pairwise(points):
        inside = [item for item in items if item[0][depth][0] <= lo and hi <= item[0][depth][1]]
        mask = 0
        for _, bit in inside:
            mask |= bit
        if not (mask & old and mask & new):
            continue
        if depth < _DIMENSIONS - 1:
            _cells(inside, depth + 1, old, new, found)
        elif not mask & 1:
            found.add(mask)


_ADDRESS_FAMILIES = {"ipv4": 1 << 32, "ipv6": 1 << 128}  # family: size of its address line


def source_stake(
    old: Iterable[RuleKey], new: Iterable[RuleKey], stable: Iterable[RuleKey]
) -> Stake:
    """What `old` and `new` both admit and `stable` does not, by concrete source (invariant 9).

    `stake` keeps peer families apart; a real source is one address plus the groups its
    interface carries (and the prefix lists its address is in), so one source can be admitted
    by an old rule from a CIDR and a new one from a group. A piece here is one class of
    concrete flows: a protocol and port cell, an address cell (inside or outside each CIDR,
    in either family) and at most two labels (groups or prefix lists): a flow that both sides
    admit has a witness rule on each, so a source with more labels holds one of these. Only
    the smallest pieces are kept (a piece that holds another is covered whenever it is).
    All rules are of one group; a key in both `old` and `new` gets one bit.
    """
    bits: dict[RuleKey, int] = {}
    masks = [0, 0]
    items: list[tuple[str, int, int, Box, int]] = []  # family, address lo, hi, box, bit
    for side, keys in enumerate((old, new)):
        for key in keys:
            bit = bits.setdefault(key, 2 << len(bits))
            masks[side] |= bit
    for key in stable:
        bits.setdefault(key, 1)
    for key, bit in bits.items():
        (_, family), box = key_box(key)
        items.append((family, box[0][0], box[0][1], box, bit))
    pieces: set[int] = set()
    _source_cells(items, 1, masks[0], masks[1], pieces)
    return Stake({k: b for k, b in bits.items() if b != 1}, frozenset(_smallest(pieces)))


def _source_cells(
    items: list[tuple[str, int, int, Box, int]], depth: int, old: int, new: int, found: set[int]
) -> None:
    """Cut the protocol (depth 1) and port (depth 2) dimensions; in each cell, combine an
    address cell with up to two labels."""
    points = sorted({x for item in items for x in item[3][depth]})
    for lo, hi in itertools.pairwise(points):
        inside = [it for it in items if it[3][depth][0] <= lo and hi <= it[3][depth][1]]
        mask = 0
        for it in inside:
            mask |= it[4]
        if not (mask & old and mask & new):
            continue
        if depth < _DIMENSIONS - 1:
            _source_cells(inside, depth + 1, old, new, found)
            continue
        addresses: set[int] = set()
        labels: dict[str, int] = {}
        for family, size in _ADDRESS_FAMILIES.items():
            spans = [(a, b, bit) for fam, a, b, _, bit in inside if fam == family]
            cuts = sorted({0, size, *(x for a, b, _ in spans for x in (a, b))})
            for start, end in itertools.pairwise(cuts):
                cell = 0
                for a, b, bit in spans:
                    if a <= start and end <= b:
                        cell |= bit
                addresses.add(cell)
        for family, _, _, _, bit in inside:
            if family not in _ADDRESS_FAMILIES:
                labels[family] = labels.get(family, 0) | bit
        label_masks = [m for m in set(labels.values()) if not m & 1]
        for address in addresses:
            if address & 1:
                continue  # a stable rule admits the address whatever the labels
            combos = [address, *(address | m for m in label_masks)]
            combos += [address | a | b for a, b in itertools.combinations(label_masks, 2)]
            found.update(m for m in combos if m & old and m & new)


def _smallest(pieces: set[int]) -> list[int]:
    """The pieces that hold no other piece (covering those covers the rest)."""
    kept: list[int] = []
    for piece in sorted(pieces, key=int.bit_count):
        if not any(other & piece == other for other in kept):
            kept.append(piece)
    return kept


@dataclass(frozen=True)
class Traffic:
    """An immutable set of allowed (group, peer, protocol, port) tuples."""

    parts: tuple[tuple[FamilyKey, Cells], ...] = ()

    @classmethod
    def of(cls, rules: Iterable[Rule | RuleKey]) -> Traffic:
        boxes: dict[FamilyKey, list[Box]] = {}
        for item in rules:
            family, box = key_box(item.key if isinstance(item, Rule) else item)
            boxes.setdefault(family, []).append(box)
        return cls(tuple(sorted((fam, _from_boxes(bs)) for fam, bs in boxes.items())))

    def _zip(self, other: Traffic, keep: Callable[[bool, bool], bool]) -> Traffic:
        mine, theirs = dict(self.parts), dict(other.parts)
        parts = []
        for family in sorted(mine.keys() | theirs.keys()):
            a, b = mine.get(family, _EMPTY), theirs.get(family, _EMPTY)
            if not (a and b):  # one side empty: the other side, kept whole or dropped
                cells = a if a and keep(True, False) else b if b and keep(False, True) else _EMPTY
            else:
                cells = _combine(a, b, 0, keep)
            if cells:
                parts.append((family, cells))
        return Traffic(tuple(parts))

    def __or__(self, other: Traffic) -> Traffic:
        return self._zip(other, lambda x, y: x or y)

    def __and__(self, other: Traffic) -> Traffic:
        return self._zip(other, lambda x, y: x and y)

    def __sub__(self, other: Traffic) -> Traffic:
        return self._zip(other, lambda x, y: x and not y)

    def __le__(self, other: Traffic) -> bool:
        return not (self - other)

    def __bool__(self) -> bool:
        return bool(self.parts)

    def groups(self) -> set[str]:
        return {group for (group, _), _ in self.parts}

    def allows(self, group_id: str, peer: Peer, protocol: int, port: int) -> bool:
        """Whether one concrete flow is allowed: a single address peer, protocol number, port."""
        family, addr, _ = peer_family(peer)
        cells = dict(self.parts).get((group_id, family))
        return cells is not None and _contains(cells, (addr, protocol, port))

    def rule_keys(self) -> list[RuleKey]:
        """Rules that together allow exactly this traffic, no more, no less: what a script
        reads (in a JSON output, each in describe-security-group-rules shape). A peer range
        becomes the CIDRs that cover it; an ICMP range whole types, or single type and code
        pairs; and a protocol range, each protocol of it, so all traffic less one protocol
        lists every other protocol number."""
        keys: list[RuleKey] = []
        for (group, family), cells in self.parts:
            for alo, ahi, protos in cells:
                for peer in _peers(family, alo, ahi):
                    for plo, phi, ports in protos:
                        if (plo, phi) == ALL_PROTOCOLS and _whole(ports):
                            keys.append(RuleKey(group, "-1", -1, -1, peer))
                            continue
                        for number in range(plo, phi):
                            keys.extend(
                                RuleKey(group, protocol, lo, hi, peer)
                                for protocol, lo, hi in _rule_ports(number, ports)
                            )
        return keys

    def describe(self, limit: int = 5) -> str:
        """A short human description for error messages (first few boxes)."""
        lines: list[str] = []
        for (group, family), cells in self.parts:
            for alo, ahi, protos in cells:
                peer = _describe_peer(family, alo, ahi)
                for plo, phi, ports in protos:
                    for lo, hi, _ in ports:
                        lines.append(f"{group} {_describe_flow(plo, phi, lo, hi)} from {peer}")
        more = f" (+{len(lines) - limit} more)" if len(lines) > limit else ""
        return "; ".join(lines[:limit]) + more


_PROTOCOL_NAMES = {6: "tcp", 17: "udp", 1: "icmp", 58: "icmpv6"}


def _peers(family: str, lo: int, hi: int) -> list[Peer]:
    """The peers that cover addresses lo..hi-1 of a family exactly (one for a group or list)."""
    if family in ("ipv4", "ipv6"):
        address = ipaddress.IPv4Address if family == "ipv4" else ipaddress.IPv6Address
        networks = ipaddress.summarize_address_range(address(lo), address(hi - 1))
        return [cidr_peer(str(network)) for network in networks]
    return [Peer("prefix_list" if family.startswith("pl-") else "group", family)]


def _whole(ports: Cells) -> bool:
    return ports == ((*ALL_PORTS, _EMPTY),)


def _rule_ports(number: int, ports: Cells) -> list[tuple[str, int, int]]:
    """(protocol, FromPort, ToPort) of the rules that allow exactly `ports` of one protocol."""
    protocol = _PROTOCOL_NAMES.get(number, str(number))
    if protocol in ("tcp", "udp"):
        return [(protocol, lo, hi - 1) for lo, hi, _ in ports]
    if protocol not in ("icmp", "icmpv6"):
        # EC2 ignores ports for other protocols: their traffic is whole (key_box), and set
        # operations on whole sets stay whole
        return [(protocol, -1, -1)]
    if _whole(ports):
        return [(protocol, -1, -1)]
    found = []
    for lo, hi, _ in ports:  # type * 256 + code, as key_box lays ICMP out
        at = lo
        while at < hi:
            kind, code = divmod(at, 256)
            if code == 0 and at + 256 <= hi:
                found.append((protocol, kind, -1))  # every code of the type
                at += 256
            else:
                found.append((protocol, kind, code))
                at += 1
    return found


def _describe_peer(family: str, lo: int, hi: int) -> str:
    if family == "ipv4":
        return f"{ipaddress.IPv4Address(lo)}-{ipaddress.IPv4Address(hi - 1)}"
    if family == "ipv6":
        return f"{ipaddress.IPv6Address(lo)}-{ipaddress.IPv6Address(hi - 1)}"
    return family


def _describe_flow(plo: int, phi: int, lo: int, hi: int) -> str:
    if (plo, phi) == ALL_PROTOCOLS and (lo, hi) == ALL_PORTS:
        return "all traffic"
    protocols = (
        _PROTOCOL_NAMES.get(plo, f"protocol {plo}")
        if phi == plo + 1
        else f"protocols {plo}-{phi - 1}"
    )
    if (lo, hi) == ALL_PORTS:
        return f"{protocols} all ports"
    return f"{protocols} {lo}" if hi == lo + 1 else f"{protocols} {lo}-{hi - 1}"
