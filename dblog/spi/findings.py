"""What ``dblog check`` reports: one finding per problem, each with its fix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

Level = Literal["error", "warning", "ok"]


@dataclass(frozen=True, slots=True)
class Finding:
    """One result of a check: ``error`` stops ``run``; ``warning`` is reported; ``ok`` says
    what was verified. ``fix`` tells the user what to do."""

    level: Level
    message: str
    fix: str | None = None


@runtime_checkable
class Checkable(Protocol):
    """An optional ability of an output (sources always have it): assess settings, rights and
    what the output needs from the source, without changing anything."""

    def check(self) -> list[Finding]: ...
