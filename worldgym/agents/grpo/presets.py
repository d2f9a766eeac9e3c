"""Named settings for training a CSR policy with DAPO on CSRPhone-v1's 0/1 reward, per model.

Shared by ``examples/train_grpo.py --env CSRPhone-v1`` and ``benchmarks/csr_policy.py`` so that the example
runs what the benchmark measured.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar

from worldgym.agents.grpo.config import GRPOConfig
from worldgym.agents.llm.allocator import DEFAULT_MMAP_THRESHOLD
from worldgym.agents.llm.engines import HFEngine
from worldgym.agents.llm.tokenizer import WORLD_MODEL_TOKENS
from worldgym.agents.llm.warm_start import WarmStartConfig
from worldgym.precision import Precision

__all__ = ["CSR_PRESETS", "CSRPreset", "at_difficulty", "csr_engine"]


ConfigT = TypeVar("ConfigT", bound=GRPOConfig)


def at_difficulty(config: ConfigT, difficulty: int | None) -> ConfigT:
    """``config`` training and validating at CSR ``difficulty`` (unchanged when None).

    >>> at_difficulty(CSR_PRESETS["tiny"].grpo_config(1), 3).eval_env_kwargs
    {'split': 'validation', 'difficulty': 3}
    """
    if difficulty is None:
        return config
    return replace(config, env_kwargs={**config.env_kwargs, "difficulty": difficulty},
                   eval_env_kwargs={**config.eval_env_kwargs, "difficulty": difficulty})


def csr_engine(model: Any, tokenizer: Any, batch_size: int, kv_cache_max_tokens: int) -> HFEngine:
    """A CSR rollout engine: ``batch_size`` episodes generated together, each episode's KV cache kept across
    turns in a store of ``kv_cache_max_tokens`` tokens."""
    return HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], batch_size=batch_size,
                    reuse_kv_cache=True, kv_cache_max_tokens=kv_cache_max_tokens)


@dataclass(frozen=True)
class CSRPreset:
    """A model's CSR warm start and DAPO settings.

    Args:
        warm_start: the cached SFT warm start (expert chats at difficulties 1-3, train split). Its vocabulary
            reserves the world model's markers (``WORLD_MODEL_TOKENS``), so the dual-LoRA agent builds on the
            very warm start the CSR policy's DAPO starts from (one SFT per model, not two).
        decoding: the decoding the model is trained and evaluated with by default.
        prompts_per_step, group_size, learning_rate, minibatch_size: DAPO batch and optimiser settings.
        max_new_tokens: tokens per reply. The scripted expert's longest call is 66 / 87 / 126 / 142 / 161 tokens
            at d1-d5 with SmolLM2's tokenizer (64 / 83 / 122 / 132 / 151 with the tiny one; 40 expert episodes
            per difficulty): from d3 on, a call with 2-3 auth values is longer than 96 tokens, and a cap of 96
            cut it into invalid JSON every time.
        max_episode_tokens: tokens per episode, in training and in every validation (a failing d3-d5 episode
            of SmolLM2 runs 16 calls, ~3,500 tokens and more).
        engine_batch_size: episodes generated together; kv_cache_max_tokens: the engine's KV store (room
            for every running episode's conversation, or early rows are evicted and re-prefilled).
        microbatch_size, activation_checkpointing, cpu_mmap_threshold: the learner's memory settings
            (``GRPOConfig``).
        dtype: the precision of rollouts and updates (``GRPOConfig.dtype``).
    """

    warm_start: WarmStartConfig
    decoding: Literal["free", "constrained"]
    prompts_per_step: int
    group_size: int = 8
    learning_rate: float = 2e-5
    minibatch_size: int = 8
    max_new_tokens: int = 192
    max_episode_tokens: int = 8192
    engine_batch_size: int = 32
    kv_cache_max_tokens: int = 131072
    microbatch_size: int = 0
    activation_checkpointing: bool = False
    cpu_mmap_threshold: int | None = None
    dtype: Precision = "float32"

    def engine(self, model: Any, tokenizer: Any) -> HFEngine:
        """The rollout engine: batched, each episode's KV cache kept across turns."""
        return csr_engine(model, tokenizer, self.engine_batch_size, self.kv_cache_max_tokens)

    def grpo_config(self, difficulty: int, config_class: type[GRPOConfig] = GRPOConfig, **overrides: Any) -> Any:
        """DAPO (clip 0.2/0.28, token-mean, dynamic sampling) on the 0/1 reward at ``difficulty``: train on the
        train split, validate on the validation split, the env's 16-call limit. ``config_class``: a
        :class:`GRPOConfig` subclass to build instead (e.g. the dual-LoRA agent's config)."""
        settings: dict[str, Any] = {
            "env_id": "CSRPhone-v1",
            "env_kwargs": {"split": "train", "difficulty": difficulty},
            "eval_env_kwargs": {"split": "validation", "difficulty": difficulty},
            "max_turns": 16,
            "max_new_tokens": self.max_new_tokens,
            "max_episode_tokens": self.max_episode_tokens,
            "decoding": self.decoding,
            "finetune": self.warm_start.finetune,
            "prompts_per_step": self.prompts_per_step,
            "group_size": self.group_size,
            "learning_rate": self.learning_rate,
            "minibatch_size": self.minibatch_size,
            "microbatch_size": self.microbatch_size,
            "activation_checkpointing": self.activation_checkpointing,
            "cpu_mmap_threshold": self.cpu_mmap_threshold,
            "dtype": self.dtype,
            "loss_aggregation": "token_mean",
            "eps_low": 0.2,
            "eps_high": 0.28,
            "dynamic_sampling": True,
            "max_resample_rounds": 1,
        }
        if config_class is not GRPOConfig:  # an agent on adapters: the warm start is the frozen base
            settings["finetune"] = "lora"
        return config_class(**{**settings, **overrides})


CSR_PRESETS: dict[str, CSRPreset] = {
    # a 0.8M-parameter Qwen3 from config, trained in full with a tokenizer trained on the expert chats (one
    # token per digit); it does not learn to copy unseen values, so its arguments are constrained
    "tiny": CSRPreset(
        WarmStartConfig(model="tiny", episodes_per_difficulty=512, epochs=4, batch_size=8, learning_rate=3e-3,
                        extra_special_tokens=WORLD_MODEL_TOKENS),
        decoding="constrained", prompts_per_step=8, learning_rate=3e-4, minibatch_size=64, engine_batch_size=64,
    ),
    # SmolLM2-135M-Instruct with a LoRA adapter (r16, all linear layers, plus the added tool tokens' rows)
    "smollm2-135m": CSRPreset(
        WarmStartConfig(model="smollm2-135m", extra_special_tokens=WORLD_MODEL_TOKENS), decoding="free",
        prompts_per_step=4, learning_rate=2e-5, minibatch_size=4, engine_batch_size=32,
        # a d3 update on 4 episodes of up to 8,192 tokens took 24 GB and was OOM-killed; one episode per pass
        # with recomputed activations peaks ~7 GB above the model (measured on 1 x 8,000 tokens)
        microbatch_size=1, activation_checkpointing=True,
        # freed multi-MB tensors stayed in malloc's heap: a dual-LoRA update was OOM-killed at 17 GB
        # (benchmarks/cpu_allocator_memory.py: ~9x less memory mapped, and slower; a killed step costs more)
        cpu_mmap_threshold=DEFAULT_MMAP_THRESHOLD,
        # bf16 rollouts and updates over the (float32-trained, shipped) warm start: d3 rollouts 1.51x faster,
        # the same greedy success (benchmarks/csr_rollout_speed.py --compare dtype; llm_precision.py)
        dtype="bfloat16",
    ),
}
