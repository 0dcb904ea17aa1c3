"""The temporal conversions of the changelog formats: day arithmetic against Python's calendar,
the fast (datetime) and exact paths agreeing, BC dates and years past 9999, intervals."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dblog.formats import temporal
from dblog.formats.debezium_values import parse_array

_EPOCH = datetime.datetime(1970, 1, 1)


@given(st.dates())
def test_days_match_pythons_calendar(day: datetime.date) -> None:
    days = (day - _EPOCH.date()).days
    assert temporal.days_from_civil(day.year, day.month, day.day) == days
    assert temporal.civil_from_days(days) == (day.year, day.month, day.day)
    assert temporal.epoch_days(day.isoformat()) == days


@given(st.datetimes(), st.integers(-14 * 60, 14 * 60), st.booleans(), st.integers(0, 6))
def test_the_fast_and_exact_paths_agree(moment: datetime.datetime, offset_minutes: int,
                                        zoned: bool, digits: int) -> None:
    text = moment.isoformat(sep=" ")
    if zoned:
        sign = "+" if offset_minutes >= 0 else "-"
        text += f"{sign}{abs(offset_minutes) // 60:02d}:{abs(offset_minutes) % 60:02d}"
    micros = temporal.epoch_micros(text)
    assert micros == temporal._epoch_micros_exact(text)
    expected = moment - datetime.timedelta(minutes=offset_minutes if zoned else 0)
    assert micros == (expected - _EPOCH) // datetime.timedelta(microseconds=1)
    for precision in (None, digits):
        assert temporal.zoned_iso(text, precision) == temporal.iso_timestamp(micros, precision)


def test_bc_dates_and_far_years_convert_exactly() -> None:
    first_ad = temporal.epoch_days("0001-01-01")
    assert temporal.epoch_days("0001-12-31 BC") == first_ad - 1
    assert temporal.epoch_days("0001-01-01 BC") == first_ad - 366  # 1 BC is a leap year
    assert temporal.zoned_iso("0044-03-15 12:00:00+00 BC", None) == "-0043-03-15T12:00:00Z"
    assert temporal.zoned_iso("12345-01-01 00:00:00+00", 3) == "+12345-01-01T00:00:00.000Z"
    assert temporal.epoch_days("infinity") == 2**31 - 1
    with pytest.raises(ValueError):
        temporal.epoch_days("2024-13")


def test_times_and_intervals() -> None:
    assert temporal.time_micros("-838:59:59") == -3020399 * 10**6
    assert temporal.time_micros("24:00:00") == 86_400 * 10**6
    assert temporal.iso_time(temporal.utc_time_micros("01:30:00.5-02:30"), None) == \
        "04:00:00.5Z"
    assert temporal.interval_iso("1 year 2 mons -3 days +04:05:06.78") == "P1Y2M-3DT4H5M6.78S"
    assert temporal.interval_iso("-00:00:01.5") == "P0Y0M0DT0H0M-1.5S"
    assert temporal.interval_iso("P1Y") == "P1Y"
    with pytest.raises(ValueError):
        temporal.interval_iso("1-2 3 4:05:06")  # IntervalStyle sql_standard


def test_array_literals_parse_quotes_nulls_and_dimensions() -> None:
    assert parse_array('{1,NULL,"NULL","a \\"b\\"",""}') == ["1", None, "NULL", 'a "b"', ""]
    assert parse_array("{{1,2},{3,4}}") == [["1", "2"], ["3", "4"]]
    assert parse_array("[0:1]={7,8}") == ["7", "8"]
    assert parse_array("{}") == []
    with pytest.raises(ValueError):
        parse_array("{1,2}x")
