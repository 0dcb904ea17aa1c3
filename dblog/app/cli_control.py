"""The control commands of ``dblog`` (``dump``, ``dumps``, ``pause``, ``resume``, ``cancel``,
``set``, ``status``): each finds the running instance through the state store and talks to its
HTTP API, so they work the same with a state file or with ZooKeeper."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any

from dblog.api.client import ApiClient, ApiRequestError
from dblog.api.discovery import NotRunning
from dblog.app.config import PipelineConfig
from dblog.errors import DblogError

NOT_RUNNING = 3
"""Exit status when no instance runs (as ``systemctl status`` does)."""


def add_commands(sub: Any) -> None:
    """Register the control commands on the ``dblog`` argument parser."""
    def command(name: str, text: str) -> argparse.ArgumentParser:
        cmd: argparse.ArgumentParser = sub.add_parser(name, help=text)
        cmd.add_argument("--config", "-c", required=True, help="YAML configuration file")
        return cmd

    dump = command("dump", "queue a dump (tables, keys of a table, or a key range)")
    dump.add_argument("--table", "-t", action="append", dest="tables",
                      help="table to dump (repeat; default: every captured table)")
    dump.add_argument("--keys", help="keys of the one --table: JSON ([[1],[2]]) or 1,2,3")
    dump.add_argument("--from", dest="key_from", help="first key of a range: JSON or a,b")
    dump.add_argument("--to", dest="key_to", help="last key of a range: JSON or a,b")
    dumps = command("dumps", "list dumps with their progress")
    dumps.add_argument("--watch", "-w", action="store_true",
                       help="draw progress bars until no dump is active")
    dumps.add_argument("--json", action="store_true", help="print JSON")
    for name in ("pause", "resume", "cancel"):
        command(name, f"{name} a dump").add_argument("dump_id")
    knobs = command("set", "change the chunk size and delay of the running engine")
    knobs.add_argument("--chunk-size", type=int)
    knobs.add_argument("--chunk-delay", type=float, dest="chunk_delay_s")
    command("status", "whether the instance runs, its role, lag, position and dumps")


def _values(text: str) -> list[Any]:
    """A key given on the command line: JSON (``[1,"a"]``) or comma-separated values, each
    a JSON scalar where it is one (:func:`_scalar`), else the text itself (``k3``)."""
    if text.lstrip().startswith("["):
        value = json.loads(text)
        if not isinstance(value, list):
            raise DblogError(f"not a key: {text}", fix='write it as JSON, e.g. [1,"a"]')
        return value
    return [_scalar(v.strip()) for v in text.split(",")]


def _scalar(text: str) -> Any:
    """``text`` as a JSON scalar if it is one and JSON writes it back the same way (``9``,
    ``1.5``, ``true``, ``null``, ``"9"``), else as it is: ``007``, ``1e3`` or ``NaN`` stay
    text, so a text key column gets the very characters typed."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if isinstance(value, (list, dict)) or json.dumps(value) != text \
            or (isinstance(value, float) and not math.isfinite(value)):
        return text
    return value


def _dump_body(args: argparse.Namespace) -> dict[str, Any]:
    ranged = args.key_from is not None or args.key_to is not None
    if args.keys is None and not ranged:
        return {"tables": args.tables} if args.tables else {}
    if not args.tables or len(args.tables) != 1:
        raise DblogError("--keys, --from and --to need exactly one --table")
    body: dict[str, Any] = {"table": args.tables[0]}
    if args.keys is not None:
        keys = _values(args.keys)
        body["keys"] = [k if isinstance(k, list) else [k] for k in keys]
    if args.key_from is not None:
        body["from"] = _values(args.key_from)
    if args.key_to is not None:
        body["to"] = _values(args.key_to)
    return body


def run_command(config: PipelineConfig, args: argparse.Namespace) -> int:
    """Run one control command; errors are printed with their fix and give a non-zero exit."""
    if args.command == "status":
        return status(config)
    try:
        client = ApiClient.for_config(config)
    except NotRunning as exc:
        return _failed(exc, NOT_RUNNING)
    try:
        return _dispatch(client, args)
    except NotRunning as exc:
        return _failed(exc, NOT_RUNNING)
    except (ApiRequestError, DblogError, ValueError) as exc:
        return _failed(exc, 2)
    finally:
        client.close()


def _dispatch(client: ApiClient, args: argparse.Namespace) -> int:
    if args.command == "dump":
        view = client.request("POST", "/api/v1/dumps", _dump_body(args))
        _print({"dump_id": view["id"], "state": view["state"], "tables":
                [t["table"] for t in view["tables"]]})
    elif args.command == "dumps":
        return _dumps(client, args)
    elif args.command in ("pause", "resume", "cancel"):
        view = client.request("POST", f"/api/v1/dumps/{args.dump_id}/{args.command}")
        _print({"dump_id": view["id"], "state": view["state"]})
    elif args.command == "set":
        body = {k: v for k, v in (("chunk_size", args.chunk_size),
                                  ("chunk_delay_s", args.chunk_delay_s)) if v is not None}
        _print(client.request("PATCH", "/api/v1/knobs", body))
    return 0


def _failed(exc: Exception, code: int) -> int:
    if isinstance(exc, DblogError):
        print(f"dblog: {exc.message}", file=sys.stderr)
        if exc.fix:
            print(f"  fix: {exc.fix}", file=sys.stderr)
    else:
        print(f"dblog: {exc}", file=sys.stderr)
    return code


def _print(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str))


def status(config: PipelineConfig) -> int:
    """The running instance's status from its API; when none answers, the committed state
    from the store with ``running: false`` (exit status 3)."""
    from dblog.app.cli_state import stored_status

    stored = stored_status(config)
    try:
        client = ApiClient.for_config(config)
        try:
            live = client.request("GET", "/api/v1/status")
        finally:
            client.close()
    except NotRunning as exc:
        _print({**stored, "running": False, "reason": exc.message})
        print(f"dblog: not running: {exc.message}", file=sys.stderr)
        return NOT_RUNNING
    except ApiRequestError as exc:
        return _failed(exc, 2)
    _print({**stored, **{k: v for k, v in live.items() if k != "leader"},
            "api": client.url})
    return 0 if live.get("running") else NOT_RUNNING


def _dumps(client: ApiClient, args: argparse.Namespace) -> int:
    if not args.watch:
        dumps = client.request("GET", "/api/v1/dumps")
        if args.json:
            _print(dumps)
        else:
            from dblog.app.cli_watch import dump_table

            dump_table(dumps)
        return 0
    from dblog.app.cli_watch import watch

    watch(lambda: list(client.request("GET", "/api/v1/dumps")), time.sleep)
    return 0
