"""Pause the cyclic garbage collector over a burst of allocations that form no cycles.

Parsing a describe document or planning a change allocates hundreds of thousands of small
objects (rules, keys, boxes) that all stay alive: each of the collector's passes walks them
and frees nothing, and at 5,000 groups those passes cost more than the work itself.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_collector() -> Iterator[None]:
    """Disable the collector for the block (a decorator too); restore it as it was, so a
    caller that paused it keeps it paused. Reference counting still frees what dies."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
