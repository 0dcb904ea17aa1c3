"""``dblog retire``: remove what dblog created in the source for this pipeline (its slot, its
watermark row, the watermark table once unused), after a confirmation, so a pipeline can be
deleted cleanly. The state (file or ZooKeeper) and the outputs are left alone."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from dblog.app.config import PipelineConfig
from dblog.errors import ConfigError
from dblog.spi.source import RetirableSource


def add_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cmd = sub.add_parser("retire", help="remove the slot and watermark objects of this pipeline")
    cmd.add_argument("--config", "-c", required=True, help="YAML configuration file")
    cmd.add_argument("--yes", action="store_true", help="do not ask for confirmation")


def retire(config: PipelineConfig, yes: bool, stdin: TextIO = sys.stdin) -> int:
    from dblog.app.plugins import build_connector

    connector = build_connector(config.source, config.name)
    try:
        if not isinstance(connector, RetirableSource):
            raise ConfigError(f"the {config.source.get('type')} source cannot retire its objects",
                              fix="remove them by hand (see the source's docs)")
        found = connector.retired()
        if not found:
            print("nothing to remove")
            return 0
        print("this removes, in the source:\n" + "\n".join(f"  - {f}" for f in found))
        if not yes and not _confirmed(config.name, stdin):
            print("not confirmed: nothing removed")
            return 1
        for gone in connector.retire():
            print(f"removed {gone}")
        print(f"the state ({config.state.type}) and the outputs are left as they are")
        return 0
    finally:
        connector.close()


def _confirmed(name: str, stdin: TextIO) -> bool:
    print(f"type the pipeline name ({name}) to confirm: ", end="", flush=True)
    return stdin.readline().strip() == name
