"""The capture process of the replica crash test (no tests here): a pipeline from a source
(PostgreSQL or MariaDB) into one replica output, with an initial dump, run until SIGTERM. The
output gets the source's table metadata from the engine, as from a YAML configuration.

    python -m tests.integration.test_replica_outputs_child <kind> <dsn> <output json> <state>
"""

from __future__ import annotations

import json
import signal
import sys
from typing import Any

from dblog.app.pipeline import Pipeline
from dblog.engine import EngineSettings
from dblog.outputs.delta import DeltaOutput
from dblog.outputs.sql import SqlOutput
from tests.integration.sources import Kit
from tests.replica_targets import ReplicaOutput


def main(argv: list[str]) -> None:
    kind, dsn, raw, state = argv
    kit = Kit(kind, dsn)
    config: dict[str, Any] = json.loads(raw)
    # no table metadata given: the engine hands it over (TableAwareOutput.set_tables)
    output: ReplicaOutput = (SqlOutput(config) if config["type"] == "sql"
                             else DeltaOutput(config))
    settings = EngineSettings(chunk_size=50, chunk_delay_s=0.04, flush_interval_s=0.1,
                              heartbeat_interval_s=1, initial_dumps=(tuple(kit.tables),))
    pipeline = Pipeline(kit.connector("crash", "crash"), [output], state_path=state,
                        settings=settings)
    signal.signal(signal.SIGTERM, lambda *_: pipeline.request_stop())
    pipeline.run()


if __name__ == "__main__":
    main(sys.argv[1:])
