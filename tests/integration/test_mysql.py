"""MariaDB binlog connector: collation-aware keys, composite keys, type parity between dump rows
and log events, DDL during a dump, and a dropped binlog connection."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from dblog.app.pipeline import Pipeline
from dblog.core.dumps import ChunkPlan
from dblog.core.model import TableId
from dblog.engine import EngineSettings, PhaseHooks
from dblog.outputs.jsonl import JsonlOutput

from .pgutil import (
    check_commit_order,
    check_no_time_travel,
    dump_state,
    read_events,
    replayed,
    wait_until,
)
from .sources import Kit
from .workload import maria_connect

pytestmark = pytest.mark.integration


@pytest.fixture()
def maria(maria_dsn: str) -> Kit:
    return Kit("mariadb", maria_dsn)


def _pipeline(kit: Kit, tmp: Path, chunk: int = 20, hooks: PhaseHooks | None = None,
              tables: list[str] | None = None) -> Pipeline:
    config = kit.source_config("mysqltest")
    if tables is not None:
        config["tables"] = tables
    from dblog.connectors.mysql import MysqlConnector

    settings = EngineSettings(chunk_size=chunk, flush_interval_s=0.1, heartbeat_interval_s=0.5)
    return Pipeline(MysqlConnector(config, "mt"), [JsonlOutput({"path": str(tmp / "out.jsonl")})],
                    state_path=str(tmp / "state.json"), settings=settings, hooks=hooks)


def _catch_up(pipeline: Pipeline, kit: Kit) -> None:
    target = kit.current_position()

    def caught_up() -> bool:
        position = pipeline.status()["committed_position"]
        return position is not None and kit.parse_position(position) >= target

    wait_until(caught_up, 60, f"the committed position to reach {target}")


def _dump(pipeline: Pipeline, tables: list[str], timeout: float = 120) -> str:
    dump_id = pipeline.dump(tables)
    wait_until(lambda: dump_state(pipeline, dump_id) == "done", timeout, "the dump")
    return dump_id


def _case_variant(rng: random.Random, key: str) -> str:
    return "".join(c.upper() if rng.random() < 0.5 else c.lower() for c in key)


def _ci_writer(kit: Kit, stop: threading.Event, seed: int, errors: list[BaseException],
               counts: Counter[str]) -> None:
    """Writers that insert, update, delete, and change only the case of keys."""
    import pymysql

    rng = random.Random(seed)
    conn = maria_connect(kit.dsn, autocommit=False)
    try:
        with conn.cursor() as cur:
            while not stop.is_set():
                key = _case_variant(rng, f"key{rng.randrange(300):03d}")
                op = rng.random()
                try:
                    if op < 0.45:  # only the case of the key changes
                        cur.execute("UPDATE t_ci SET k = %s, ver = nextval(ver_seq) WHERE k = %s",
                                    (_case_variant(rng, key), key))
                        counts["case"] += cur.rowcount
                    elif op < 0.65:
                        cur.execute("DELETE FROM t_ci WHERE k = %s", (key,))
                    else:
                        cur.execute("INSERT INTO t_ci VALUES (%s, nextval(ver_seq), 'ins') ON "
                                    "DUPLICATE KEY UPDATE ver = nextval(ver_seq), v = 'ups'",
                                    (key,))
                    conn.commit()
                except (pymysql.err.IntegrityError, pymysql.err.OperationalError) as exc:
                    conn.rollback()
                    if exc.args[0] not in (1062, 1213, 1205):
                        raise
    except BaseException as exc:
        errors.append(exc)
    finally:
        conn.close()


def test_case_insensitive_keys_follow_the_collation(maria: Kit, tmp_path: Path) -> None:
    maria.execute("CREATE SEQUENCE ver_seq")
    maria.execute("CREATE TABLE t_ci (k varchar(20) COLLATE utf8mb4_general_ci PRIMARY KEY, "
                  "ver bigint NOT NULL, v text)")
    maria.execute("INSERT INTO t_ci SELECT concat('Key', lpad(seq, 3, '0')), nextval(ver_seq), "
                  "'init' FROM seq_0_to_199")
    pipeline = _pipeline(maria, tmp_path, chunk=10).start()
    stop, errors, counts = threading.Event(), list[BaseException](), Counter[str]()
    writers = [threading.Thread(target=_ci_writer, args=(maria, stop, s, errors, counts))
               for s in (1, 2)]
    try:
        for writer in writers:
            writer.start()
        _dump(pipeline, [maria.table("t_ci")])
        wait_until(lambda: counts["case"] > 50 or bool(errors), 60, "case-only key updates")
        stop.set()
        for writer in writers:
            writer.join(30)
        _catch_up(pipeline, maria)
    finally:
        stop.set()
        pipeline.stop()
    assert not errors, errors
    events = read_events(tmp_path / "out.jsonl")
    changes = [e for e in events if e["op"] in ("insert", "update", "delete", "read")]
    assert all(e["key"][0] == e["key"][0].upper() for e in changes), "keys are normalised"
    case_only = [e for e in events if e["op"] == "update"
                 and e["before"]["k"] != e["after"]["k"]
                 and e["before"]["k"].upper() == e["after"]["k"].upper()]
    assert counts["case"] > 20 and len(case_only) > 20, (counts, len(case_only))
    assert all("old_key" not in e for e in case_only), "a case change keeps the key"
    assert sum(1 for e in events if e["op"] == "read") > 100
    check_commit_order(events, maria.parse_position)
    check_no_time_travel(events)
    assert replayed(events) == maria.source_rows([maria.table("t_ci")])
    # the stored spelling of each key is the latest one written
    source = {row["k"] for row in maria.source_rows([maria.table("t_ci")]).values()}
    assert {row["k"] for row in replayed(events).values()} == source


def test_composite_key_of_an_integer_and_a_string(maria: Kit, tmp_path: Path) -> None:
    maria.execute("CREATE TABLE t_comp (a int, b varchar(10), ver int NOT NULL, "
                  "PRIMARY KEY (b, a))")
    maria.execute("INSERT INTO t_comp SELECT seq % 7, concat(char(65 + seq % 5), seq DIV 7), "
                  "seq FROM seq_1_to_300")
    pipeline = _pipeline(maria, tmp_path, chunk=13, tables=[maria.table("t_comp")]).start()
    try:
        dump_id = _dump(pipeline, [maria.table("t_comp")])
        maria.execute("UPDATE t_comp SET b = lower(b), ver = ver + 1000 WHERE a = 3")
        maria.execute("UPDATE t_comp SET a = a + 100, ver = ver + 2000 WHERE a = 4")
        maria.execute("DELETE FROM t_comp WHERE a = 5")
        _catch_up(pipeline, maria)
    finally:
        pipeline.stop()
    events = read_events(tmp_path / "out.jsonl")
    reads = [tuple(e["key"]) for e in events if e["op"] == "read" and e["dump_id"] == dump_id]
    assert len(reads) == len(set(reads)) == 300
    # keys follow the primary key's column order (b, a), strings normalised
    assert all(isinstance(b, str) and isinstance(a, int) and b == b.upper() for b, a in reads)
    case_updates = [e for e in events if e["op"] == "update" and e["after"]["a"] == 3]
    assert case_updates and all("old_key" not in e for e in case_updates)
    moved = [e for e in events if e["op"] == "update" and e["after"]["a"] >= 100]
    assert moved and all(e["old_key"][1] == e["key"][1] - 100 for e in moved)
    check_no_time_travel(events)
    assert replayed(events) == maria.source_rows([maria.table("t_comp")])


TYPES = """
  id int PRIMARY KEY, ti tinyint, tu tinyint unsigned, si smallint, su smallint unsigned,
  mi mediumint, mu mediumint unsigned, i int, iu int unsigned, bi bigint, bu bigint unsigned,
  d decimal(30,10), d0 decimal(5,0), f float, db double, dt date, dtm datetime, dtm6 datetime(6),
  ts timestamp(3) NULL, tm time, tm6 time(6), y year, c char(5), vc varchar(20),
  vl varchar(20) CHARACTER SET latin1, tx text, tx2 mediumtext CHARACTER SET utf8mb3,
  bn binary(6), vb varbinary(10), bl blob, e enum('a','b','c d'), st set('x','y','z'),
  j json, bt bit(10), b1 bit(1), uc char(36), ub binary(16),
  u16 varchar(10) CHARACTER SET utf16, sj varchar(10) CHARACTER SET sjis,
  cy varchar(10) CHARACTER SET cp1251, gb varchar(10) CHARACTER SET gbk,
  asc_ varchar(10) CHARACTER SET ascii, u32 text CHARACTER SET utf32
"""
TYPE_ROWS = [
    "(1, -128, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295, "
    "-9223372036854775808, 18446744073709551615, -12345678901234567890.0123456789, 99999, "
    "0.1, 0.1, '2024-02-29', '2024-01-01 10:11:12', '1999-12-31 23:59:59.999999', "
    "'2024-06-30 12:00:00.123', '-838:59:59', '12:34:56.000001', 2024, 'ab  ', 'héllo wörld', "
    "'Ünïcödé', '\U0001f600 text', 'mb3 ü', x'610000000000', x'00ff00', x'deadbeef00', 'c d', "
    "'x,z', '{\"a\": [1, 2.50, \"x\"], \"b\": null}', b'1010101010', b'1', "
    "'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11', unhex('a0eebc999c0b4ef8bb6d6bb9bd380a11'), "
    "'ŭtf16 😀', 'ｶﾀｶﾅ日本', 'Привет', '中文', 'plain', 'utf32 é')",
    "(2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1.2345678, 1e300, '0001-01-01', "
    "'1000-01-01 00:00:00', '2038-01-19 03:14:07.5', '1970-01-01 00:00:01', '838:59:59', "
    "'-00:00:00.5', 1901, '', '', '', '', '', x'', x'', x'', 'a', '', '[]', b'0', b'0', '', "
    "unhex('00000000000000000000000000000000'), '', '', '', '', '', '')",
    "(3, " + ", ".join(["NULL"] * 42) + ")",
]


def test_every_type_has_the_same_value_in_a_dump_row_and_a_log_event(maria: Kit,
                                                                       tmp_path: Path) -> None:
    maria.execute(f"CREATE TABLE alltypes ({TYPES})")
    pipeline = _pipeline(maria, tmp_path, chunk=2, tables=[maria.table("alltypes")]).start()
    try:
        maria.execute(f"INSERT INTO alltypes VALUES {', '.join(TYPE_ROWS)}")
        _dump(pipeline, [maria.table("alltypes")], 30)
        _catch_up(pipeline, maria)
    finally:
        pipeline.stop()
    events = read_events(tmp_path / "out.jsonl")
    logged = {e["key"][0]: e["after"] for e in events if e["op"] == "insert"}
    dumped = {e["key"][0]: e["after"] for e in events if e["op"] == "read"}
    assert sorted(logged) == sorted(dumped) == [1, 2, 3]
    for key in (1, 2, 3):
        assert logged[key] == dumped[key], key
    first, second = logged[1], logged[2]
    assert first["bu"] == 18446744073709551615 and first["iu"] == 4294967295
    assert first["bi"] == -9223372036854775808 and first["tu"] == 255
    assert first["d"] == "-12345678901234567890.0123456789" and first["d0"] == "99999"
    assert first["f"] == 0.1 and first["db"] == 0.1
    assert second["f"] == 1.2345678 and second["db"] == 1e300
    assert first["dt"] == "2024-02-29" and first["dtm6"] == "1999-12-31 23:59:59.999999"
    assert first["ts"] == "2024-06-30 12:00:00.123000" and first["tm"] == "-838:59:59"
    assert second["tm6"] == "-00:00:00.500000" and first["y"] == 2024
    assert first["c"] == "ab" and first["vl"] == "Ünïcödé" and first["tx"] == "\U0001f600 text"
    assert first["bn"] == "610000000000" and first["vb"] == "00ff00" and second["bn"] == \
        "000000000000"
    assert first["e"] == "c d" and first["st"] == "x,z" and second["st"] == ""
    assert first["j"] == '{"a": [1, 2.50, "x"], "b": null}'
    assert first["bt"] == 0b1010101010 and first["b1"] == 1
    assert first["uc"] == "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"
    assert first["ub"] == "a0eebc999c0b4ef8bb6d6bb9bd380a11"
    assert first["u16"] == "ŭtf16 \U0001f600" and first["sj"] == "ｶﾀｶﾅ日本"
    assert first["cy"] == "Привет" and first["gb"] == "中文" and first["u32"] == "utf32 é"
    assert all(v is None for k, v in logged[3].items() if k != "id")


def test_alter_table_during_a_dump_gives_each_chunk_its_columns(maria: Kit,
                                                                tmp_path: Path) -> None:
    maria.execute("CREATE TABLE t_alter (id int PRIMARY KEY, v varchar(10))")
    maria.execute("INSERT INTO t_alter SELECT seq, 'init' FROM seq_1_to_600")
    altered = threading.Event()

    def after_low(plan: ChunkPlan) -> None:
        # between L and the SELECT of the chunk after key 150: the reader still knows the old
        # columns; the schema change in the log must discard this chunk and re-read it
        if plan.after == (150,) and not altered.is_set():
            maria.execute("ALTER TABLE t_alter ADD COLUMN extra int NOT NULL DEFAULT 5")
            maria.execute("INSERT INTO t_alter (id, v) VALUES (1000, 'late')")
            altered.set()

    pipeline = _pipeline(maria, tmp_path, chunk=50, hooks=PhaseHooks(after_low, None),
                         tables=[maria.table("t_alter")]).start()
    try:
        dump_id = _dump(pipeline, [maria.table("t_alter")])
        maria.execute("UPDATE t_alter SET v = 'after' WHERE id = 10")
        _catch_up(pipeline, maria)
    finally:
        pipeline.stop()
    assert altered.is_set()
    events = read_events(tmp_path / "out.jsonl")
    schema = [e["seq"] for e in events if e["op"] == "schema"]
    assert len(schema) == 1
    reads = [e for e in events if e["op"] == "read" and e["dump_id"] == dump_id]
    assert sorted(e["key"][0] for e in reads) == list(range(1, 601)), "each key read once"
    for event in reads:
        before_ddl = event["key"][0] <= 150
        assert ("extra" in event["after"]) is not before_ddl, event
        assert before_ddl == (event["seq"] < schema[0]), event
        if not before_ddl:
            assert event["after"]["extra"] == 5
    late = [e for e in events if e["op"] == "insert"]
    assert late and late[0]["after"] == {"id": 1000, "v": "late", "extra": 5}
    updated = [e for e in events if e["op"] == "update"]
    assert updated and updated[0]["after"] == {"id": 10, "v": "after", "extra": 5}


def _binlog_connections(kit: Kit) -> list[int]:
    conn = maria_connect(kit.dsn)
    with conn.cursor() as cur:
        cur.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND LIKE "
                    "'Binlog Dump%'")
        ids = [int(r[0]) for r in cur.fetchall()]
    conn.close()
    return ids


def _kill(kit: Kit, ids: list[int]) -> None:
    conn = maria_connect(kit.dsn)
    with conn.cursor() as cur:
        for ident in ids:
            cur.execute(f"KILL CONNECTION {ident}")
    conn.close()


def _kill_stream(kit: Kit) -> int:
    """Kill the binlog connection once it is there (after a kill the reader reconnects with
    backoff, so it may be between attempts)."""
    wait_until(lambda: bool(_binlog_connections(kit)), 10, "a binlog connection")
    _kill(kit, _binlog_connections(kit))
    return 1


def test_a_killed_binlog_connection_resumes_without_loss_or_duplicates(
        maria: Kit, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="dblog.connectors.mysql")
    maria.execute("CREATE TABLE t_int (id int PRIMARY KEY, v varchar(10), pad text)")
    pipeline = _pipeline(maria, tmp_path, tables=[maria.table("t_int")]).start()
    inserted: list[int] = []
    stop = threading.Event()

    def write() -> None:
        conn = maria_connect(maria.dsn, autocommit=False)
        with conn.cursor() as cur:
            next_id = 1
            while not stop.is_set() and next_id < 200_000:
                batch = list(range(next_id, next_id + 300))  # one statement per row
                for ident in batch:
                    cur.execute("INSERT INTO t_int VALUES (%s, 'w', repeat('x', 200))", (ident,))
                conn.commit()
                inserted.extend(batch)
                next_id += 300
        conn.close()

    writer = threading.Thread(target=write, daemon=True)
    kills = 0
    try:
        writer.start()
        for _ in range(3):
            time.sleep(0.4)
            kills += _kill_stream(maria)
        stop.set()
        writer.join(30)
        _catch_up(pipeline, maria)
        # one large transaction, read from an idle start: the reader needs seconds for it, so
        # these kills come while it is inside the transaction
        maria.execute("INSERT INTO t_int SELECT 1000000 + seq, 'big', repeat('y', 200) "
                      "FROM seq_1_to_100000")
        inserted.extend(range(1_000_001, 1_100_001))
        for _ in range(2):
            time.sleep(0.1)
            kills += _kill_stream(maria)
        _catch_up(pipeline, maria)
        restarts = pipeline.restarts
    finally:
        stop.set()
        pipeline.stop()
    assert kills == 5
    reconnects = [r.getMessage() for r in caplog.records if "reconnecting from" in r.getMessage()]
    assert len(reconnects) == 5, reconnects
    # at least one drop came in the middle of a transaction: its handed-out part was skipped
    assert any("skipping 0 " not in message for message in reconnects), reconnects
    events = read_events(tmp_path / "out.jsonl")
    ids = Counter(e["key"][0] for e in events if e["op"] == "insert")
    assert set(ids) == set(inserted), "an insert was lost"
    duplicated = [k for k, n in ids.items() if n > 1]
    assert not duplicated, f"{len(duplicated)} inserts re-read, e.g. {duplicated[:5]}"
    assert restarts == 0, "the adapter reconnects by itself; the pipeline did not restart"
    check_commit_order(events, maria.parse_position)
    assert replayed(events) == maria.source_rows([maria.table("t_int")])


SAFE_TYPES = """
  id bigint PRIMARY KEY, i int, u int unsigned, d decimal(12,2), n varchar(20), t text,
  l varchar(10) CHARACTER SET latin1, dt date, ts timestamp(6) NULL, dtm datetime,
  e enum('a','b'), st set('x','y')
"""


def test_server_encoded_dump_rows_match_log_events(maria: Kit, tmp_path: Path) -> None:
    """Tables whose columns all have an exact JSON form are dumped through JSON_OBJECT."""
    from dblog.connectors.mysql.chunks import encoded_select

    maria.execute(f"CREATE TABLE safe ({SAFE_TYPES})")
    reader = maria.chunk_reader()
    try:
        assert encoded_select(reader.table_info(TableId.parse(maria.table("safe")))) is not None
    finally:
        reader.close()
    pipeline = _pipeline(maria, tmp_path, chunk=2, tables=[maria.table("safe")]).start()
    try:
        maria.execute("INSERT INTO safe VALUES (1, -5, 4294967295, -1.50, 'q\"uote\\\\', "
                      "'tab\\tnew\\nline \U0001f600', 'Ünï', '2024-02-29', "
                      "'2024-06-30 12:00:00.000001', '2024-01-01 10:11:12', 'b', 'x,y'), "
                      "(2, NULL, 0, 0, '', '', '', '0001-01-01', '1970-01-01 00:00:01', "
                      "'1000-01-01 00:00:00', 'a', ''), (3, NULL, NULL, NULL, NULL, NULL, NULL, "
                      "NULL, NULL, NULL, NULL, NULL)")
        _dump(pipeline, [maria.table("safe")], 30)
        _catch_up(pipeline, maria)
    finally:
        pipeline.stop()
    events = read_events(tmp_path / "out.jsonl")
    logged = {e["key"][0]: e["after"] for e in events if e["op"] == "insert"}
    dumped = {e["key"][0]: e["after"] for e in events if e["op"] == "read"}
    assert sorted(logged) == sorted(dumped) == [1, 2, 3]
    for key in (1, 2, 3):
        assert logged[key] == dumped[key], key
    assert dumped[1]["d"] == "-1.50" and dumped[1]["n"] == 'q"uote\\'
    assert dumped[1]["ts"] == "2024-06-30 12:00:00.000001" and dumped[2]["st"] == ""


def test_binary_decimal_and_temporal_keys_chunk_and_match(maria: Kit, tmp_path: Path) -> None:
    maria.execute("CREATE TABLE k_bin (id binary(16) PRIMARY KEY, v int)")
    maria.execute("INSERT INTO k_bin SELECT unhex(md5(seq)), seq FROM seq_1_to_100")
    maria.execute("CREATE TABLE k_dec (id decimal(8,2) PRIMARY KEY, v int)")
    maria.execute("INSERT INTO k_dec SELECT seq / 4, seq FROM seq_1_to_100")
    maria.execute("CREATE TABLE k_dt (id datetime(6) PRIMARY KEY, v int)")
    maria.execute("INSERT INTO k_dt SELECT timestamp'2024-01-01 00:00:00' + interval seq * 7 "
                  "microsecond + interval seq second, seq FROM seq_1_to_100")
    tables = [maria.table(t) for t in ("k_bin", "k_dec", "k_dt")]
    pipeline = _pipeline(maria, tmp_path, chunk=7, tables=tables).start()
    try:
        dump_id = _dump(pipeline, tables)
        maria.execute("UPDATE k_bin SET v = -v WHERE v % 3 = 0")
        maria.execute("UPDATE k_dec SET id = id + 100 WHERE v % 5 = 0")
        maria.execute("DELETE FROM k_dt WHERE v % 4 = 0")
        _catch_up(pipeline, maria)
    finally:
        pipeline.stop()
    events = read_events(tmp_path / "out.jsonl")
    reads = Counter(e["table"] for e in events if e["op"] == "read" and e["dump_id"] == dump_id)
    assert reads == {"k_bin": 100, "k_dec": 100, "k_dt": 100}
    keys = {e["table"]: e["key"][0] for e in events if e["op"] == "read"}
    assert len(keys["k_bin"]) == 32 and keys["k_dec"] == "25.00"
    assert keys["k_dt"].startswith("2024-01-01 00:01:40.000700")
    assert replayed(events) == maria.source_rows(tables)
