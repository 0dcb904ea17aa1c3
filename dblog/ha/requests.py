"""Durable dump requests: a znode queue any instance (or the CLI) appends to; the leader moves
each request into the pipeline state and only then deletes it.

Each request carries the dump id it will have, so a leader that dies between storing the dump
and deleting the request does not queue it twice: its successor finds the id in the state.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from dblog.core.dumps import new_dump_id
from dblog.errors import DumpRequestError
from dblog.ha.zk import ZkPaths, classified

log = logging.getLogger("dblog.ha")

Submit = Callable[[dict[str, Any]], "Future[str]"]


def queue_dump(client: KazooClient, paths: ZkPaths, tables: list[str] | None = None, *,
               table: str | None = None, keys: list[list[Any]] | None = None) -> str:
    """Store a dump request durably; return the id the dump will have."""
    if keys is not None and table is None:
        raise DumpRequestError("a dump of primary keys needs the table they belong to")
    request = {"id": new_dump_id(), "tables": tables, "table": table, "keys": keys,
               "queued_at": time.time()}
    with classified("queueing a dump request"):
        client.ensure_path(paths.requests)
        client.create(f"{paths.requests}/req-", json.dumps(request).encode(), sequence=True)
    return str(request["id"])


def pending(client: KazooClient, paths: ZkPaths) -> list[tuple[str, dict[str, Any]]]:
    """Queued requests in the order they were made, as (znode path, request)."""
    out = []
    with classified("reading dump requests"):
        for child in sorted(client.get_children(paths.requests)):
            path = f"{paths.requests}/{child}"
            try:
                raw, _ = client.get(path)
            except NoNodeError:
                continue
            out.append((path, json.loads(raw.decode("utf-8"))))
    return out


def rejected(client: KazooClient, paths: ZkPaths) -> dict[str, str]:
    """Requests the leader refused: dump id -> reason."""
    out = {}
    with classified("reading rejected dump requests"):
        for child in client.get_children(paths.rejected):
            raw, _ = client.get(f"{paths.rejected}/{child}")
            out[child] = raw.decode("utf-8")
    return out


def consume(client: KazooClient, paths: ZkPaths, submit: Submit, timeout: float = 60.0) -> int:
    """Hand every queued request to ``submit`` (the engine); delete those it stored or refused.
    Returns how many were handled."""
    handled = 0
    for path, request in pending(client, paths):
        try:
            dump_id = submit(request).result(timeout)
            log.info("dump request %s stored as dump %s", path, dump_id)
        except DumpRequestError as exc:
            log.error("dump request %s rejected: %s", request.get("id"), exc)
            with classified("rejecting a dump request"):
                tx = client.transaction()
                tx.create(f"{paths.rejected}/{request['id']}", str(exc.message).encode())
                tx.delete(path)
                tx.commit()
            handled += 1
            continue
        with classified("deleting a served dump request"):
            client.delete(path)
        handled += 1
    return handled
