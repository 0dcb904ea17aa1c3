"""The ``dblog`` command: ``run``, ``check``, ``status``, ``dump``."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from typing import Any, Protocol

from dblog.app.config import PipelineConfig, load_config
from dblog.errors import ConfigError, DblogError
from dblog.state import FileStateStore, state_from_json


class _Stoppable(Protocol):
    def request_stop(self) -> None: ...

    def run(self) -> Any: ...


def _run(config: PipelineConfig) -> int:
    from dblog.app.pipeline import Pipeline

    if config.state.type == "zookeeper":
        from dblog.ha.runner import HaInstance

        return _run_until_signal(HaInstance(config))
    return _run_until_signal(Pipeline.from_config(config))


def _run_until_signal(runner: _Stoppable) -> int:
    """Run a pipeline or an HA candidate; SIGTERM and SIGINT stop it after the current batch."""

    def stop(signum: int, _frame: Any) -> None:
        logging.getLogger("dblog").info("signal %d: stopping after the current batch", signum)
        runner.request_stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    runner.run()
    return 0


def _check(config: PipelineConfig) -> int:
    from dblog.app.plugins import build_connector

    connector = build_connector(config.source, config.name)
    findings = connector.check()
    for finding in findings:
        print(f"{finding.level.upper():8} {finding.message}")
        if finding.fix:
            print(f"         fix: {finding.fix}")
    if not findings:
        print("OK       no problems found")
    return 1 if any(f.level == "error" for f in findings) else 0


def _status(config: PipelineConfig) -> int:
    if config.state.type == "zookeeper":
        from dblog.ha.status import ha_status

        print(json.dumps(ha_status(config), indent=2))
        return 0
    stored = FileStateStore(config.state.path).load()
    if stored is None:
        print(json.dumps({"state": None, "note": f"no state at {config.state.path}"}))
        return 0
    state = state_from_json(stored.data)
    print(json.dumps({
        "version": stored.version,
        "committed_position": None if state.position is None else str(state.position),
        "committed_seq": state.seq,
        "dumps": [{"id": d.id, "state": d.state.value, "rows": d.rows, "chunks": d.chunks,
                   "error": d.error} for d in state.dumps.dumps if not d.internal],
    }, indent=2))
    return 0


def _dump(config: PipelineConfig, tables: list[str] | None) -> int:
    if config.state.type != "zookeeper":
        raise ConfigError("dblog dump queues requests in ZooKeeper: it needs state.type: "
                          "zookeeper", fix="embedded pipelines call Pipeline.dump()")
    from dblog.ha.status import queue_dump

    print(json.dumps({"dump_id": queue_dump(config, tables), "state": "requested"}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dblog", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("run", "run the pipeline (an HA candidate with ZooKeeper state)"),
                       ("check", "assess the source"),
                       ("status", "show the committed state (and the leader, with ZooKeeper)"),
                       ("dump", "queue a dump durably (ZooKeeper state; served by the leader)")):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("--config", "-c", required=True, help="YAML configuration file")
        if name == "dump":
            cmd.add_argument("--table", "-t", action="append", dest="tables",
                             help="table to dump (repeat; default: every captured table)")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        logging.basicConfig(level=config.log_level,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        if args.command == "dump":
            return _dump(config, args.tables)
        handler = {"run": _run, "check": _check, "status": _status}[args.command]
        return handler(config)
    except DblogError as exc:
        print(f"dblog: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
