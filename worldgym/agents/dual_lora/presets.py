"""Per-model settings of the dual-LoRA agent on CSRPhone-v1 (its world model predicts the phone calls' replies):
the env's registered preset (the CSR policy's warm start, whose vocabulary holds the world model's markers, and
its DAPO settings), on two fresh adapters.

Shared by ``examples/train_dual_lora.py`` and ``benchmarks/csr_dual_lora_vs_dapo.py``.
"""

from __future__ import annotations

from typing import Any

from worldgym.agents.dual_lora.config import WM_SPECIAL_TOKENS, DualLoRAConfig
from worldgym.agents.grpo.presets import grpo_preset
from worldgym.agents.llm.engines import HFEngine
from worldgym.agents.llm.warm_start import WarmStartConfig

__all__ = [
    "ADAPTER_LEARNING_RATES", "ENV_ID", "WM_CALLS_PER_MINIBATCH", "WM_LEARNING_RATES", "dual_lora_config", "engine",
    "warm_start_config",
]

ENV_ID = "CSRPhone-v1"  # the env whose presets these settings build on

# The CSR presets' learning rates are for full fine-tuning (tiny) or a continued warm-start adapter (SmolLM2);
# fresh rank-16 adapters on the frozen warm start take larger steps. The world model learns a new task (the
# warm start never predicted tool results: SFT trains on assistant tokens only), so it gets a larger one: in a
# 20-update probe on 296 tiny-model phone calls, lr 5e-3 on all linear layers took the validation reply loss
# 10.0 -> 6.0 (token accuracy 10%), lr 1e-3 on q/v/o only 10.0 -> 7.6 (1.4%).
ADAPTER_LEARNING_RATES: dict[str, float] = {"tiny": 2e-3, "smollm2-135m": 1e-4}
WM_LEARNING_RATES: dict[str, float] = {"tiny": 5e-3, "smollm2-135m": 5e-4}
# Phone calls the world model trains on per minibatch (of ~270 a tiny DAPO step makes at d1): each is a forward
# over its whole conversation, and training on all of them made a step 6x slower (measured: 152 s vs 25 s).
WM_CALLS_PER_MINIBATCH: dict[str, int] = {"tiny": 16, "smollm2-135m": 8}


def warm_start_config(model: str) -> WarmStartConfig:
    """The CSR policy's cached warm start for ``model`` (the same one its DAPO baseline starts from); its
    tokenizer holds the world model's markers."""
    config = grpo_preset(ENV_ID, model).warm_start
    if not set(WM_SPECIAL_TOKENS) <= set(config.extra_special_tokens):
        raise ValueError(f"the {model!r} CSR warm start reserves no world-model markers {WM_SPECIAL_TOKENS}: "
                         "add them to its extra_special_tokens")
    return config


def dual_lora_config(preset: str, difficulty: int, **overrides: Any) -> DualLoRAConfig:
    """The CSR preset's DAPO settings (``"tiny"`` / ``"smollm2-135m"``: its decoding, batch, 0/1 reward) at
    ``difficulty`` as a :class:`DualLoRAConfig`; ``overrides`` set any field (e.g. ``transfer``, ``wm_coef``,
    ``model`` for another pretrained model on SmolLM2's settings)."""
    # a world-model forward holds one conversation and its calls' replies (world_model.pack_calls), as a policy
    # microbatch holds one episode under SmolLM2; the OOM kills at 16.8-17 GB were mostly freed blocks kept in
    # malloc's heap, which the SmolLM2 preset's cpu_release_heap gives back
    base = grpo_preset(ENV_ID, preset)
    settings = {"learning_rate": ADAPTER_LEARNING_RATES[preset], "wm_learning_rate": WM_LEARNING_RATES[preset],
                "wm_max_calls": WM_CALLS_PER_MINIBATCH[preset], "adapter_targets": "all-linear", **overrides}
    return base.grpo_config(difficulty, DualLoRAConfig, **settings)


def engine(model: str, policy: Any, tokenizer: Any) -> HFEngine:
    """The CSR preset's rollout engine (batched, KV cache kept across turns) on ``policy``."""
    return grpo_preset(ENV_ID, model).engine(policy, tokenizer)
