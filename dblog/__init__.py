"""dblog: change data capture with watermark-based dumps interleaved with the log."""

from dblog.engine import Engine, EngineSettings, PhaseHooks
from dblog.errors import DblogError
from dblog.model import ChangeEvent, Op, TableId
from dblog.pipeline import Pipeline

__all__ = ["ChangeEvent", "DblogError", "Engine", "EngineSettings", "Op", "PhaseHooks",
           "Pipeline", "TableId"]
__version__ = "0.1.0"
