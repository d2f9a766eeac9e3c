"""Generation engines behind one protocol: ``HFEngine``, ``VLLMEngine`` (optional), ``ShardedEngine``."""

from worldgym.agents.llm.engines.base import FinishReason, Generation, GenerationEngine, SamplingParams
from worldgym.agents.llm.engines.hf import HFEngine
from worldgym.agents.llm.engines.sharded import ShardedEngine

__all__ = [
    "FinishReason",
    "Generation",
    "GenerationEngine",
    "HFEngine",
    "SamplingParams",
    "ShardedEngine",
    "VLLMEngine",
]


def __getattr__(name: str):
    if name == "VLLMEngine":  # imported lazily: vllm is an optional extra
        from worldgym.agents.llm.engines.vllm import VLLMEngine

        return VLLMEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
