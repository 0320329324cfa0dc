"""The one road for settings: ``Workstation.update_settings(name=value, …)`` sets fields, saves (off the loop's
thread, one writer at a time) and emits ``SettingsChanged`` naming the fields that changed."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from app.core.errors import InvalidInputError
from app.core.settings import Settings

if TYPE_CHECKING:
    from app.services.paths import AppPaths

FIELD_NAMES = frozenset(field.name for field in dataclasses.fields(Settings))


@dataclass(frozen=True)
class SettingsChanged:
    """These settings fields took new values (``workstation.settings`` holds them)."""

    names: frozenset[str]

    def touches(self, *names: str) -> bool:
        return not self.names.isdisjoint(names)


class SettingsOwner(Protocol):
    """What a service needs of the workstation: its paths, its settings and their changes (named so, not
    imported: the workstation imports the services)."""

    paths: AppPaths
    settings: Settings

    def subscribe(self, listener: Callable[[SettingsChanged], None]) -> Callable[[], None]: ...


def apply_changes(settings: Settings, changes: Mapping[str, Any]) -> frozenset[str]:
    """Set the fields in ``changes`` (copies, so the caller's objects stay theirs); returns the names whose value
    differs from before. An unknown name is a programming error, refused before anything is set."""
    unknown = set(changes) - FIELD_NAMES
    if unknown:
        raise InvalidInputError(f"Unknown settings: {', '.join(sorted(unknown))}.")
    changed = {name for name, value in changes.items() if getattr(settings, name) != value}
    for name in changed:
        setattr(settings, name, copy.deepcopy(changes[name]))
    return frozenset(changed)


def differences(current: Settings, new: Settings) -> dict[str, Any]:
    """The fields of ``new`` whose values differ from ``current``'s."""
    return {name: getattr(new, name) for name in FIELD_NAMES if getattr(current, name) != getattr(new, name)}
