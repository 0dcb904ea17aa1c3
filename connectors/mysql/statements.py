"""What a binlog Query event's statement means to the reader (binlog.py): a transaction's
BEGIN or COMMIT, a statement to skip, DDL, or a row change logged as a statement.

A row change logged as a statement (a session with ``binlog_format=STATEMENT`` or ``MIXED``)
carries no row images: on a captured table it stops the stream with the fix, never dropped
silently. The tables it writes are read from the statement's text: the target of INSERT and
REPLACE, every table named before SET of an UPDATE and before WHERE of a DELETE (multi-table
forms included, aliases read as tables: a false match stops the stream rather than lose rows).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from typing import Any

from dblog.core.model import TableId
from dblog.errors import FatalSourceError

NAME = r"(?:`(?:[^`]|``)+`|[\w$]+)"
QUALIFIED = rf"{NAME}(?:\s*\.\s*{NAME})?"
_COMMENTS = re.compile(r"/\*.*?\*/|#[^\n]*|--\s[^\n]*", re.S)
# MariaDB logs ``SET STATEMENT var=value[, ...] FOR <statement>`` verbatim
_SET_STATEMENT = re.compile(r"^SET\s+STATEMENT\s+(?:'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.|\"\")*\""
                            r"|`(?:[^`]|``)*`|[^'\"`])*?\sFOR\s+", re.I | re.S)
_STRINGS = re.compile(r"'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.|\"\")*\"", re.S)
_SKIP = ("SAVEPOINT", "ROLLBACK TO", "XA ", "RELEASE SAVEPOINT")
_DML = re.compile(r"^(INSERT|REPLACE|UPDATE|DELETE)\b(.*)$", re.I | re.S)
# where the tables a statement writes are named no further
_TARGETS_END = re.compile(r"\b(?:SET|VALUES?|SELECT|WHERE|ORDER|LIMIT|PARTITION|RETURNING|"
                          r"WITH)\b|\(", re.I)
_NOT_NAMES = frozenset({"LOW_PRIORITY", "DELAYED", "HIGH_PRIORITY", "IGNORE", "INTO", "QUICK",
                        "FROM", "USING", "JOIN", "INNER", "LEFT", "RIGHT", "OUTER", "CROSS",
                        "STRAIGHT_JOIN", "NATURAL", "ON", "AS", "AND", "OR", "NOT", "IS",
                        "NULL"})
_OPENS_TRANSACTION = re.compile(r"\bSTART\s+TRANSACTION\s*;?\s*$", re.I)


class Kind(enum.Enum):
    BEGIN = "begin"
    COMMIT = "commit"
    SKIP = "skip"
    DDL = "ddl"
    DML = "dml"


def text_of(event: Any) -> str:
    """The statement of a mysql-replication Query event."""
    query = event.query
    if isinstance(query, str):
        return query.strip()
    return bytes(query).decode("utf-8", "replace").strip()


def statement_body(query: str) -> str:
    """The statement without comments and without a leading ``SET STATEMENT ... FOR``."""
    return _SET_STATEMENT.sub("", _COMMENTS.sub(" ", query).strip(), count=1)


def kind_of(query: str) -> Kind:
    upper = query[:20].upper()
    if upper == "BEGIN":
        return Kind.BEGIN
    if upper == "COMMIT" or upper == "ROLLBACK":
        # a ROLLBACK is logged only after changes of non-transactional tables, which stand:
        # it ends the transaction as COMMIT does
        return Kind.COMMIT
    if upper.startswith(_SKIP):
        return Kind.SKIP
    return Kind.DML if _DML.match(statement_body(query)) else Kind.DDL


def opens_transaction(query: str) -> bool:
    """MySQL 8.0.21+ logs ``CREATE TABLE ... SELECT`` as ``CREATE TABLE ... START
    TRANSACTION``, then the rows, then the XID: the DDL does not end the transaction."""
    return bool(_OPENS_TRANSACTION.search(query))


def written_tables(query: str, schema: str) -> list[TableId]:
    """The tables an INSERT, REPLACE, UPDATE or DELETE statement may write (see the module
    docstring); ``schema``: the statement's default database."""
    text = _STRINGS.sub("''", statement_body(query))
    match = _DML.match(text)
    if match is None:
        return []
    rest = match.group(2)
    end = _TARGETS_END.search(rest)
    names = re.findall(QUALIFIED, rest[:end.start()] if end else rest)
    return [table_named(n, schema) for n in names if n.upper() not in _NOT_NAMES]


def table_named(name: str, schema: str) -> TableId:
    parts = re.findall(NAME, name)
    clean = [p[1:-1].replace("``", "`") if p.startswith("`") else p for p in parts]
    return TableId(clean[0], clean[1]) if len(clean) == 2 else TableId(schema, clean[0])


def refuse_statement_rows(query: str, schema: str, captured: Callable[[TableId], bool]
                          ) -> None:
    """Stop on a row change of captured tables logged as a statement (``schema``: its
    default database); one of other tables is not the pipeline's."""
    tables = [t for t in written_tables(query, schema) if captured(t)]
    if not tables:
        return
    names = ", ".join(sorted({str(t) for t in tables}))
    raise FatalSourceError(
        f"a change of {names} is in the binlog as a statement, without the changed rows "
        f"(its session used binlog_format=STATEMENT or MIXED): {query[:200]!r}",
        fix="make every session that writes captured tables log rows: SET GLOBAL "
            "binlog_format = 'ROW' and binlog_format=ROW in my.cnf, and do not let tools (e.g. "
            "pt-table-checksum) SET SESSION binlog_format; the binlog keeps this statement, "
            "so remove the pipeline's state and request a full dump to start over")
