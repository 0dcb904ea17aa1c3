"""The ``dblog`` command: ``run`` and ``check`` here; the control commands (``dump``, ``dumps``,
``pause``, ``resume``, ``cancel``, ``set``, ``status``) talk to the running instance's API
(:mod:`dblog.app.cli_control`)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
from typing import Any, Protocol

from dblog.app import cli_retire
from dblog.app.cli_control import add_commands, run_command
from dblog.app.config import PipelineConfig, load_config
from dblog.errors import DblogError
from dblog.spi import Control


class _Stoppable(Control, Protocol):
    def request_stop(self) -> None: ...

    def run(self) -> Any: ...


def _run(config: PipelineConfig) -> int:
    from dblog.app.pipeline import Pipeline

    runner: _Stoppable
    if config.state.type == "zookeeper":
        from dblog.ha.runner import HaInstance

        runner = HaInstance(config)
    else:
        runner = Pipeline.from_config(config)
    with _serving(config, runner):
        return _run_until_signal(runner)


@contextlib.contextmanager
def _serving(config: PipelineConfig, control: Control) -> Any:
    """Serve the HTTP API (``api.enabled``) while the runner runs."""
    if not config.api.enabled:
        yield None
        return
    from dblog.api.discovery import directory_for, instance_id
    from dblog.api.lagbytes import lag_bytes_probe
    from dblog.api.server import ApiServer

    instance = instance_id(config)
    probe = lag_bytes_probe(config.source, control.status)
    server = ApiServer(control, config.api, directory=directory_for(config, instance),
                       instance=instance, lag_bytes=probe).start()
    try:
        yield server
    finally:
        server.stop()
        if probe is not None:
            probe.close()


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
    from dblog.app.checks import findings, initial_dump_findings, setup_findings
    from dblog.app.plugins import build_connector, build_output

    found = setup_findings(config)
    connector = build_connector(config.source, config.name)
    try:
        outputs = [build_output(raw, i) for i, raw in enumerate(config.outputs)]
        found += findings(connector, outputs)
        found += initial_dump_findings(
            connector, [None if d.tables is None else d.tables for d in config.initial_dumps],
            config.engine.initial_dumps_skip_unavailable)
    finally:
        connector.close()
    for finding in found:
        print(f"{finding.level.upper():8} {finding.message}")
        if finding.fix:
            print(f"         fix: {finding.fix}")
    if not found:
        print("OK       no problems found")
    return 1 if any(f.level == "error" for f in found) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dblog", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("run", "run the pipeline (an HA candidate with ZooKeeper state)"),
                       ("check", "assess the source and what the outputs need of it")):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("--config", "-c", required=True, help="YAML configuration file")
    add_commands(sub)
    cli_retire.add_command(sub)
    apply = sub.add_parser("spark-apply", help="apply dblog's Kafka topics to Delta tables "
                           "with Spark Structured Streaming (docs/outputs/spark.md)")
    apply.add_argument("--config", "-c", required=True, help="the job's YAML file")
    args = parser.parse_args(argv)
    if args.command == "spark-apply":
        from dblog.outputs.spark_apply import main as spark_apply

        logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: "
                            "%(message)s")
        return spark_apply(args.config)
    try:
        config = load_config(args.config)
        logging.basicConfig(level=config.log_level,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per API call
        if args.command == "run":
            return _run(config)
        if args.command == "check":
            return _check(config)
        if args.command == "retire":
            return cli_retire.retire(config, args.yes)
        return run_command(config, args)
    except DblogError as exc:
        print(f"dblog: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
