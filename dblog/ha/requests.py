"""Durable dump requests: a znode queue any instance (or the CLI) appends to; the leader moves
each request into the pipeline state and only then deletes it.

Each request carries the dump id it will have, so a leader that dies between storing the dump
and deleting the request does not queue it twice: its successor finds the id in the state.

A queued request is data any writer may have put there: its shape is checked when it is
queued and again when it is served, and a node that is not a request at all (not JSON, no
id) is moved to ``rejected`` with the reason, like a request the engine refuses. Nothing in
the queue can stop the instance that serves it, nor block the requests behind it.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from concurrent.futures import Future
from contextlib import suppress
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from dblog.core.dumps import new_dump_id
from dblog.core.requestcheck import check_range, check_request, shown
from dblog.errors import DumpRequestError
from dblog.ha.zk import ZkPaths, classified
from dblog.spi import DumpRequest

log = logging.getLogger("dblog.ha")

Submit = Callable[[dict[str, Any]], "Future[str]"]
_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def queue_dump(client: KazooClient, paths: ZkPaths, tables: list[str] | None = None, *,
               table: str | None = None, keys: list[list[Any]] | None = None,
               dump_id: str | None = None) -> str:
    """Store a dump request durably; return the id the dump will have (``dump_id``, or a new
    one). A request of the wrong shape is refused here (DumpRequestError), before anything
    is stored."""
    checked = check_request(tables, table, keys)
    request = {
        "id": _new_id(dump_id),
        "tables": None if checked.tables is None else [str(t) for t in checked.tables],
        "table": None if checked.table is None else str(checked.table),
        "keys": None if checked.keys is None else [list(k) for k in checked.keys],
        "queued_at": time.time(),
    }
    return _queued(client, paths, request)


def queue_range_dump(client: KazooClient, paths: ZkPaths, table: object,
                     key_from: list[Any] | None, key_to: list[Any] | None,
                     dump_id: str | None = None) -> str:
    """Store a dump request of a key range of ``table`` (both ends included, None: open),
    as :func:`queue_dump`: ``{"table": ..., "range": {"from": [...], "to": [...]}}``."""
    checked = check_range(table, key_from, key_to)
    request = {
        "id": _new_id(dump_id), "tables": None, "table": str(checked.table), "keys": None,
        "range": {"from": None if checked.key_from is None else list(checked.key_from),
                  "to": None if checked.key_to is None else list(checked.key_to)},
        "queued_at": time.time(),
    }
    return _queued(client, paths, request)


def _new_id(dump_id: str | None) -> str:
    """``dump_id`` (the caller's, making the request idempotent) if it is a valid id, or a
    new one."""
    if dump_id is None:
        return new_dump_id()
    if not _ID.match(dump_id):
        raise DumpRequestError(f"a dump id is 1-64 of A-Z a-z 0-9 _ -, got {shown(dump_id)}",
                               fix="leave dump_id out, or choose one of those characters")
    return dump_id


def _queued(client: KazooClient, paths: ZkPaths, request: dict[str, Any]) -> str:
    with classified("queueing a dump request"):
        client.ensure_path(paths.requests)
        client.create(f"{paths.requests}/req-", json.dumps(request).encode(), sequence=True)
    return str(request["id"])


def _nodes(client: KazooClient, paths: ZkPaths) -> list[tuple[str, bytes]]:
    """The queued nodes in the order they were made, as (znode path, content)."""
    out = []
    with classified("reading dump requests"):
        for child in sorted(client.get_children(paths.requests)):
            path = f"{paths.requests}/{child}"
            try:
                raw, _ = client.get(path)
            except NoNodeError:
                continue
            out.append((path, raw))
    return out


def decode(raw: bytes) -> dict[str, Any]:
    """A queued request with a valid id, or DumpRequestError saying why the node is not one
    (its shape is checked by :func:`checked`)."""
    try:
        request = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DumpRequestError(f"not a dump request (not JSON: {exc})") from exc
    if not isinstance(request, dict):
        raise DumpRequestError(f"not a dump request (a JSON {type(request).__name__})")
    dump_id = request.get("id")
    if not isinstance(dump_id, str) or not _ID.match(dump_id):
        raise DumpRequestError(f"dump request without a valid id ({shown(dump_id)})")
    return request


def checked(request: dict[str, Any]) -> dict[str, Any]:
    """``request`` if its shape is right (DumpRequestError otherwise)."""
    ranged = request.get("range")
    if ranged is None:
        check_request(request.get("tables"), request.get("table"), request.get("keys"))
        return request
    if not isinstance(ranged, dict) or request.get("tables") is not None \
            or request.get("keys") is not None:
        raise DumpRequestError(f"a key range must be {{'from': [...], 'to': [...]}} with "
                               f"one table and no tables or keys, got {shown(ranged)}")
    check_range(request.get("table"), ranged.get("from"), ranged.get("to"))
    return request


def dump_request(request: dict[str, Any]) -> DumpRequest:
    """The engine's request for a queued one (checked by :func:`checked`); its id is the
    dump's, so serving it twice queues one dump."""
    ranged = request.get("range")
    if ranged is not None:
        return DumpRequest.key_range(request["table"], ranged.get("from"), ranged.get("to"),
                                     request["id"])
    return DumpRequest(request.get("tables"), request.get("table"), request.get("keys"),
                       request["id"])


def pending(client: KazooClient, paths: ZkPaths) -> list[tuple[str, dict[str, Any]]]:
    """Queued requests in the order they were made, as (znode path, request); nodes that
    are not valid requests are left out (the leader moves them to ``rejected``)."""
    out = []
    for path, raw in _nodes(client, paths):
        try:
            out.append((path, checked(decode(raw))))
        except DumpRequestError:
            continue
    return out


def rejected(client: KazooClient, paths: ZkPaths) -> dict[str, str]:
    """Requests the leader refused: dump id (or node name) -> reason."""
    out = {}
    with classified("reading rejected dump requests"):
        for child in client.get_children(paths.rejected):
            raw, _ = client.get(f"{paths.rejected}/{child}")
            out[child] = raw.decode("utf-8", errors="replace")
    return out


def _reject(client: KazooClient, paths: ZkPaths, path: str, name: str, reason: str) -> None:
    """Move the node at ``path`` to ``rejected/name`` with the reason (replacing an older
    rejection of the same name), in one transaction."""
    log.error("dump request %s rejected: %s", name, reason)
    target = f"{paths.rejected}/{name}"
    with classified("rejecting a dump request"):
        client.ensure_path(paths.rejected)
        tx = client.transaction()
        if client.exists(target) is not None:
            tx.delete(target)
        tx.create(target, reason.encode()[:65536])
        tx.delete(path)
        failures = [r for r in tx.commit() if isinstance(r, Exception)]
    if failures:
        raise DumpRequestError(f"could not reject dump request {name}: {failures[0]!r}")


def consume(client: KazooClient, paths: ZkPaths, submit: Submit, timeout: float = 60.0) -> int:
    """Hand every queued request to ``submit`` (the engine); delete those it stored or refused.
    Returns how many were handled. A request whose answer does not come (the engine is busy
    or stopped) stays queued for the next call, or the next leader."""
    handled = 0
    for path, raw in _nodes(client, paths):
        name = path.rsplit("/", 1)[-1]
        try:
            request = decode(raw)
            name = request["id"]
            dump_id = submit(checked(request)).result(timeout)
        except DumpRequestError as exc:
            _reject(client, paths, path, name, exc.message)
            handled += 1
            continue
        log.info("dump request %s stored as dump %s", path, dump_id)
        with classified("deleting a served dump request"), suppress(NoNodeError):
            client.delete(path)  # (a predecessor that stored it too may have deleted it)
        handled += 1
    return handled
