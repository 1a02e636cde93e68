"""How the local tooling changes code it does not own (moto's, the pacer's) and undoes it.

A hook returns a `Patch`; `PatchSet` installs several as one context manager. `require`
and `add` fail with `HookError` naming the moto internal that moved, so a moto upgrade
breaks at the hook, not deep inside a state-machine run.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any, Final, Self

MOTO_VERSION: Final = "5.2.5"  # the moto the hooks are written for (bump after a rerun)


class HookError(RuntimeError):
    """A moto internal a hook relies on is missing or changed shape (moto upgraded?)."""


class Patch:
    """Undoes one hook; idempotent, and usable as a context manager."""

    def __init__(self, what: str, undo: Callable[[], None]) -> None:
        self.what = what
        self._undo: Callable[[], None] | None = undo

    def undo(self) -> None:
        if self._undo is not None:
            undo, self._undo = self._undo, None
            undo()

    @property
    def active(self) -> bool:
        return self._undo is not None

    def __enter__(self) -> Patch:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.undo()

    def __repr__(self) -> str:
        return f"Patch({self.what!r}, active={self.active})"


class PatchSet:
    """A context manager installing the patches its `_install` yields as one (`together`):
    undone in reverse order on exit, or at once when installing fails part-way."""

    _patch: Patch | None = None

    def _install(self) -> Iterator[Patch]:
        raise NotImplementedError

    def __enter__(self) -> Self:
        if self._patch is not None and self._patch.active:
            raise RuntimeError(f"{type(self).__name__} is already entered")
        self._patch = together(type(self).__name__, self._install())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._patch is not None:
            self._patch.undo()


def dotted_name(owner: object) -> str:
    """The dotted name of a moto module, class, or instance's class, for error messages."""
    if isinstance(owner, types.ModuleType):
        return owner.__name__
    kind = owner if isinstance(owner, type) else type(owner)
    return f"{kind.__module__}.{kind.__qualname__}"


def require(owner: object, name: str) -> Any:
    """`owner.name`, or HookError naming the moto internal that is gone."""
    try:
        return getattr(owner, name)
    except AttributeError:
        raise HookError(
            f"moto internal {dotted_name(owner)}.{name} is gone (hooks are written for moto "
            f"{MOTO_VERSION})"
        ) from None


def together(what: str, patches: Iterable[Patch]) -> Patch:
    """One patch undoing several, last first; if making one fails, those made are undone."""
    made: list[Patch] = []

    def undo() -> None:
        for patch in reversed(made):
            patch.undo()

    try:
        made.extend(patches)
    except BaseException:
        undo()
        raise
    return Patch(what, undo)


def replace(owner: Any, name: str, value: object) -> Patch:
    """Set `owner.name`, remembering whether it was inherited so undo restores exactly."""
    require(owner, name)
    had_own = isinstance(owner, type) and name in owner.__dict__
    original = owner.__dict__[name] if had_own else getattr(owner, name)

    def undo() -> None:
        if isinstance(owner, type) and not had_own:
            delattr(owner, name)
        else:
            setattr(owner, name, original)

    setattr(owner, name, value)
    return Patch(f"{dotted_name(owner)}.{name}", undo)


def add(owner: type, name: str, value: object) -> Patch:
    """Give `owner` an attribute moto lacks; if moto has one now, it may model the thing itself."""
    if hasattr(owner, name):
        raise HookError(
            f"moto internal {dotted_name(owner)}.{name} exists now (hooks are written for moto "
            f"{MOTO_VERSION}): check whether moto models it and the hook can go"
        )
    setattr(owner, name, value)
    return Patch(f"{dotted_name(owner)}.{name}", lambda: delattr(owner, name))
