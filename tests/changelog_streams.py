"""Hypothesis-generated change streams over one table, shaped like the connectors' events
(PostgreSQL under REPLICA IDENTITY FULL, or MariaDB with full row images): inserts, updates,
key changes, deletes, truncates, TOAST updates (after-image without the large column, listed
in ``unchanged``), dump rows (plain or pre-encoded) and transaction markers. The model keeps
the source table, so a consumer's rebuilt table can be compared with it."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

import orjson
from hypothesis import strategies as st

from dblog.connectors.mysql.positions import MariadbGtid
from dblog.connectors.postgres.positions import Lsn
from dblog.core.model import ChangeEvent, ColumnInfo, EncodedRow, Key, Op, Row, TableId, TableInfo
from dblog.core.positions import Position
from tests.changelog_values import micros_text

TYPES = {
    "postgresql": {"id": "integer", "tag": "character varying(8)", "v": "text",
                   "n": "numeric(12,2)", "ts": "timestamp without time zone", "big": "text",
                   "raw": "bytea"},
    "mysql": {"id": "int(11)", "tag": "varchar(8)", "v": "text", "n": "decimal(12,2)",
              "ts": "datetime(6)", "big": "longtext", "raw": "varbinary(16)"},
}
KEY = ("id", "tag")


def table_info(family: str, name: str = "items") -> TableInfo:
    schema = "public" if family == "postgresql" else "shop"
    return TableInfo(TableId(schema, name),
                     tuple(ColumnInfo(c, t) for c, t in TYPES[family].items()), KEY)


def _values(family: str) -> st.SearchStrategy[dict[str, Any]]:
    moments = st.datetimes(datetime.datetime(1971, 1, 1), datetime.datetime(2100, 1, 1))
    micros = moments.map(lambda d: (d - datetime.datetime(1970, 1, 1))
                         // datetime.timedelta(microseconds=1))
    return st.fixed_dictionaries({
        "v": st.one_of(st.none(), st.text(max_size=12)),
        "n": st.one_of(st.none(), st.integers(-10**9, 10**9).map(lambda c: f"{c / 100:.2f}")),
        "ts": st.one_of(st.none(), micros.map(lambda m: micros_text(m, family == "postgresql"))),
        "big": st.text(min_size=0, max_size=30),
        "raw": st.one_of(st.none(), st.binary(max_size=16).map(bytes.hex)),
    })


def actions(family: str) -> st.SearchStrategy[list[tuple[Any, ...]]]:
    index = st.integers(0, 1000)
    kinds = [
        st.tuples(st.just("insert"), st.integers(1, 50), st.sampled_from(["a", "b"]),
                  _values(family)),
        st.tuples(st.just("update"), index, _values(family)),
        st.tuples(st.just("rekey"), index, st.integers(51, 99)),
        st.tuples(st.just("delete"), index),
        st.tuples(st.just("read"), index, st.booleans()),
        st.tuples(st.just("truncate")),
    ]
    if family == "postgresql":
        kinds.append(st.tuples(st.just("toast"), index, _values(family)))
    return st.lists(st.one_of(kinds), max_size=40)


@dataclass
class Model:
    """The source table and the events a connector would emit for the actions."""

    family: str
    info: TableInfo
    rows: dict[Key, Row] = field(default_factory=dict)
    events: list[ChangeEvent] = field(default_factory=list)
    counter: int = 0

    def position(self) -> Position:
        if self.family == "postgresql":
            return Lsn(0x1_0000_0000 + self.counter * 40)
        return MariadbGtid(((0, 1, self.counter),))

    def emit(self, op: Op, **fields: Any) -> None:
        self.counter += 1
        position = self.position()
        txid = None if op is Op.READ else self.counter
        ts = None if op is Op.READ else "2024-05-01 12:00:00.5+00"
        self.events.append(ChangeEvent(op, self.info.table if op not in (Op.BEGIN, Op.COMMIT)
                                       else None, position=position, txid=txid, commit_ts=ts,
                                       seq=len(self.events) + 1, **fields))

    def transaction(self, op: Op, **fields: Any) -> None:
        """One change in its own transaction; positions and txid as the connectors give."""
        self.events.append(ChangeEvent(Op.BEGIN, None, position=self.position(),
                                       txid=self.counter + 1, seq=len(self.events) + 1))
        self.emit(op, **fields)
        self.events.append(ChangeEvent(Op.COMMIT, None, position=self.position(),
                                       txid=self.counter, seq=len(self.events) + 1))

    def pick(self, index: int) -> Key | None:
        keys = sorted(self.rows)
        return keys[index % len(keys)] if keys else None

    def apply(self, action: tuple[Any, ...]) -> None:
        kind = action[0]
        if kind == "insert":
            key = (action[1], action[2])
            if key not in self.rows:
                row = {"id": key[0], "tag": key[1], **action[3]}
                self.rows[key] = row
                self.transaction(Op.INSERT, key=key, after=dict(row))
        elif kind == "truncate":
            self.rows.clear()
            self.transaction(Op.TRUNCATE)
        else:
            picked = self.pick(action[1])
            if picked is not None:
                self._on_row(kind, picked, action)

    def _on_row(self, kind: str, key: Key, action: tuple[Any, ...]) -> None:
        old = self.rows[key]
        if kind in ("update", "toast"):
            new = {**old, **action[2]}
            if kind == "toast":
                new["big"] = old["big"]
            self.rows[key] = new
            image = {c: v for c, v in new.items() if kind != "toast" or c != "big"}
            self.transaction(Op.UPDATE, key=key, before=dict(old), after=image,
                             unchanged=("big",) if kind == "toast" else ())
        elif kind == "rekey":
            new_key = (action[2], key[1])
            if new_key in self.rows:
                return
            del self.rows[key]
            self.rows[new_key] = {**old, "id": new_key[0]}
            self.transaction(Op.UPDATE, key=new_key, before=dict(old),
                             after=dict(self.rows[new_key]), old_key=key)
        elif kind == "delete":
            del self.rows[key]
            self.transaction(Op.DELETE, key=key, before=dict(old))
        else:  # read: a dump row at its high watermark, outside transactions
            after: Any = EncodedRow(orjson.dumps(old)) if action[2] else dict(old)
            self.emit(Op.READ, key=key, after=after, dump_id="d1")


def run(family: str, steps: list[tuple[Any, ...]]) -> Model:
    model = Model(family, table_info(family))
    for action in steps:
        model.apply(action)
    return model


def expected_rows(model: Model) -> dict[Any, dict[str, Any]]:
    table = (model.info.table.schema, model.info.table.name)
    return {(table, key): row for key, row in model.rows.items()}
