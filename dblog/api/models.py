"""Request and response bodies of the HTTP API (pydantic: the OpenAPI schema comes from here).

Inputs are checked here before anything reaches the engine: table names are ``schema.table``
of word characters, ``$`` and ``-`` only (nothing a statement could be built from), keys are
lists of JSON scalars of one length, ranges have two ends of one length in order. The engine
then checks them against the source's catalog (the table is captured, the key has the table's
arity and parses as its column types) before it queues anything.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

TableName = Annotated[str, StringConstraints(
    pattern=r"^[\w$-]{1,64}\.[\w$. -]{1,64}$", max_length=129)]
Scalar = str | int | float | bool | None
Key = Annotated[list[Scalar], Field(min_length=1, max_length=32)]
MAX_KEYS = 100_000


class DumpCreate(BaseModel):
    """Exactly one of: ``tables`` (or nothing: every captured table); ``table`` with ``keys``;
    ``table`` with ``from`` and/or ``to`` (a key range, both ends included)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    tables: list[TableName] | None = Field(None, min_length=1, max_length=1000)
    table: TableName | None = None
    keys: list[Key] | None = Field(None, min_length=1, max_length=MAX_KEYS)
    key_from: Key | None = Field(None, alias="from")
    key_to: Key | None = Field(None, alias="to")
    dump_id: str | None = Field(None, pattern=r"^[A-Za-z0-9_-]{1,64}$")

    @model_validator(mode="after")
    def _one_form(self) -> DumpCreate:
        ranged = self.key_from is not None or self.key_to is not None
        if self.tables is not None and (self.table is not None or self.keys or ranged):
            raise ValueError("give either tables, or table with keys or a key range, not both")
        if self.table is not None and (self.keys is None) == (not ranged):
            raise ValueError("table needs either keys or a key range (from/to), not both")
        if self.table is None and (self.keys is not None or ranged):
            raise ValueError("keys and key ranges need the table they belong to")
        if self.keys is not None and len({len(k) for k in self.keys}) > 1:
            raise ValueError("every key must have the same number of values")
        if self.key_from is not None and self.key_to is not None:
            _check_range(self.key_from, self.key_to)
        return self

    @property
    def kind(self) -> str:
        if self.keys is not None:
            return "keys"
        return "range" if self.table is not None else "tables"


def _check_range(low: list[Scalar], high: list[Scalar]) -> None:
    if len(low) != len(high):
        raise ValueError(f"from has {len(low)} value(s) and to has {len(high)}: a key range's "
                         "ends must have as many values as the key has columns")
    for a, b in zip(low, high, strict=True):
        if a is None or b is None:
            raise ValueError("key range ends cannot contain null")
        if type(a) is not type(b) and not (_number(a) and _number(b)):
            raise ValueError(f"from and to differ in type at {a!r} / {b!r}")
        if a == b:
            continue
        if isinstance(a, str):
            return  # the database's collation orders text, not Python
        if a > b:  # type: ignore[operator]  # both numbers, or both booleans
            raise ValueError(f"from {low!r} is after to {high!r}")
        return


def _number(value: Scalar) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class KnobsUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    chunk_size: int | None = Field(None, ge=1, le=1_000_000)
    chunk_delay_s: float | None = Field(None, ge=0, le=3600)

    @model_validator(mode="after")
    def _something(self) -> KnobsUpdate:
        if self.chunk_size is None and self.chunk_delay_s is None:
            raise ValueError("give chunk_size and/or chunk_delay_s")
        return self


class TableView(BaseModel):
    table: str
    done: bool
    rows: int
    chunks: int
    estimated_rows: int
    last_key: list[Any] | None = None


class DumpView(BaseModel):
    id: str
    state: str
    kind: str
    error: str | None = None
    rows: int
    chunks: int
    estimated_total: int
    percent: float | None = None
    current_table: str | None = None
    last_key: list[Any] | None = None
    rows_per_s: float | None = None
    eta_s: float | None = None
    tables: list[TableView]
    key_range: dict[str, list[Any] | None] | None = None
    """A range dump's first and last key (``from``, ``to``; both included, null: open)."""


class LeaderView(BaseModel):
    instance: str | None = None
    epoch: int | None = None
    since: float | None = None
    api: str | None = None


class StatusView(BaseModel):
    running: bool
    role: str
    instance: str | None = None
    leader: LeaderView | None = None
    epoch: int | None = None
    committed_position: str | None = None
    committed_seq: int | None = None
    emitted_seq: int | None = None
    lag_s: float | None = None
    lag_bytes: int | None = None
    knobs: dict[str, float] | None = None
    tables: dict[str, str] = Field(default_factory=dict)
    dumps: list[DumpView] = Field(default_factory=list)
    error: str | None = None


class ErrorView(BaseModel):
    detail: str
    fix: str | None = None
    leader: LeaderView | None = None


class Health(BaseModel):
    ok: bool
    role: str | None = None
    detail: str | None = None
