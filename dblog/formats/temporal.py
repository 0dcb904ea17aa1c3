"""Canonical temporal text to the numbers and ISO-8601 strings the changelog formats carry.

The canonical forms (docs/formats.md) are PostgreSQL's ISO output (``2024-01-02 03:04:05.5``,
``... BC``, ``infinity``, timestamptz with ``+00``) and the MySQL connector's forms
(``2024-01-02 03:04:05.500000``, TIME up to ``838:59:59``). Dates use the proleptic Gregorian
calendar with astronomical years (1 BC is year 0) through day arithmetic rather than Python's
``datetime``, so BC dates and PostgreSQL's years past 9999 convert exactly instead of failing.
"""

from __future__ import annotations

import datetime
import re
from decimal import Decimal

INT32_MAX, INT32_MIN = 2**31 - 1, -(2**31)
INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)
MICROS_PER_DAY = 86_400_000_000
_EPOCH = datetime.datetime(1970, 1, 1)
_EPOCH_UTC = _EPOCH.replace(tzinfo=datetime.timezone.utc)
_MICROSECOND = datetime.timedelta(microseconds=1)

_DATE = r"(\d{4,})-(\d{2})-(\d{2})"
_TIME = r"(\d{2,}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
_OFFSET = r"(?:([+-])(\d{2})(?::?(\d{2}))?(?::?(\d{2}))?)?"
_DATE_RE = re.compile(rf"^{_DATE}( BC)?$")
_TIMESTAMP_RE = re.compile(rf"^{_DATE}[ T]{_TIME}{_OFFSET}( BC)?$")
_TIME_RE = re.compile(rf"^(-?){_TIME}{_OFFSET}$")


def days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (astronomical year)."""
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def civil_from_days(days: int) -> tuple[int, int, int]:
    """The inverse of :func:`days_from_civil`."""
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + (3 if mp < 10 else -9)
    return yoe + era * 400 + (month <= 2), month, day


def _year(text: str, bc: str | None) -> int:
    return 1 - int(text) if bc else int(text)


def _fraction_micros(text: str | None) -> int:
    return int((text or "").ljust(6, "0")[:6])


def _offset_seconds(sign: str | None, hours: str | None, minutes: str | None,
                    seconds: str | None) -> int:
    if sign is None or hours is None:
        return 0
    total = int(hours) * 3600 + int(minutes or 0) * 60 + int(seconds or 0)
    return -total if sign == "-" else total


def epoch_days(text: str) -> int:
    """``2024-02-29`` (or ``0044-03-15 BC``) as days since the epoch; PostgreSQL's
    ``infinity``/``-infinity`` as the int32 extremes."""
    if text == "infinity":
        return INT32_MAX
    if text == "-infinity":
        return INT32_MIN
    match = _DATE_RE.match(text)
    if match is None:
        raise ValueError(f"not a date: {text!r}")
    year, month, day, bc = match.groups()
    return days_from_civil(_year(year, bc), int(month), int(day))


def epoch_micros(text: str) -> int:
    """A timestamp as microseconds since the epoch: with an offset (timestamptz) the instant,
    without one the wall-clock time read as UTC (what Debezium does for TIMESTAMP/DATETIME).
    Python's own ISO parser takes the common forms; BC dates and years past 9999 take the
    slower exact path."""
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        return _epoch_micros_exact(text)
    return (moment - (_EPOCH if moment.tzinfo is None else _EPOCH_UTC)) // _MICROSECOND


def _epoch_micros_exact(text: str) -> int:
    match = _TIMESTAMP_RE.match(text)
    if match is None:
        raise ValueError(f"not a timestamp: {text!r}")
    year, month, day, hour, minute, second, fraction, *offset, bc = match.groups()
    days = days_from_civil(_year(year, bc), int(month), int(day))
    seconds = int(hour) * 3600 + int(minute) * 60 + int(second) - _offset_seconds(*offset)
    return (days * 86_400 + seconds) * 1_000_000 + _fraction_micros(fraction)


def zoned_iso(text: str, digits: int | None) -> str:
    """A timestamp (with an offset: the instant; without: read as UTC) as
    ``YYYY-MM-DDTHH:MM:SS[.f]Z``; ``iso_timestamp(epoch_micros(text), digits)`` by a faster
    path for the years Python's datetime covers."""
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        return iso_timestamp(_epoch_micros_exact(text), digits)
    if moment.tzinfo is not None:
        moment = moment.astimezone(datetime.timezone.utc)
    return (f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T{moment.hour:02d}:"
            f"{moment.minute:02d}:{moment.second:02d}"
            f"{_fraction_text(moment.microsecond, digits)}Z")


def time_micros(text: str) -> int:
    """``[-]HH:MM:SS[.ffffff]`` (hours may pass 24: MySQL TIME, PostgreSQL's ``24:00:00``) as
    signed microseconds; an offset, if any, is ignored (see :func:`utc_time_micros`)."""
    match = _TIME_RE.match(text)
    if match is None:
        raise ValueError(f"not a time: {text!r}")
    sign, hour, minute, second, fraction = match.groups()[:5]
    micros = (int(hour) * 3600 + int(minute) * 60 + int(second)) * 1_000_000 \
        + _fraction_micros(fraction)
    return -micros if sign else micros


def utc_time_micros(text: str) -> int:
    """A ``timetz`` value (``10:00:00+02``) moved to UTC, within one day."""
    match = _TIME_RE.match(text)
    if match is None:
        raise ValueError(f"not a time with time zone: {text!r}")
    offset = _offset_seconds(*match.groups()[5:])
    return (time_micros(text) - offset * 1_000_000) % MICROS_PER_DAY


def _fraction_text(micros: int, digits: int | None) -> str:
    """``.ffffff`` cut to ``digits`` (a column's precision; the cut digits are zero), or with
    trailing zeros dropped when the precision is unknown (``None``)."""
    text = f"{micros:06d}"
    text = text.rstrip("0") if digits is None else text[:digits]
    return f".{text}" if text else ""


def iso_timestamp(micros: int, digits: int | None) -> str:
    """``YYYY-MM-DDTHH:MM:SS[.f]Z`` (java.time's ISO form: years past 9999 get a ``+``, years
    before 1 a ``-``)."""
    days, rest = divmod(micros, MICROS_PER_DAY)
    year, month, day = civil_from_days(days)
    seconds, fraction = divmod(rest, 1_000_000)
    if year > 9999:
        year_text = f"+{year}"
    elif year < 0:
        year_text = f"-{-year:04d}"
    else:
        year_text = f"{year:04d}"
    return (f"{year_text}-{month:02d}-{day:02d}T{seconds // 3600:02d}:{seconds // 60 % 60:02d}:"
            f"{seconds % 60:02d}{_fraction_text(fraction, digits)}Z")


def iso_time(micros: int, digits: int | None) -> str:
    """``HH:MM:SS[.f]Z`` of a time of day in UTC."""
    seconds, fraction = divmod(micros, 1_000_000)
    return (f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
            f"{_fraction_text(fraction, digits)}Z")


def interval_iso(text: str) -> str:
    """PostgreSQL's ``postgres`` IntervalStyle (``1 year 2 mons -3 days +04:05:06.5``) as
    ``P<y>Y<m>M<d>DT<h>H<m>M<s>S``, each part signed as PostgreSQL keeps it (months and days
    are not folded into seconds: their length varies)."""
    if text.lstrip("-").startswith("P"):
        return text  # IntervalStyle iso_8601 already
    parts = {"year": 0, "mon": 0, "day": 0}
    hours = minutes = 0
    seconds = Decimal(0)
    tokens = text.split()
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if ":" in token:
            negative = token.startswith("-")
            h, m, s = token.lstrip("+-").split(":")
            sign = -1 if negative else 1
            hours, minutes, seconds = sign * int(h), sign * int(m), sign * Decimal(s)
            index += 1
            continue
        if index + 1 >= len(tokens):
            raise ValueError(f"not a postgres-style interval: {text!r}")
        unit = tokens[index + 1].rstrip("s")
        if unit not in parts:
            raise ValueError(f"not a postgres-style interval: {text!r}")
        parts[unit] = int(token)
        index += 2
    second_text = format(seconds.normalize(), "f") if seconds else "0"
    return (f"P{parts['year']}Y{parts['mon']}M{parts['day']}DT{hours}H{minutes}M"
            f"{second_text}S")
