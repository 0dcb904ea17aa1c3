"""The binlog distance behind the server's head (connectors/mysql/lag.py) and the locations
MySQL and MariaDB positions carry for it."""

from __future__ import annotations

from dblog.connectors.mysql.lag import binlog_distance
from dblog.connectors.mysql.positions import BinlogPosition, MariadbGtid, MysqlGtidSet
from dblog.core.positions import decode_position
from dblog.spi import LocatedPosition

LOGS = [("bin.000007", 1_000), ("bin.000008", 5_000), ("bin.000009", 700), ("bin.000010", 256)]


def test_distance_within_the_last_file() -> None:
    assert binlog_distance(LOGS, "bin.000010", 256) == 0
    assert binlog_distance(LOGS, "bin.000010", 200) == 56


def test_distance_across_files_adds_the_rest_of_the_file_and_every_later_one() -> None:
    assert binlog_distance(LOGS, "bin.000009", 300) == 400 + 256
    assert binlog_distance(LOGS, "bin.000008", 1_234) == (5_000 - 1_234) + 700 + 256
    assert binlog_distance(LOGS, "bin.000007", 4) == 996 + 5_000 + 700 + 256


def test_a_purged_file_is_unknown_and_an_offset_past_the_end_counts_nothing_of_its_file() -> None:
    assert binlog_distance(LOGS, "bin.000006", 100) is None
    assert binlog_distance([], "bin.000006", 100) is None
    assert binlog_distance(LOGS, "bin.000009", 900) == 256


def test_gtid_positions_carry_a_location_outside_their_identity_and_stored_form() -> None:
    gtid = MariadbGtid.parse("0-1-5,1-2-9")
    located = gtid.at("bin.000008", 1_234)
    assert located.log_location == ("bin.000008", 1_234) and gtid.log_location is None
    assert located == gtid and hash(located) == hash(gtid) and not located < gtid
    assert located.encode() == gtid.encode() == "mariadb-gtid:0-1-5,1-2-9"
    assert str(located) == "0-1-5,1-2-9" and repr(located) == repr(gtid)
    assert decode_position(located.encode()) == gtid  # the state store does not keep it
    assert isinstance(located, LocatedPosition) and located.with_gtid(0, 1, 6).log_location is None
    sets = MysqlGtidSet.parse("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5")
    assert sets.at("bin.000002", 99).log_location == ("bin.000002", 99)
    assert sets.at("bin.000002", 99) == sets


def test_a_binlog_position_is_its_own_location() -> None:
    position = BinlogPosition("bin.000003", 4_567)
    assert isinstance(position, LocatedPosition)
    assert position.log_location == ("bin.000003", 4_567)
