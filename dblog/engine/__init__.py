"""The engine runtime: the loop that interleaves log events with watermark-bracketed chunks,
composed of a dump scheduler, a command channel and delivery."""

from dblog.engine.engine import Engine
from dblog.engine.settings import EngineSettings, PhaseHooks

__all__ = ["Engine", "EngineSettings", "PhaseHooks"]
