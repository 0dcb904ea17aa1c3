"""A random concurrent workload on three tables (integer, composite and UUID keys), in the
PostgreSQL dialect and, with ``dialect="mariadb"``, the MariaDB one."""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Callable
from typing import Any

import psycopg

SCHEMA = """
CREATE SEQUENCE ver_seq;
CREATE TABLE t_int (id int PRIMARY KEY, ver bigint NOT NULL, v text, amount numeric(10,2));
CREATE TABLE t_comp (a int, b varchar(10), ver bigint NOT NULL, v text, PRIMARY KEY (a, b));
CREATE TABLE t_uuid (id uuid PRIMARY KEY, ver bigint NOT NULL, v text,
                     ts timestamptz DEFAULT now());
INSERT INTO t_int SELECT g, nextval('ver_seq'), 'init' || g, g / 7.0
  FROM generate_series(1, {n}) g;
INSERT INTO t_comp SELECT g % 100, 'x' || (g / 100), nextval('ver_seq'), 'init'
  FROM generate_series(1, {n}) g;
"""
TABLES = ["public.t_int", "public.t_comp", "public.t_uuid"]
NS = uuid.UUID("12345678-1234-5678-1234-567812345678")


def uid(n: int) -> str:
    return str(uuid.uuid5(NS, str(n)))


MARIA_SCHEMA = [
    "CREATE SEQUENCE ver_seq",
    "CREATE TABLE t_int (id int PRIMARY KEY, ver bigint NOT NULL, v text, amount decimal(10,2))",
    "CREATE TABLE t_comp (a int, b varchar(10), ver bigint NOT NULL, v text, PRIMARY KEY (a, b))",
    "CREATE TABLE t_uuid (id char(36) PRIMARY KEY, ver bigint NOT NULL, v text, "
    "ts timestamp(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))",
    "INSERT INTO t_int SELECT seq, nextval(ver_seq), concat('init', seq), seq / 7.0 "
    "FROM seq_1_to_{n}",
    "INSERT INTO t_comp SELECT seq % 100, concat('x', seq DIV 100), nextval(ver_seq), 'init' "
    "FROM seq_1_to_{n}",
]


def maria_connect(dsn: str, autocommit: bool = True) -> Any:
    import pymysql

    from dblog.connectors.mysql.db import parse_dsn

    e = parse_dsn(dsn)
    return pymysql.connect(host=e.host, port=e.port, user=e.user, password=e.password,
                           database=e.database or None, autocommit=autocommit,
                           charset="utf8mb4")


def create_schema(dsn: str, rows: int, dialect: str = "postgres") -> None:
    if dialect == "mariadb":
        conn = maria_connect(dsn)
        with conn.cursor() as cur:
            for statement in MARIA_SCHEMA:
                cur.execute(statement.format(n=rows))
            cur.executemany("INSERT INTO t_uuid (id, ver, v) VALUES (%s, nextval(ver_seq), 'i')",
                            [(uid(i),) for i in range(rows // 2)])
        conn.close()
        return
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA.format(n=rows))
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO t_uuid (id, ver, v) VALUES (%s, nextval('ver_seq'), 'i')",
                            [(uid(i),) for i in range(rows // 2)])


def _statement(rng: random.Random, rows: int) -> tuple[str, tuple[object, ...]]:
    table = rng.choice(("int", "comp", "uuid"))
    op = rng.random()
    k = rng.randrange(1, int(rows * 1.3))
    if table == "int":
        if op < 0.4:
            return ("UPDATE t_int SET ver = nextval('ver_seq'), v = md5(random()::text) "
                    "WHERE id = %s", (k,))
        if op < 0.6:
            return "DELETE FROM t_int WHERE id = %s", (k,)
        if op < 0.85:
            return ("INSERT INTO t_int VALUES (%s, nextval('ver_seq'), 'ins', 1.5) "
                    "ON CONFLICT (id) DO UPDATE SET ver = nextval('ver_seq'), v = 'ups'"), (k,)
        return ("UPDATE t_int SET id = %s, ver = nextval('ver_seq') WHERE id = %s",
                (rng.randrange(1, int(rows * 1.3)), k))
    if table == "comp":
        a, b = k % 100, f"x{k // 100}"
        if op < 0.45:
            return ("UPDATE t_comp SET ver = nextval('ver_seq'), v = 'u' "
                    "WHERE a = %s AND b = %s", (a, b))
        if op < 0.65:
            return "DELETE FROM t_comp WHERE a = %s AND b = %s", (a, b)
        if op < 0.9:
            return ("INSERT INTO t_comp VALUES (%s, %s, nextval('ver_seq'), 'ins') ON CONFLICT "
                    "(a, b) DO UPDATE SET ver = nextval('ver_seq')"), (a, b)
        return ("UPDATE t_comp SET b = %s, ver = nextval('ver_seq') WHERE a = %s AND b = %s",
                (f"y{rng.randrange(50)}", a, b))
    key = uid(k // 2)
    if op < 0.5:
        return "UPDATE t_uuid SET ver = nextval('ver_seq'), v = 'u' WHERE id = %s", (key,)
    if op < 0.7:
        return "DELETE FROM t_uuid WHERE id = %s", (key,)
    return ("INSERT INTO t_uuid (id, ver, v) VALUES (%s, nextval('ver_seq'), 'i') ON CONFLICT (id) "
            "DO UPDATE SET ver = nextval('ver_seq')"), (key,)


def _maria_statement(rng: random.Random, rows: int) -> tuple[str, tuple[object, ...]]:
    """The PostgreSQL statement translated: nextval(ver_seq), ON DUPLICATE KEY UPDATE."""
    sql, params = _statement(rng, rows)
    sql = sql.replace("nextval('ver_seq')", "nextval(ver_seq)").replace(
        "md5(random()::text)", "md5(rand())")
    head, sep, _ = sql.partition(" ON CONFLICT")
    if sep:
        update = sql.split("DO UPDATE SET ", 1)[1].replace("nextval('ver_seq')", "nextval(ver_seq)")
        sql = f"{head} ON DUPLICATE KEY UPDATE {update}"
    return sql, params


class Writers:
    """``count`` threads running random 1-4 statement transactions until stopped."""

    def __init__(self, dsn: str, rows: int, count: int = 3, seed: int = 1,
                 dialect: str = "postgres", pause_s: float = 0.0) -> None:
        self.dsn, self.rows, self.dialect, self.pause_s = dsn, rows, dialect, pause_s
        self.stop_event = threading.Event()
        self.committed = 0
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._run, args=(seed + i,), daemon=True)
                        for i in range(count)]

    def __enter__(self) -> Writers:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(30)

    def _run(self, seed: int) -> None:
        if self.dialect == "mariadb":
            self._run_maria(seed, _maria_statement)
            return
        rng = random.Random(seed)
        try:
            with psycopg.connect(self.dsn) as conn:
                while not self.stop_event.is_set():
                    try:
                        with conn.transaction():
                            for _ in range(rng.randint(1, 4)):
                                conn.execute(*_statement(rng, self.rows))
                        self.committed += 1
                    except (psycopg.errors.UniqueViolation, psycopg.errors.DeadlockDetected):
                        pass
                    if self.pause_s:
                        self.stop_event.wait(self.pause_s)
        except BaseException as exc:  # surfaced by the test
            self.errors.append(exc)

    def _run_maria(self, seed: int,
                   statement: Callable[[random.Random, int], tuple[str, tuple[object, ...]]]
                   ) -> None:
        import pymysql

        rng = random.Random(seed)
        try:
            conn = maria_connect(self.dsn, autocommit=False)
            with conn.cursor() as cur:
                while not self.stop_event.is_set():
                    try:
                        for _ in range(rng.randint(1, 4)):
                            cur.execute(*statement(rng, self.rows))
                        conn.commit()
                        self.committed += 1
                        if self.pause_s:
                            self.stop_event.wait(self.pause_s)
                    except (pymysql.err.IntegrityError, pymysql.err.OperationalError) as exc:
                        conn.rollback()
                        if exc.args[0] not in (1062, 1213, 1205):
                            raise
            conn.close()
        except BaseException as exc:  # surfaced by the test
            self.errors.append(exc)
