"""What debezium-json and canal-json share: options, the rules that turn one dblog event into
the changes a changelog consumer can apply, and what the source must log for them.

A changelog consumer such as Flink's ``debezium-json``/``canal-json`` formats retracts the old
row of every update and delete, treats a key change as an update of one key (so it must arrive
as a delete and a create), fails on operations it does not know, and reads a missing column as
null. So, before anything is encoded (docs/formats.md, "Changelog formats"):

* an update or delete whose old row the source did not log in full (PostgreSQL under
  ``REPLICA IDENTITY DEFAULT``) stops the pipeline with the fix, unless the ``before_image``
  option says ``as-logged``;
* unchanged TOAST columns (``event.unchanged``) are filled from the old row when it has them,
  and otherwise stop the pipeline, unless ``unchanged_columns: omit`` leaves them out;
* a key change becomes a delete of the old key and a create of the new one;
* truncate is emitted, skipped or refused (``truncate``); schema changes and transaction
  markers produce no record and are counted in ``skipped``.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from dblog.core.model import ChangeEvent, Key, Op, Row, RowImage, TableId, TableInfo
from dblog.errors import ConfigError, FatalOutputError
from dblog.formats.base import Record, TableLookup, no_tables
from dblog.formats.coltypes import Family
from dblog.formats.rows import RowMapper
from dblog.formats.schema import LoggedTypes, encode_following_schema
from dblog.formats.temporal import epoch_micros
from dblog.spi import Finding
from dblog.spi.source import LoggedImages

log = logging.getLogger("dblog.formats")

Connector = Literal["postgresql", "mysql", "mariadb"]
ChangeKind = Literal["insert", "read", "update", "delete", "truncate"]
_CONNECTOR_OF_POSITION: dict[str, Connector] = {
    "lsn": "postgresql", "mariadb-gtid": "mariadb", "mysql-gtid": "mysql", "binlog": "mysql"}


class ChangelogOptions(BaseModel):
    """Options both changelog formats take (``format_options`` of an output)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    before_image: Literal["require", "as-logged"] = "require"
    unchanged_columns: Literal["fail", "omit"] = "fail"
    truncate: Literal["emit", "skip", "fail"] = "emit"
    tombstones: bool = True
    connector: Literal["auto", "postgresql", "mysql", "mariadb"] = "auto"


OptionsT = TypeVar("OptionsT", bound=ChangelogOptions)


def parse_options(model: type[OptionsT], format_name: str, raw: dict[str, Any]) -> OptionsT:
    """The options, or a ConfigError naming the bad field and the allowed values."""
    try:
        return model(**raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                             for e in exc.errors())
        raise ConfigError(f"{format_name} format options: {problems}",
                          fix=f"allowed options: {', '.join(model.model_fields)}") from None


@dataclass(frozen=True, slots=True)
class Change:
    """One change a consumer applies: ``before`` as logged (full unless ``as-logged``),
    ``after`` with unchanged TOAST columns filled (or listed in ``omitted``)."""

    kind: ChangeKind
    key: Key | None
    before: Row | None = None
    after: RowImage | None = None
    omitted: tuple[str, ...] = ()


def requirements(format_name: str, options: ChangelogOptions, info: TableInfo,
                 logged: LoggedImages) -> list[Finding]:
    """What ``dblog check`` reports for a table captured into ``format_name``."""
    table, findings = info.table, []
    if not logged.full_before:
        message = (f"{table}: the source logs only the key of the old row of updates and "
                   f"deletes, and {format_name} consumers (Flink) retract the full old row")
        if options.before_image == "require":
            findings.append(Finding(
                "error", f"{message}: the output stops at the first update or delete of it",
                f"{logged.fix or 'log full old rows'} (or set the format option before_image: "
                "as-logged, and accept updates without a before image)"))
        else:
            findings.append(Finding("warning", f"{message}: before_image: as-logged emits "
                                    "updates without a before image (Flink's formats reject "
                                    "them) and deletes with the key columns only", logged.fix))
    if not logged.complete_after:
        what = ("stops the output" if options.unchanged_columns == "fail"
                else "leaves them out of the record (a consumer reads them as null)")
        findings.append(Finding(
            "error" if options.unchanged_columns == "fail" else "warning",
            f"{table}: updates that keep a large (TOAST) value arrive without it; "
            f"{format_name} {what}", logged.fix))
    if not findings:
        findings.append(Finding("ok", f"{table}: the source logs full old rows, as "
                                f"{format_name} needs"))
    return findings


def _full(before: Row, event: ChangeEvent, columns: frozenset[str], info: TableInfo) -> bool:
    """Whether ``before`` is the whole old row. It is when it has every column of today's
    catalog. A row logged before a column was added (a backlog crossing an ALTER) lacks that
    column in every image, so it is also whole when it has every column of the update's new
    row (the two images of one update are logged together), or, for a delete, any column
    outside the key: a source that does not log whole old rows logs the key's columns only
    (PostgreSQL's REPLICA IDENTITY DEFAULT; MySQL/MariaDB always log whole rows). A
    REPLICA IDENTITY USING INDEX whose index holds other columns passes as whole here."""
    names = before.keys()
    if names >= columns:
        return True
    after = event.after
    if event.op is Op.UPDATE and isinstance(after, dict):
        return names >= after.keys() and names >= set(event.unchanged)
    if event.op is Op.DELETE:
        return bool(names - set(info.key_columns))
    return False


def commit_millis(text: str | None) -> int | None:
    """A connector's commit time (``2024-05-01 12:00:00.428784+00``) in epoch milliseconds."""
    return None if text is None else epoch_micros(text) // 1000


class ChangelogFormat(ABC):
    """The shared encoder: plans each event into changes, then lets the subclass encode each
    change as keyed records. ``skipped`` counts events that produce no record, by op."""

    name: str
    family_of: dict[Connector, Family] = {"postgresql": "postgresql", "mysql": "mysql",
                                           "mariadb": "mysql"}

    def __init__(self, options: ChangelogOptions, clock: Callable[[], float]) -> None:
        self.options = options
        self.clock = clock
        self.skipped: Counter[str] = Counter()
        self._mappers: dict[tuple[Family, TableInfo], RowMapper] = {}
        self._last: tuple[TableInfo | None, Family | None, RowMapper | None] = (None, None, None)
        self._commit: tuple[str | None, int | None] = (None, None)
        self._names: tuple[TableInfo | None, frozenset[str]] = (None, frozenset())
        self._tolerated: dict[TableId, frozenset[str]] = {}
        self._logged = LoggedTypes()
        self.retyped = self._logged.retyped  # TypeFollowingFormat

    # the Format protocol

    def encode(self, event: ChangeEvent, table: TableInfo | None = None) -> bytes:
        """The event's records' values, newline-separated (a key change gives two)."""
        return b"\n".join(r.value for r in self.encode_records(event, table)
                          if r.value is not None)

    def encode_lines(self, events: Sequence[ChangeEvent], tables: TableLookup = no_tables
                     ) -> bytes:
        """One line per record of a table (tombstones and transaction records have no line: a
        file of changes is read by consumers that know change events only)."""
        out: list[bytes] = []
        for event in events:
            if event.table is None:
                self.encode_records(event)  # a transaction marker: counted, no line
                continue
            for record in encode_following_schema(self, tables, event.table,
                                                  partial(self.encode_records, event)):
                if record.value is not None:
                    out.append(record.value)
                    out.append(b"\n")
        return b"".join(out)

    def encode_records(self, event: ChangeEvent, table: TableInfo | None = None
                       ) -> list[Record]:
        if event.op is Op.BEGIN or event.op is Op.COMMIT:
            markers = self.marker_records(event)
            if not markers:
                self.skipped[event.op.value] += 1
            return markers
        records: list[Record] = []
        if table is not None and event.types is not None:  # map by the types logged
            table = self._logged.info(table, event.types)
        changes = self.plan(event, table)
        if len(changes) > 1 and table is not None:
            # every image checked before the first change counts in the transaction's order:
            # unknown columns make the caller encode the event again (formats/schema.py)
            mapper = self.row_mapper(event, table)
            for change in changes:
                mapper.check(change.before)
                mapper.check(change.after)
        for change in changes:
            records.extend(self.records(event, table, change))
        return records

    def now_millis(self) -> int:
        return int(self.clock() * 1000)

    # for subclasses

    @abstractmethod
    def marker_records(self, event: ChangeEvent) -> list[Record]:
        """The records of a BEGIN or COMMIT (for a transaction topic), if the format has
        any; the format also learns where transactions start."""

    @abstractmethod
    def records(self, event: ChangeEvent, info: TableInfo | None, change: Change
                ) -> list[Record]: ...

    @abstractmethod
    def mapper(self, family: Family, info: TableInfo) -> RowMapper: ...

    def requirements(self, info: TableInfo, logged: LoggedImages) -> list[Finding]:
        return requirements(self.name, self.options, info, logged)

    def check(self) -> list[Finding]:
        """Options that break the usual consumers (:class:`CheckableFormat`)."""
        if self.options.truncate != "emit":
            return []
        return [Finding("warning", f"{self.name}: a TRUNCATE of a captured table is written as "
                        "a truncate record (truncate: emit), which Flink's "
                        f"{self.name} format refuses: the job fails, or with "
                        "ignore-parse-errors drops it and keeps the table's rows",
                        "if Flink reads this output, set the format option truncate: fail "
                        "(stop, so the table can be dumped again) or skip; keep emit for "
                        "consumers that clear the table on it")]

    def connector(self, event: ChangeEvent) -> Connector:
        """The source, from the option or the event's position type."""
        if self.options.connector != "auto":
            return self.options.connector
        kind = None if event.position is None else event.position.kind
        connector = _CONNECTOR_OF_POSITION.get(kind or "")
        if connector is None:
            raise FatalOutputError(
                f"{self.name}: cannot tell the source of a {event.op.value} event of "
                f"{event.table} from its position ({kind or 'none'})",
                fix="set the format option connector: postgresql, mysql or mariadb")
        return connector

    def row_mapper(self, event: ChangeEvent, info: TableInfo) -> RowMapper:
        family = self.family_of[self.connector(event)]
        last_info, last_family, mapper = self._last
        if info is last_info and family == last_family and mapper is not None:
            return mapper  # the common case: a lookup hands out the same object per table
        mapper = self._mappers.get((family, info))
        if mapper is None:
            mapper = self.mapper(family, info)
            tolerated = self._tolerated.get(info.table)
            if tolerated:
                mapper = mapper.tolerating(tolerated)
            self._mappers[(family, info)] = mapper
        self._last = (info, family, mapper)
        return mapper

    def tolerate(self, table: TableId, columns: frozenset[str]) -> None:
        """Write ``columns`` of ``table`` as captured from now on: the source's catalog no
        longer has them (dropped or renamed since a backlog logged them;
        :class:`~dblog.formats.schema.SchemaFollowingFormat`)."""
        known = self._tolerated.get(table, frozenset())
        if columns <= known:
            return
        log.warning("%s: column(s) %s of %s are no longer in the source's catalog (dropped or "
                    "renamed since these events were logged): written as captured, their type "
                    "unknown", self.name, sorted(columns - known), table)
        self._tolerated[table] = known | columns
        self._mappers = {k: m for k, m in self._mappers.items() if k[1].table != table}
        self._last = (None, None, None)

    def column_names(self, info: TableInfo) -> frozenset[str]:
        if info is not self._names[0]:
            self._names = (info, frozenset(c.name for c in info.columns))
        return self._names[1]

    def commit_millis(self, text: str | None) -> int | None:
        """:func:`commit_millis`, remembered for the events of one transaction."""
        if text != self._commit[0]:
            self._commit = (text, commit_millis(text))
        return self._commit[1]

    # planning

    def plan(self, event: ChangeEvent, info: TableInfo | None) -> list[Change]:
        op = event.op
        if op is Op.TRUNCATE:
            return self._truncate(event)
        if op is Op.SCHEMA:
            self.skipped["schema"] += 1
            return []
        if info is None:
            raise FatalOutputError(
                f"{self.name}: no metadata (columns, types, key) for table {event.table}",
                fix="the output must pass the format a table lookup of the source catalog")
        if op is Op.INSERT or op is Op.READ:
            return [Change("read" if op is Op.READ else "insert", event.key, None, event.after)]
        if op is Op.DELETE:
            return [Change("delete", event.key, self._before(event, info, event.key))]
        if op is not Op.UPDATE:
            raise FatalOutputError(f"{self.name}: unknown operation {op.value!r}")
        after, omitted = self._complete(event, info)
        if event.old_key is not None:  # a key change: delete the old key, create the new
            return [Change("delete", event.old_key, self._before(event, info, event.old_key)),
                    Change("insert", event.key, None, after, omitted)]
        return [Change("update", event.key, self._before(event, info, event.key), after,
                       omitted)]

    def _truncate(self, event: ChangeEvent) -> list[Change]:
        policy = self.options.truncate
        if policy == "fail":
            raise FatalOutputError(
                f"{self.name}: TRUNCATE of {event.table} cannot be represented for the "
                "consumers of this output (truncate: fail)",
                fix="set the format option truncate: emit (consumers must handle it) or "
                    "skip (rows stay in the consumers' copy)")
        if policy == "skip":
            self.skipped["truncate"] += 1
            return []
        return [Change("truncate", None)]

    def _before(self, event: ChangeEvent, info: TableInfo, key: Key | None) -> Row | None:
        """The old row if the source logged it in full; else the policy decides."""
        before = event.before
        if before is not None and _full(before, event, self.column_names(info), info):
            return before
        if self.options.before_image == "as-logged":
            if before is None and event.op is Op.DELETE and key is not None:
                return dict(zip(info.key_columns, key, strict=False))
            return before
        logged = "nothing" if before is None else f"only {sorted(before)}"
        raise FatalOutputError(
            f"{self.name}: the {event.op.value} of {info.table} key {list(key or ())} has no "
            f"full before image (the source logged {logged} of the old row), which "
            f"{self.name} consumers need to retract it",
            fix=f"{self._log_fix(event, info)} (dblog check lists such tables), or set the "
                "format option before_image: as-logged")

    def _complete(self, event: ChangeEvent, info: TableInfo) -> tuple[RowImage | None,
                                                                      tuple[str, ...]]:
        """The after image with unchanged TOAST columns taken from the old row if logged."""
        if not event.unchanged or event.after is None:
            return event.after, ()
        after = dict(event.after) if isinstance(event.after, dict) else event.after.decode()
        before = event.before or {}
        missing = []
        for column in event.unchanged:
            if column in before:
                after[column] = before[column]
            else:
                missing.append(column)
        if missing and self.options.unchanged_columns == "fail":
            raise FatalOutputError(
                f"{self.name}: the update of {info.table} key {list(event.key or ())} did not "
                f"carry the unchanged TOAST column(s) {missing}, and {self.name} cannot "
                "represent 'unchanged' (a consumer would read null)",
                fix=f"{self._log_fix(event, info)} (the connector then completes them), or "
                    "set the format option unchanged_columns: omit")
        return after, tuple(missing)

    def _log_fix(self, event: ChangeEvent, info: TableInfo) -> str:
        if self.connector(event) == "postgresql":
            return f"ALTER TABLE {info.table} REPLICA IDENTITY FULL;"
        return "set binlog_row_image=FULL on the server"
