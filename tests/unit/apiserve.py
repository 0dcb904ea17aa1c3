"""Serving a control's API on a free loopback port for unit tests (no tests here): the
app as ``dblog run`` serves it, through uvicorn, with an httpx client."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from dblog.api.config import ApiConfig
from dblog.api.server import ApiServer
from dblog.spi import Control


@contextmanager
def served(control: Control, timeout_s: float = 5.0) -> Iterator[httpx.Client]:
    """A client of ``control``'s API, served until the block ends."""
    server = ApiServer(control, ApiConfig(port=0, request_timeout_s=timeout_s)).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            yield client
    finally:
        server.stop()
