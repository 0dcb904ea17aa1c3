"""What ``dblog check`` reports: one finding per problem, each with its fix."""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from dblog.core.model import TableId, TableInfo

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


@runtime_checkable
class TableCheckable(Protocol):
    """An optional ability of an output: assess what it would make of the captured tables
    (their metadata from the source's catalog), e.g. an existing replica table it would
    refuse at start, without changing anything."""

    def check_tables(self, tables: Sequence[TableInfo]) -> list[Finding]: ...


def missing_tables(patterns: Sequence[str], found: Container[TableId], at_start: bool = False,
                   qualified: str = "schema.table") -> list[Finding]:
    """Tables named exactly (no ``*``) in ``source.tables`` that are not in ``found``: an error
    for ``check`` (a typo captures nothing); a warning at start (such a table is captured once
    it is created). ``qualified`` says how a name is written for the source."""
    findings = []
    for pattern in patterns:
        schema, _, name = pattern.partition(".")
        if "*" not in (schema, name) and TableId(schema, name) not in found:
            findings.append(Finding(
                "warning" if at_start else "error",
                f"table {pattern} in source.tables does not exist: nothing of it is captured",
                "create the table, or correct its name in source.tables "
                f"({qualified}, exactly as in the database)"))
    return findings
