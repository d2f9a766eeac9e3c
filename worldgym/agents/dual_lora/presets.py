"""Per-model settings of the dual-LoRA agent on CSRPhone-v0: the CSR policy's warm start (with the world
model's markers in its vocabulary) and its DAPO settings, on two fresh adapters.

Shared by ``examples/train_dual_lora.py`` and ``benchmarks/csr_dual_lora_vs_dapo.py``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from worldgym.agents.dual_lora.config import WM_SPECIAL_TOKENS, DualLoRAConfig
from worldgym.agents.grpo.presets import CSR_PRESETS
from worldgym.agents.llm.engines import HFEngine
from worldgym.agents.llm.warm_start import WarmStartConfig

__all__ = ["ADAPTER_LEARNING_RATES", "WM_CALLS_PER_MINIBATCH", "dual_lora_config", "engine", "warm_start_config"]

# The CSR presets' learning rates are for full fine-tuning (tiny) or a continued warm-start adapter (SmolLM2);
# fresh rank-16 adapters on the frozen warm start take larger steps.
ADAPTER_LEARNING_RATES: dict[str, float] = {"tiny": 1e-3, "smollm2-135m": 1e-4}
# Phone calls the world model trains on per minibatch (of ~270 a tiny DAPO step makes at d1): each is a forward
# over its whole conversation, and training on all of them made a step 6x slower (measured: 152 s vs 25 s).
WM_CALLS_PER_MINIBATCH: dict[str, int] = {"tiny": 16, "smollm2-135m": 8}


def warm_start_config(model: str) -> WarmStartConfig:
    """The CSR policy's cached warm start for ``model``, its tokenizer holding the world model's markers."""
    return replace(CSR_PRESETS[model].warm_start, extra_special_tokens=WM_SPECIAL_TOKENS)


def dual_lora_config(model: str, difficulty: int, **overrides: Any) -> DualLoRAConfig:
    """The CSR preset's DAPO settings for ``model`` at ``difficulty`` (its decoding, batch, 0/1 reward) as a
    :class:`DualLoRAConfig`; ``overrides`` set any field (e.g. ``transfer``, ``wm_coef``)."""
    settings = {"learning_rate": ADAPTER_LEARNING_RATES[model], "wm_max_calls": WM_CALLS_PER_MINIBATCH[model],
                **overrides}
    return CSR_PRESETS[model].grpo_config(difficulty, DualLoRAConfig, **settings)


def engine(model: str, policy: Any, tokenizer: Any) -> HFEngine:
    """The CSR preset's rollout engine (batched, KV cache kept across turns) on ``policy``."""
    return CSR_PRESETS[model].engine(policy, tokenizer)
