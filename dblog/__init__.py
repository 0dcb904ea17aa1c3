"""dblog: change data capture with watermark-based dumps interleaved with the log."""

from dblog.app.pipeline import Pipeline
from dblog.core.model import ChangeEvent, Op, TableId
from dblog.engine import Engine, EngineSettings, PhaseHooks
from dblog.errors import DblogError

__all__ = ["ChangeEvent", "DblogError", "Engine", "EngineSettings", "Op", "PhaseHooks",
           "Pipeline", "TableId"]
__version__ = "0.1.0"
