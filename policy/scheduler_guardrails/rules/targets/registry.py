"""Every target kind the stack knows, found rather than listed: each module of this package
other than this one and kind.py defines one kind as its `KIND`.

Finding them is what lets a fork delete a kind's module (or all of them, as the optional part
"the proxy kinds" in tools/optional_parts.py) without editing a list here, and lets a new kind
be one new module. The settings parse a job's target through `parse_target`, the function's
environment gets each kind's table, the runtime account each kind's grants and roles, the
project each kind's APIs, and the docs each kind's keys, all by walking `TARGET_KINDS`.
docs/proxy.md ("Adding a target kind") walks through a new one.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from typing import Any, Final

from .. import targets
from ..config.problems import ConfigProblems
from .kind import TargetKind

# The package's modules that define no kind.
_NOT_KINDS: Final = frozenset({"kind", "registry"})


def found_kinds() -> tuple[TargetKind, ...]:
    """The `KIND` of every kind module present, in their `position` order (the order the docs
    list them in), so deleting one leaves the others' order as it was."""
    modules = sorted(
        info.name for info in pkgutil.iter_modules(targets.__path__) if info.name not in _NOT_KINDS
    )
    kinds = [importlib.import_module(f"{targets.__name__}.{name}").KIND for name in modules]
    for name, kind in zip(modules, kinds, strict=True):
        if not isinstance(kind, TargetKind):
            raise TypeError(f"{targets.__name__}.{name}: KIND is {kind!r}, not a TargetKind")
    return tuple(sorted(kinds, key=lambda kind: kind.position))


TARGET_KINDS: Final[tuple[TargetKind, ...]] = found_kinds()
TARGET_KEYS: Final = tuple(kind.key for kind in TARGET_KINDS)


def kind_of(target: object) -> TargetKind:
    """The kind whose `parse` made `target`."""
    return next(kind for kind in TARGET_KINDS if kind.owns(target))


def kind_for_handler(handler: str) -> TargetKind | None:
    """The kind whose proxy `handler` (module:callable, or a callable of its module) is."""
    module = handler.split(":")[0]
    return next((kind for kind in TARGET_KINDS if kind.handler_module == module), None)


def parse_target(item: Mapping[str, Any], prefix: str, errors: ConfigProblems) -> object | None:
    """The job's target, if it sets one; at most one per job."""
    present = [kind for kind in TARGET_KINDS if kind.key in item]
    if len(present) > 1:
        shown = ", ".join(f"{prefix}.{kind.key}" for kind in present)
        errors.append(f"{errors.key(prefix)}: set one of {shown}: a job starts one kind of thing")
        return None
    if not present:
        return None
    kind = present[0]
    return kind.parse(item[kind.key], f"{prefix}.{kind.key}", errors)


def check_target_job(target: object, handler: Any, body: Any, prefix: str, errors: ConfigProblems) -> str:
    """The handler a job with a target runs: the kind's proxy (another is refused). The body
    is the kind's to send, so a `body` of the job's own is refused too."""
    kind = kind_of(target)
    if body is not None:
        hint = kind.body_hint.format(prefix=prefix, key=kind.key)
        if kind.sends_body:
            errors.append(f"{errors.key(f'{prefix}.body')}: {hint}")
        else:
            errors.append(f"{errors.key(f'{prefix}.body')}: a job with {kind.key} sends no body: {hint}")
    if handler is not None and handler != kind.handler:
        errors.append(
            f"{errors.key(f'{prefix}.handler')}: {handler!r} cannot start the job's {kind.key}; "
            f"leave it out (it defaults to {kind.handler})"
        )
    return kind.handler
