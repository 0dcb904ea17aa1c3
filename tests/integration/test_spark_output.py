"""The Spark output against a real PostgreSQL source, real delta-spark and spark-sql-kafka jars
in one local Spark session per module, and the real Kafka broker:

* the central scenario (concurrent writers during a dump) through one Spark output with a
  Delta sink and a Kafka sink: the Delta tables read with Spark (tombstones filtered) equal the
  source, and a ``read_committed`` consumer rebuilds the source from the topics (repeats
  allowed: every copy carries the same position and document);
* a deposed leader resumed after its successor claimed the tables: its MERGE is refused and
  the tables keep the successor's rows;
* bad input (a missing jar, an unreachable master, a Delta table of an incompatible schema):
  each one error with the fix, raised while the output opens, before the engine reads the log.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from dblog.app.pipeline import Pipeline
from dblog.core.model import ChangeEvent, Key, Row, TableId
from dblog.engine import EngineSettings
from dblog.errors import FatalOutputError, LeadershipLost, RetryableOutputError
from dblog.outputs.spark import SparkOutput
from dblog.outputs.sql_kinds import DELETED, from_db, kind_of
from tests.replica_targets import Lookup, source_lookup

from .pgutil import dump_state, wait_until
from .sources import Kit
from .test_kafka_output_pipeline import check_repeats
from .test_kafka_output_support import read_all, rebuild, topics_with_prefix

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration,
              pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning")]


@pytest.fixture()
def pg(pg_dsn: str) -> Kit:
    return Kit("postgres", pg_dsn)


@pytest.fixture()
def lookup(pg: Kit) -> Iterator[Lookup]:
    reader = pg.chunk_reader()
    try:
        yield source_lookup(reader)
    finally:
        reader.close()


def spark_rows(spark: SparkSession, path: Path, lookup: Lookup, table: TableId,
               deleted: bool = False) -> dict[Key, Row]:
    """A Delta table as a Spark reader sees it: ``_dblog_deleted = false`` (or the tombstones),
    in the source's canonical form."""
    info = lookup(table)
    assert info is not None
    kinds = {c.name: kind_of(c.type_name) for c in info.columns}
    frame = spark.read.format("delta").load(str(path / f"{table.schema}.{table.name}"))
    out: dict[Key, Row] = {}
    for record in frame.where(f"{DELETED} = {str(deleted).lower()}").collect():
        raw = record.asDict()
        row = {c: from_db(kind, raw.get(c)) for c, kind in kinds.items()}
        out[tuple(row[k] for k in info.key_columns)] = row
    return out


def source_tables(kit: Kit) -> dict[TableId, dict[Key, Row]]:
    out: dict[TableId, dict[Key, Row]] = {TableId.parse(t): {} for t in kit.tables}
    for (table, key), row in kit.source_rows(kit.tables).items():
        out[TableId(*table)][key] = row
    return out


def _pipeline(kit: Kit, output: SparkOutput, tmp: Path) -> Pipeline:
    settings = EngineSettings(chunk_size=250, flush_interval_s=0.5, heartbeat_interval_s=1)
    return Pipeline(kit.connector("spark", "spark"), [output],
                    state_path=str(tmp / "state.json"), settings=settings)


def _catch_up(pipeline: Pipeline, kit: Kit, timeout: float = 300) -> None:
    target = kit.current_position()

    def caught_up() -> bool:
        position = pipeline.status()["committed_position"]
        return position is not None and kit.parse_position(position) >= target

    wait_until(caught_up, timeout, f"the committed position to reach {target}")


def test_central_scenario_into_delta_and_kafka_through_spark(
        pg: Kit, lookup: Lookup, spark_session: SparkSession, kafka_bootstrap: str,
        tmp_path: Path) -> None:
    pg.create_schema(rows=1000)
    prefix = f"sp{uuid.uuid4().hex[:8]}"
    config = {"type": "spark", "commit_interval_s": 2, "sinks": [
        {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "prefix": prefix},
        {"type": "delta", "path": str(tmp_path / "delta")}]}
    output = SparkOutput(config, tables=lookup, session=spark_session)
    pipeline = _pipeline(pg, output, tmp_path).start(wait_ready=300)
    try:
        with pg.writers(rows=1000, count=3, pause_s=0.02) as writers:
            dump_id = pipeline.dump(pg.tables)
            wait_until(lambda: dump_state(pipeline, dump_id) == "done", 600, "the dump")
            wait_until(lambda: writers.committed > 100, 60, "100 writer transactions")
            # the writers keep writing across several micro-batches
            wait_until(lambda: len(output.batch_seconds) >= 3, 300, "three Spark flushes")
        assert not writers.errors, writers.errors
        _catch_up(pipeline, pg)
    finally:
        pipeline.stop(120)
    expected = source_tables(pg)
    assert sum(map(len, expected.values())) > 1500
    tombstones = 0
    for table, rows in expected.items():
        assert spark_rows(spark_session, tmp_path / "delta", lookup, table) == rows, table
        tombstones += len(spark_rows(spark_session, tmp_path / "delta", lookup, table, True))
    assert tombstones > 0, "no tombstone was kept: the writers' deletes did not reach Delta"

    messages = read_all(kafka_bootstrap, topics_with_prefix(kafka_bootstrap, prefix))
    tables = {tuple(t.split(".", 1)) for t in pg.tables}
    rebuilt = {k: v for k, v in rebuild(messages).items() if k[0] in tables}
    source = pg.source_rows(pg.tables)
    assert rebuilt == source
    check_repeats(messages)
    seqs = {m.seq for m in messages}
    assert seqs and min(seqs) >= 1


def _events(table: TableId, base: int, rows: dict[int, str]) -> list[ChangeEvent]:
    from dblog.connectors.postgres.positions import Lsn
    from dblog.core.model import Op

    events = [ChangeEvent(Op.BEGIN, None, position=Lsn(base))]
    events += [ChangeEvent(Op.INSERT, table, (k,), after={"id": k, "v": v},
                           position=Lsn(base + i)) for i, (k, v) in enumerate(rows.items(), 1)]
    return [*events, ChangeEvent(Op.COMMIT, None, position=Lsn(base + 0x80))]


ITEMS = TableId("public", "items")


def _items_lookup(table: TableId) -> Any:
    from dblog.core.model import ColumnInfo, TableInfo

    return TableInfo(ITEMS, (ColumnInfo("id", "integer"), ColumnInfo("v", "text")), ("id",)) \
        if table == ITEMS else None


def test_a_resumed_deposed_leaders_merge_is_refused(spark_session: SparkSession,
                                                    tmp_path: Path) -> None:
    """Leader 1 writes, freezes with a batch in hand; leader 2 opens (claims the tables) and
    writes newer rows; leader 1 resumes: its MERGE is refused, the table keeps leader 2's
    rows and checkpoint. Then the race inside one commit: leader 3 claims after leader 2
    computed its transaction version but before its MERGE ran; the MERGE is refused too, and
    so is an append (a batch of keys above every stored one) in the same race."""
    config = {"type": "spark", "commit_interval_s": 0,
              "sinks": [{"type": "delta", "path": str(tmp_path / "d")}]}
    seq = iter(range(1, 1000))

    def numbered(events: list[ChangeEvent]) -> list[ChangeEvent]:
        for event in events:
            event.seq = next(seq)
        return events

    def leader(epoch: int) -> SparkOutput:
        out = SparkOutput(config, tables=_items_lookup, session=spark_session)
        out.bind("zombie", epoch)
        return out

    first = leader(1)
    first.open(0)
    first.write(numbered(_events(ITEMS, 0x100, {1: "one", 2: "two"})))
    first.flush()
    first.write(numbered(_events(ITEMS, 0x300, {1: "zombie", 3: "zombie"})))  # frozen here
    second = leader(2)
    second.open(0)
    second.write(numbered(_events(ITEMS, 0x200, {2: "second"})))
    second.write(numbered(_events(ITEMS, 0x400, {4: "second"})))
    assert second.flush() > 0
    with pytest.raises(LeadershipLost):
        first.flush()
    path = tmp_path / "d"
    expected = {(1,): {"id": 1, "v": "one"}, (2,): {"id": 2, "v": "second"},
                (4,): {"id": 4, "v": "second"}}
    assert spark_rows(spark_session, path, _items_lookup, ITEMS) == expected

    third = leader(3)
    second.write(numbered(_events(ITEMS, 0x500, {2: "late", 5: "late"})))  # a stored key: MERGE
    raced = _claim_meanwhile(second, third, "commit")
    with pytest.raises(LeadershipLost):
        second.flush()
    assert raced
    assert spark_rows(spark_session, path, _items_lookup, ITEMS) == expected

    fourth = leader(4)  # the same race on the append path: keys above every stored one
    third.write(numbered(_events(ITEMS, 0x600, {6: "late"})))
    raced = _claim_meanwhile(third, fourth, "commit_blind")
    with pytest.raises(LeadershipLost):
        third.flush()
    assert raced
    assert spark_rows(spark_session, path, _items_lookup, ITEMS) == expected
    with pytest.raises(LeadershipLost):
        leader(1).open(0)


def _claim_meanwhile(writer: SparkOutput, successor: SparkOutput, method: str) -> list[bool]:
    """``successor`` opens (claims every table) after ``writer``'s fence computed its
    transaction version and before the command (``method``: ``commit`` for a MERGE,
    ``commit_blind`` for an append) runs."""
    delta = writer._delta
    assert delta is not None
    real = getattr(delta.fence, method)
    used: list[bool] = []

    def claimed_meanwhile(table: Any, at: int, action: Any) -> Any:
        used.append(True)
        if not successor._open:
            successor.open(0)
        return real(table, at, action)

    setattr(delta.fence, method, claimed_meanwhile)
    return used  # non-empty once the race was run



def test_a_deposed_leaders_checkpoint_is_refused(spark_session: SparkSession,
                                                 tmp_path: Path) -> None:
    """Leader 1's table commits land, then a successor claims before leader 1 writes the
    checkpoint row (first before the row's fence computes its version, then between that and
    the command): each write is refused, and the row stays the one leader 1 wrote before."""
    from dblog.spi import Checkpoint

    config = {"type": "spark", "commit_interval_s": 0,
              "sinks": [{"type": "delta", "path": str(tmp_path / "d"),
                         "checkpoint_interval_s": 0}]}
    seq = iter(range(1, 1000))

    def flushed(out: SparkOutput, base: int, rows: dict[int, str]) -> int:
        events = _events(ITEMS, base, rows)
        for event in events:
            event.seq = next(seq)
        out.write(events)
        position = events[-1].position
        assert position is not None
        state: dict[str, object] = {"seq": events[-1].seq, "dumps": [],
                                    "position": position.encode()}
        out.flush_checkpoint(Checkpoint("ckpt", out.epoch, state))
        return events[-1].seq

    def leader(epoch: int) -> SparkOutput:
        out = SparkOutput(config, tables=_items_lookup, session=spark_session)
        out.bind("ckpt", epoch)
        out.open(0)
        return out

    def stored() -> list[tuple[int, int]]:
        frame = spark_session.read.format("delta").load(str(tmp_path / "d" / "_dblog_checkpoint"))
        return [(r["epoch"], r["seq"]) for r in frame.where("pipeline = 'ckpt'").collect()]

    first = leader(1)
    kept = (1, flushed(first, 0x100, {1: "one"}))
    assert stored() == [kept]
    _claim_before_checkpoint(first, leader, 2, "write")
    with pytest.raises(LeadershipLost):
        flushed(first, 0x200, {2: "zombie"})  # its table commit (an append) lands first
    assert stored() == [kept]

    second = leader(3)
    kept = (3, flushed(second, 0x300, {1: "three"}))  # key 1 is stored: a MERGE
    assert stored() == [kept]
    _claim_before_checkpoint(second, leader, 4, "commit")
    with pytest.raises(LeadershipLost):
        flushed(second, 0x400, {1: "late"})
    assert stored() == [kept]


def _claim_before_checkpoint(writer: SparkOutput, leader: Callable[[int], SparkOutput],
                             epoch: int, where: str) -> None:
    """A leader at ``epoch`` opens (claims every table) when ``writer`` is about to write its
    checkpoint row: ``write`` before the row's fenced commit computes its version, ``commit``
    after it computed the version and before the command runs."""
    delta = writer._delta
    assert delta is not None and delta.checkpoint is not None
    ckpt = delta.checkpoint
    owner: Any = ckpt if where == "write" else delta.fence
    real = getattr(owner, where)

    def claimed_first(*args: Any) -> Any:
        if where == "write" or args[0].location == ckpt.table.location:
            leader(epoch)
        return real(*args)

    setattr(owner, where, claimed_first)

# -- bad input ------------------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_a_missing_jar_is_refused_with_the_fix(tmp_path: Path) -> None:
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "delta-storage-3.3.2.jar").write_bytes(b"")
    output = SparkOutput({"type": "spark", "jars": [str(jars / "delta-storage-3.3.2.jar")],
                          "sinks": [{"type": "delta", "path": str(tmp_path / "d")}]})
    with pytest.raises(FatalOutputError) as raised:
        output.open(0)
    assert "delta-spark_2.12-" in raised.value.message
    assert raised.value.fix is not None and "scripts/setup.sh" in raised.value.fix
    gone = SparkOutput({"type": "spark", "jars": [str(jars / "delta-spark_2.12-3.3.2.jar")],
                        "sinks": [{"type": "delta", "path": str(tmp_path / "d")}]})
    with pytest.raises(FatalOutputError) as missing:
        gone.open(0)
    assert "not found" in missing.value.message and "delta-spark_2.12-3.3.2.jar" in \
        missing.value.message
    assert [f.level for f in gone.check()] == ["ok", "error"]


def test_an_unreachable_master_is_refused_with_the_fix(tmp_path: Path) -> None:
    port = _closed_port()
    output = SparkOutput({"type": "spark", "master": f"spark://127.0.0.1:{port}",
                          "connect_timeout_s": 2,
                          "sinks": [{"type": "delta", "path": str(tmp_path / "d")}]})
    with pytest.raises(FatalOutputError) as raised:
        output.open(0)
    assert f"127.0.0.1:{port}" in raised.value.message and "unreachable" in raised.value.message
    assert raised.value.fix is not None and "local[*]" in raised.value.fix
    assert output.check()[0].level == "error"


def test_an_unreachable_kafka_broker_is_retried_not_fatal(spark_session: SparkSession) -> None:
    """Spark's Kafka sink fails the job with Kafka's TimeoutException (a RetriableException)
    as the cause of a SparkException: a transient fault, which the engine retries."""
    options = {"kafka.max.block.ms": "2000", "kafka.request.timeout.ms": "1500",
               "kafka.delivery.timeout.ms": "2000"}
    output = SparkOutput({"type": "spark", "commit_interval_s": 0,
                          "sinks": [{"type": "kafka", "options": options,
                                     "bootstrap_servers": f"127.0.0.1:{_closed_port()}"}]},
                         tables=_items_lookup, session=spark_session)
    output.bind("unreachable", 1)
    output.open(0)
    events = _events(ITEMS, 0x100, {1: "a"})
    for seq, event in enumerate(events, 1):
        event.seq = seq
    try:
        output.write(events)
        with pytest.raises(RetryableOutputError) as raised:
            output.flush()
    finally:
        output.discard()  # close() would try the buffered events once more
    assert "org.apache.kafka.common.errors.TimeoutException" in raised.value.message


class CountingOutput(SparkOutput):
    written = 0

    def write(self, events: Any) -> None:
        self.written += len(events)
        super().write(events)


def test_an_incompatible_delta_table_stops_the_pipeline_before_any_event(
        pg: Kit, lookup: Lookup, spark_session: SparkSession, tmp_path: Path) -> None:
    pg.create_int_table(20)
    path = tmp_path / "delta" / "public.t_int"
    schema = ("id STRING, ver BIGINT, v STRING, _dblog_major BIGINT, _dblog_minor BIGINT, "
              "_dblog_deleted BOOLEAN")  # a replica's columns, but a text key
    spark_session.createDataFrame([("1", 1, "x", 1, 1, False)], schema).write.format("delta") \
        .save(str(path))
    spark_session.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('dblog.key' = '[\"id\"]')")
    output = CountingOutput({"type": "spark", "sinks": [{"type": "delta",
                                                          "path": str(tmp_path / "delta")}]},
                            tables=lookup, session=spark_session)
    pipeline = _pipeline(pg, output, tmp_path)
    with pytest.raises(FatalOutputError) as raised:
        pipeline.run()
    assert "column id is string" in raised.value.message, raised.value.message
    assert "bigint" in raised.value.message
    assert raised.value.fix is not None and "delete the table" in raised.value.fix
    assert output.written == 0

