"""Pause the cyclic garbage collector over a burst of allocations that form no cycles.

Parsing a describe document or planning a change allocates hundreds of thousands of small
objects (rules, keys, boxes) that all stay alive: each of the collector's passes walks them
and frees nothing, and at 5,000 groups those passes cost more than the work itself.

The setting is the process's, so the pause is taken at the edge, around a whole read or
plan (app/live_plan.py, the adapters' describe, the CLI), not inside the pure core.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0  # pauses open in the process, across threads
_restore = False  # whether the collector was on when the first of them began


@contextmanager
def paused_collector() -> Iterator[None]:
    """Disable the collector for the block (a decorator too). Pauses are counted process
    wide, because the setting is: the last one to end restores the collector as the first
    found it, whatever the threads' order. Reference counting still frees what dies."""
    global _depth, _restore
    with _lock:
        if _depth == 0:
            _restore = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _restore:
                gc.enable()
