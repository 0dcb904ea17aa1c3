"""``dblog retire`` for MySQL/MariaDB: delete the pipeline's watermark rows (its own, and the
recorded first start if no commit removed it yet) and drop the watermark table once no row is
left (a binlog reader holds no slot on the server)."""

from __future__ import annotations

from typing import Any

from dblog.core.model import TableId

from .db import query, quote
from .startrecord import start_row


def what_goes(conn: Any, table: TableId, instance: str) -> list[str]:
    exists = query(conn, "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND "
                   "TABLE_NAME = %s", (table.schema, table.name), "finding the watermark table")
    if not exists:
        return []
    ident = f"{quote(table.schema)}.{quote(table.name)}"
    others = query(conn, f"SELECT COUNT(*) FROM {ident} WHERE name NOT IN (%s, %s)",
                   (instance, start_row(instance)), "reading the watermark table")
    found = [f"row {instance!r} of {table}"]
    if others and int(others[0][0]) == 0:
        found.append(f"table {table} (no other pipeline uses it)")
    return found


def retire(conn: Any, table: TableId, instance: str) -> list[str]:
    gone = what_goes(conn, table, instance)
    ident = f"{quote(table.schema)}.{quote(table.name)}"
    if gone:
        query(conn, f"DELETE FROM {ident} WHERE name IN (%s, %s)", (instance, start_row(instance)),
              "retiring the pipeline")
    if any(g.startswith("table ") for g in gone):
        query(conn, f"DROP TABLE {ident}", None, "retiring the pipeline")
    conn.commit()
    return gone
