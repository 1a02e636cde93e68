"""What a hook records (a Wait's seconds, a Retry's backoff, the pacer's waits) for the tests."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from sg_reconciler_tools.local.patching import Patch


@dataclass
class Recorder:
    """A thread-safe list of floats (the interpreter runs in its own thread).

    `subscribe` adds a listener called with each value right after it is recorded, in the
    interpreter's thread: a test can act at the moment a Wait state or a Retry backoff
    starts (stop the execution, inject a fault) without patching anything.
    """

    values: list[float] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _listeners: list[Callable[[float], None]] = field(default_factory=list, repr=False)

    def __call__(self, value: float) -> None:
        with self._lock:
            self.values.append(value)
            listeners = list(self._listeners)
        for listener in listeners:
            listener(value)

    def subscribe(self, listener: Callable[[float], None]) -> Patch:
        with self._lock:
            self._listeners.append(listener)

        def undo() -> None:
            with self._lock:
                self._listeners.remove(listener)

        return Patch("Recorder listener", undo)

    def snapshot(self) -> list[float]:
        with self._lock:
            return list(self.values)

    def clear(self) -> None:
        with self._lock:
            self.values.clear()
