#!/usr/bin/env python
"""Replica outputs benchmark: dblog from PostgreSQL into a SQL or Delta replica, beside a raw
loop of the same driver writing the same rows, in the same run.

    python bench/run.py --db postgres --output sql|delta [--target sqlite|postgres|mariadb]
        [--rows 200000] [--updates 100000] [--merge-sizes 1000000,5000000] [--dsn DSN]

(``bench/run.py`` delegates here; ``python bench/replica.py ...`` works too.) Prints ONE JSON
line on stdout, progress on stderr:

* dump: dblog dumps the N-row table of bench/run.py into the replica (a PostgreSQL or MariaDB
  target runs on a throwaway server of its own; rows/s until everything
  is committed), against the raw loop writing the same rows (read once from the source into
  memory, canonical text for numeric and timestamps): ``executemany`` of a plain upsert
  (``ON CONFLICT``/``ON DUPLICATE KEY``, no guard) through the target's DBAPI driver, 1,000 rows
  per call and commit; for Delta ``write_deltalake`` (append) of the same Arrow data, 10,000
  rows per commit.
* stream: U single-row UPDATEs (transactions of 1,000) written while dblog is stopped, then
  consumed (events/s until committed), against the raw loop writing the U updated rows the same
  way.
* jsonl_dump_rows_per_s: the same dump into a JSON-lines file in the same run: the engine's
  own dump rate here, which bounds every output's.
* merge_cost (Delta): the time of one dblog MERGE of 1,000 keys (clustered: consecutive ids;
  scattered: random ids) into a Delta table of S rows, for each S of ``--merge-sizes``.
* memory: each dblog phase (the dump, the jsonl dump, the stream) runs in a child process of
  its own (bench/replica_child.py), so its figure is dblog's and not the raw loop's rows held
  here. ``dump_peak_rss_mb``, ``jsonl_dump_peak_rss_mb``, ``stream_peak_rss_mb``: the child's
  peak RSS (VmHWM: interpreter, imports, driver buffers and all); ``child_baseline_rss_mb``:
  the dump child's RSS once its output is built, before the pipeline starts (so the dump's
  own working memory is the difference); ``bench_process_peak_rss_mb``: this process's peak,
  which includes the raw loop's rows and says nothing about dblog.

bench/spark.py reuses its source side: the options (``source_args``), loading and cleaning
the table (``load_source``, ``clean_source``), the timed dump and stream (``timed_dump``,
``timed_stream``, from bench/replica_child.py) and the source rows.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import on_source, rss_kb
from replica_child import PHASES, child, run_child
from replica_child import timed_dump as timed_dump  # bench/spark.py's, re-exported
from replica_child import timed_stream as timed_stream
from run import TABLE, drop_slot, load_table, progress
from sources import PostgresSide, SourceSide, source_side

SELECT = (f"SELECT id, i1, i2, name, amount::text, note, created_at::text, updated_at::text "
          f"FROM {TABLE} ORDER BY id")
COLUMNS = ("id", "i1", "i2", "name", "amount", "note", "created_at", "updated_at")


def source_rows(dsn: str, limit: int | None = None, side: SourceSide | None = None
                ) -> list[dict[str, Any]]:
    """The table's rows as the events carry them (the raw loop writes the same values);
    ``side``: a MariaDB source (default: the PostgreSQL at ``dsn``)."""
    from dblog.connectors.postgres.chunks import PostgresChunkReader
    from dblog.core.model import EncodedRow, TableId

    reader = PostgresChunkReader(dsn, [], {}) if side is None else side.chunk_reader()
    try:
        info = reader.table_info(TableId.parse(TABLE if side is None else side.table))
        chunk = reader.read_chunk(info, None, None, 10**9 if limit is None else limit)
        rows = [r.decode() if isinstance(r, EncodedRow) else dict(r) for _, r in chunk.rows]
    finally:
        reader.close()
    return rows


def load_source(dsn: str, rows: int) -> None:
    """Fill the benchmark table of bench/run.py with ``rows`` rows."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        progress(f"loading {rows} rows")
        load_table(conn, rows)


def clean_source(dsn: str, slots: Sequence[str]) -> None:
    """Drop the benchmark's slots and table: leave a --dsn server as it was."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for slot in slots:
            drop_slot(conn, slot)
        conn.execute(f"DROP TABLE IF EXISTS {TABLE}")


def source_args(parser: argparse.ArgumentParser, rows: int,
                dbs: Sequence[str] = ("postgres",)) -> None:
    """The options of every replica benchmark (the source and the workload)."""
    parser.add_argument("--db", choices=list(dbs), default="postgres")
    parser.add_argument("--rows", type=int, default=rows)
    parser.add_argument("--updates", type=int, default=100_000)
    parser.add_argument("--chunk-size", type=int, default=1000)
    parser.add_argument("--dsn", help="use this source server instead of a throwaway one")


def _upsert_sql(engine: Any, names: list[str]) -> str:
    """A plain upsert (no guard) in the driver's parameter style."""
    dialect = engine.dialect.name
    quote = engine.dialect.identifier_preparer.quote
    marks = ", ".join(["?" if dialect == "sqlite" else "%s"] * len(names))
    lite_or_pg = dialect in ("postgresql", "sqlite")
    sets = ", ".join(f"{quote(c)} = " + (f"excluded.{quote(c)}" if lite_or_pg
                                          else f"VALUES({quote(c)})")
                     for c in names if c != "id")
    conflict = f"ON CONFLICT (id) DO UPDATE SET {sets}" if lite_or_pg else \
        f"ON DUPLICATE KEY UPDATE {sets}"
    return (f"INSERT INTO raw_bench ({', '.join(quote(c) for c in names)}) VALUES ({marks}) "
            + conflict)


def raw_sql(url: str, info: Any, timed: list[dict[str, Any]],
            prefill: Sequence[dict[str, Any]] = (), batch: int = 1000) -> float:
    """executemany of a plain upsert through the target's DBAPI driver into a table like the
    replica's (``prefill`` written first, untimed), the rows converted as the output converts
    them, guard columns constant; rows/s of ``timed``."""
    from dblog.outputs.sql import make_engine
    from dblog.outputs.sql_kinds import kinds_of, to_db
    from dblog.outputs.sql_schema import build_table

    engine = make_engine(url)
    dialect, kinds = engine.dialect.name, kinds_of(info)
    raw_table = build_table(info.table, "raw_bench", None, kinds, info.key_columns, dialect)
    raw_table.drop(engine, checkfirst=True)
    raw_table.create(engine)
    names = [c.name for c in raw_table.columns]
    guard = {"_dblog_major": 1, "_dblog_minor": 1, "_dblog_deleted": False}
    upsert = _upsert_sql(engine, names)
    conn = engine.raw_connection()
    try:
        cursor = conn.cursor()
        seconds = 0.0
        for rows, clock in ((prefill, False), (timed, True)):
            params = [tuple(guard[c] if c in guard else to_db(kinds[c], dialect, r.get(c))
                            for c in names) for r in rows]
            started = time.monotonic()
            for i in range(0, len(params), batch):
                cursor.executemany(upsert, params[i:i + batch])
                conn.commit()
            seconds += (time.monotonic() - started) if clock else 0.0
    finally:
        conn.close()
        engine.dispose()
    return len(timed) / seconds


def delta_tables(rows: list[dict[str, Any]], kinds: dict[str, Any], batch: int,
                 major: int = 1) -> list[Any]:
    """The rows as Arrow tables of the replica's schema, ``batch`` rows each."""
    import pyarrow as pa

    from dblog.outputs.delta_table import arrow_schema
    from dblog.outputs.sql_kinds import to_db

    schema = arrow_schema(kinds)
    tables = []
    for i in range(0, len(rows), batch):
        part = rows[i:i + batch]
        columns = {c: [to_db(k, "delta", r.get(c)) for r in part] for c, k in kinds.items()}
        columns.update(_dblog_major=[major] * len(part), _dblog_minor=[1] * len(part),
                       _dblog_deleted=[False] * len(part))
        tables.append(pa.Table.from_pydict(columns, schema=schema))
    return tables


def raw_delta(path: Path, rows: list[dict[str, Any]], kinds: dict[str, Any],
              batch: int = 10_000) -> float:
    """write_deltalake (append) of the same Arrow data; rows/s."""
    from deltalake import write_deltalake

    tables = delta_tables(rows, kinds, batch)
    started = time.monotonic()
    for table in tables:
        write_deltalake(str(path), table, mode="append")
    return len(rows) / (time.monotonic() - started)


def merge_cost(workdir: Path, kinds: dict[str, Any], sizes: list[int],
               template: dict[str, Any]) -> list[dict[str, Any]]:
    """One dblog MERGE of 1,000 keys into Delta tables of growing size (clustered and
    scattered keys), with the files it rewrote."""
    from deltalake import DeltaTable, write_deltalake

    from dblog.outputs import delta_table as dtab

    out = []
    for size in sizes:
        path = workdir / f"merge_{size}"
        step = 100_000  # 100k-row files: a clustered batch meets few of them
        for low in range(0, size, step):
            part = [{**template, "id": i} for i in range(low + 1, min(size, low + step) + 1)]
            write_deltalake(str(path), delta_tables(part, kinds, step)[0], mode="append")
        table = DeltaTable(str(path))
        files = len(table.file_uris())
        rng = random.Random(size)
        for layout, keys in (("clustered", range(size // 2, size // 2 + 1000)),
                             ("scattered", rng.sample(range(1, size + 1), 1000))):
            batch = delta_tables([{**template, "id": k, "i1": -1} for k in keys], kinds,
                                 1000, major=2)[0]
            predicate = dtab.merge_predicate(kinds, ("id",), batch)
            started = time.monotonic()
            metrics = dtab.merge(table, batch, predicate, dtab.commit_properties("bench", 1, 0))
            out.append({"table_rows": size, "table_files": files, "keys": layout,
                        "merge_s": round(time.monotonic() - started, 3),
                        "files_removed": metrics.get("num_target_files_removed"),
                        "files_added": metrics.get("num_target_files_added")})
            progress(f"merge into {size} rows, {layout}: {out[-1]}")
    return out


def prepare_target(kind: str, target: str, workdir: Path) -> tuple[str, Any]:
    """The replica's URL (or folder) and the server to stop afterwards (None: none): SQLite
    and Delta in the work folder, PostgreSQL and MariaDB on throwaway servers of their own."""
    import psycopg

    if kind == "delta":
        return str(workdir / "delta"), None
    if target == "sqlite":
        return f"sqlite:///{workdir / 'replica.db'}", None
    if target == "postgres":  # a server of its own: replica writes would add to the WAL that
        from dblog.harness.postgres import start_postgres  # the source's slot reads through

        server = start_postgres()
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE bench_replica")
        parts = dict(p.split("=", 1) for p in server.dsn().split())
        return (f"postgresql+psycopg://{parts.get('user', 'postgres')}@{parts['host']}:"
                f"{parts['port']}/bench_replica"), server
    from dblog.harness.mariadb import start_mariadb

    maria = start_mariadb()
    import MySQLdb

    conn = MySQLdb.connect(host="127.0.0.1", port=maria.port, user=maria.user)
    conn.cursor().execute("CREATE DATABASE bench_replica")
    conn.close()
    return "mysql+mysqldb://" + maria.dsn("bench_replica").split("://", 1)[1], maria


def measure(args: argparse.Namespace, dsn: str, workdir: Path) -> dict[str, Any]:
    side = source_side(args.db, dsn)
    if isinstance(side, PostgresSide):
        side.slots = ("bench_rep", "bench_ref")
    try:
        progress(f"loading {args.rows} rows")
        side.load(args.rows)
        result = _measure(args, side, workdir)
    finally:
        side.close()
    return result


def _measure(args: argparse.Namespace, side: SourceSide, workdir: Path) -> dict[str, Any]:
    rows = source_rows(side.dsn, side=side)
    url, server = prepare_target(args.output, args.target, workdir)
    try:
        # the dblog phases run in child processes, one each: their peak RSS is dblog's own,
        # not this process's (which holds ``rows`` for the raw loop)
        child_args = {"db": side.db, "dsn": side.dsn, "output": args.output,
                      "target": args.target, "url": url, "workdir": str(workdir),
                      "chunk_size": args.chunk_size, "updates": args.updates}
        progress(f"dblog dump into the {args.output} replica (child process)")
        dump = run_child("dump", child_args)
        progress(f"dblog dump: peak RSS {dump['peak_rss_mb']:.0f} MB")
        progress("dblog dump into a jsonl file (the engine's own limit in this run)")
        engine = run_child("jsonl", child_args)
        progress(f"dblog stream of {args.updates} updates (child process)")
        stream = run_child("stream", child_args)
        progress(f"dblog stream: peak RSS {stream['peak_rss_mb']:.0f} MB")
        updated = source_rows(side.dsn, args.updates, side=side)
        reader = side.chunk_reader()
        try:
            result = raw_side(args, url, rows, updated, workdir, reader, side.table)
        finally:
            reader.close()
    finally:
        if server is not None:
            server.stop()
    dump_rate, stream_rate = dump["rows"] / dump["seconds"], args.updates / stream["seconds"]
    return {
        "db": side.db, "output": args.output,
        "target": "delta" if args.output == "delta" else args.target,
        "rows": dump["rows"], "updates": args.updates,
        "dump_rows_per_s": round(dump_rate, 1),
        "raw_dump_rows_per_s": round(result["raw_dump"], 1),
        "dump_ratio": round(dump_rate / result["raw_dump"], 4),
        "jsonl_dump_rows_per_s": round(engine["rows"] / engine["seconds"], 1),
        "stream_events_per_s": round(stream_rate, 1),
        "raw_stream_events_per_s": round(result["raw_stream"], 1),
        "stream_ratio": round(stream_rate / result["raw_stream"], 4),
        "dump_peak_rss_mb": round(dump["peak_rss_mb"], 1),
        "jsonl_dump_peak_rss_mb": round(engine["peak_rss_mb"], 1),
        "stream_peak_rss_mb": round(stream["peak_rss_mb"], 1),
        "child_baseline_rss_mb": round(dump["rss_baseline_mb"], 1),
        "bench_process_peak_rss_mb": round(rss_kb()["VmHWM"] / 1024, 1),
        "merge_cost": result.get("merge_cost", []),
        "targets": {"dump_ratio": 0.5, "stream_ratio": 0.5},
    }


def raw_side(args: argparse.Namespace, url: str, rows: list[dict[str, Any]],
             updated: list[dict[str, Any]], workdir: Path, reader: Any,
             table: str) -> dict[str, Any]:
    from dblog.core.model import TableId
    from dblog.outputs.sql_kinds import kinds_of

    info = reader.table_info(TableId.parse(table))
    kinds = kinds_of(info)
    if args.output == "sql":
        progress("raw executemany upserts")
        return {"raw_dump": raw_sql(url, info, rows),
                "raw_stream": raw_sql(url, info, updated, prefill=rows)}
    progress("raw write_deltalake appends")
    result: dict[str, Any] = {"raw_dump": raw_delta(workdir / "raw_dump", rows, kinds),
                              "raw_stream": raw_delta(workdir / "raw_stream", updated, kinds)}
    sizes = [int(s) for s in args.merge_sizes.split(",") if s]
    result["merge_cost"] = merge_cost(workdir, kinds, sizes, rows[0])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source_args(parser, rows=200_000, dbs=("postgres", "mariadb"))
    parser.add_argument("--output", choices=["sql", "delta"], required=True)
    parser.add_argument("--target", choices=["sqlite", "postgres", "mariadb"],
                        default="postgres", help="the sql output's database")
    parser.add_argument("--merge-sizes", default="1000000",
                        help="Delta table sizes for the MERGE cost (comma-separated)")
    parser.add_argument("--child", choices=list(PHASES), help=argparse.SUPPRESS)
    parser.add_argument("--child-args", help=argparse.SUPPRESS)
    args, _ = parser.parse_known_args(argv)
    if args.child:  # a dblog phase, in a child process of the benchmark (replica_child.py)
        print(json.dumps(child(args.child, json.loads(args.child_args))), flush=True)
        return 0
    return on_source(args.db, args.dsn, "dblog-bench-replica-",
                     lambda dsn, workdir: measure(args, dsn, workdir))


if __name__ == "__main__":
    sys.exit(main())
