"""Dreamer v3 engines: the CPU reference engine and the two-loop async engine (CUDA streams on a GPU)."""

from worldgym.agents.dreamer_v3.engine.async_engine import AsyncEngine
from worldgym.agents.dreamer_v3.engine.core import EngineCore
from worldgym.agents.dreamer_v3.engine.cpu import CPUEngine

__all__ = ["AsyncEngine", "CPUEngine", "EngineCore"]
