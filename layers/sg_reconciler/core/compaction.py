"""Cover the ports a (group, peer, protocol) needs with at most K ranges.

The LBC opens one min..max range per source; that exposes every port in between. Here the
ranges are split at the K-1 widest gaps, which is optimal: the exposure of a cover is the
sum of the gaps it bridges, so leaving the widest gaps open minimises it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

PortRange = tuple[int, int]  # inclusive, as in FromPort/ToPort


@dataclass(frozen=True)
class Compaction:
    ranges: tuple[PortRange, ...]
    needed_ports: int
    exposed_ports: int  # ports opened that nothing needs


def merge_ranges(ranges: Iterable[PortRange]) -> list[PortRange]:
    """Sorted, disjoint, non-adjacent inclusive ranges covering exactly the input."""
    merged: list[PortRange] = []
    for lo, hi in sorted(ranges):
        if lo > hi:
            raise ValueError(f"reversed port range {lo}-{hi}")
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def compact(needed: Iterable[PortRange | int], budget: int) -> Compaction:
    """The cover of `needed` by at most `budget` ranges with the fewest extra ports."""
    if budget < 1:
        raise ValueError("the rule budget must be at least 1")
    runs = merge_ranges((p, p) if isinstance(p, int) else p for p in needed)
    needed_ports = sum(hi - lo + 1 for lo, hi in runs)
    if len(runs) <= budget:
        return Compaction(tuple(runs), needed_ports, 0)
    # Gap i lies between runs[i] and runs[i + 1]; keep the budget-1 widest open
    # (ties broken by position so the result is deterministic).
    gaps = sorted(range(len(runs) - 1), key=lambda i: (runs[i][1] - runs[i + 1][0], i))
    splits = sorted(gaps[: budget - 1])
    ranges: list[PortRange] = []
    start = 0
    for split in [*splits, len(runs) - 1]:
        ranges.append((runs[start][0], runs[split][1]))
        start = split + 1
    covered = sum(hi - lo + 1 for lo, hi in ranges)
    return Compaction(tuple(ranges), needed_ports, covered - needed_ports)


def single_range_exposure(needed: Iterable[PortRange | int]) -> int:
    """Exposure of one min..max range, the LBC's choice; the anchor our compaction beats."""
    return compact(needed, 1).exposed_ports
