"""dblog.runtime.wakeup: the self-pipe that cuts a log reader's select short."""

from __future__ import annotations

import select
import threading
import time

from dblog.runtime.wakeup import Wakeup


def _readable(wake: Wakeup, timeout: float) -> bool:
    return bool(select.select([wake], [], [], timeout)[0])


def test_set_makes_it_readable_until_cleared() -> None:
    wake = Wakeup()
    try:
        assert not _readable(wake, 0)
        wake.set()
        wake.set()  # many sets read as one
        assert _readable(wake, 0)
        assert wake.clear() is True
        assert not _readable(wake, 0)
        assert wake.clear() is False
    finally:
        wake.close()


def test_set_from_another_thread_ends_a_waiting_select() -> None:
    wake = Wakeup()
    try:
        timer = threading.Timer(0.05, wake.set)
        started = time.monotonic()
        timer.start()
        assert _readable(wake, 5.0)
        assert time.monotonic() - started < 2.0
        timer.join()
    finally:
        wake.close()


def test_set_after_close_is_ignored() -> None:
    wake = Wakeup()
    wake.close()
    wake.set()  # no error, and no write to a file descriptor number reused since
    assert wake.clear() is False


def test_many_sets_never_block_the_caller() -> None:
    wake = Wakeup()
    try:
        for _ in range(200_000):  # far beyond a pipe's buffer
            wake.set()
        assert wake.clear() is True
    finally:
        wake.close()
