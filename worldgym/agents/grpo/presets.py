"""Named GRPO settings that envs register (:func:`worldgym.env_training.register_presets`), as the stack's objects.

A preset's plain settings hold three groups: ``"warm_start"`` (:class:`WarmStartConfig` fields), ``"trainer"``
(:class:`GRPOConfig` fields) and ``"engine"`` (:class:`HFEngine` options). :func:`grpo_presets` turns an env's
presets into :class:`GRPOPreset` objects, so that an example and a benchmark run the same settings.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from worldgym.agents.grpo.config import GRPOConfig
from worldgym.agents.llm.engines import HFEngine
from worldgym.agents.llm.warm_start import WarmStartConfig
from worldgym.env_training import preset, presets

__all__ = ["GRPOPreset", "at_difficulty", "grpo_preset", "grpo_presets", "make_engine"]


ConfigT = TypeVar("ConfigT", bound=GRPOConfig)


def at_difficulty(config: ConfigT, difficulty: int | None) -> ConfigT:
    """``config`` training and validating at ``difficulty`` (its envs' ``difficulty`` keyword; unchanged when
    None).

    >>> at_difficulty(grpo_preset("CSRPhone-v1", "tiny").grpo_config(1), 3).eval_env_kwargs
    {'split': 'validation', 'difficulty': 3}
    """
    if difficulty is None:
        return config
    return replace(config, env_kwargs={**config.env_kwargs, "difficulty": difficulty},
                   eval_env_kwargs={**config.eval_env_kwargs, "difficulty": difficulty})


def make_engine(model: Any, tokenizer: Any, **options: Any) -> HFEngine:
    """An :class:`HFEngine` on ``model`` that pads with the tokenizer's pad token and stops at its EOS, with
    ``options`` (e.g. ``batch_size``, ``reuse_kv_cache``, ``kv_cache_max_tokens``)."""
    return HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], **options)


@dataclass(frozen=True)
class GRPOPreset:
    """An env's named preset: its warm start, its trainer settings and its rollout engine.

    Args:
        name: the preset's name among its env's.
        warm_start: the cached SFT warm start RL starts from.
        trainer: :class:`GRPOConfig` fields (the env, its splits, decoding, batch, optimiser, memory, loss).
        engine_options: :class:`HFEngine` options of its rollout engine.
    """

    name: str
    warm_start: WarmStartConfig
    trainer: Mapping[str, Any]
    engine_options: Mapping[str, Any]

    @classmethod
    def from_settings(cls, name: str, settings: Mapping[str, Mapping[str, Any]]) -> GRPOPreset:
        """The preset of an env's plain settings (groups ``warm_start``, ``trainer``, ``engine``)."""
        return cls(name, WarmStartConfig(**settings["warm_start"]), dict(settings["trainer"]),
                   dict(settings.get("engine", {})))

    @property
    def decoding(self) -> str:
        """The decoding the model is trained and evaluated with."""
        return self.trainer.get("decoding", GRPOConfig.decoding)

    @property
    def max_new_tokens(self) -> int:
        """Tokens per reply."""
        return self.trainer.get("max_new_tokens", GRPOConfig.max_new_tokens)

    @property
    def max_episode_tokens(self) -> int:
        """Tokens per episode, in training and validation."""
        return self.trainer.get("max_episode_tokens", GRPOConfig.max_episode_tokens)

    @property
    def microbatch_size(self) -> int:
        """Episodes per learner forward (0: the whole minibatch)."""
        return self.trainer.get("microbatch_size", GRPOConfig.microbatch_size)

    @property
    def engine_batch_size(self) -> int:
        """Episodes generated together."""
        return self.engine_options.get("batch_size", 1)

    @property
    def kv_cache_max_tokens(self) -> int:
        """The rollout engine's KV store, in tokens."""
        return self.engine_options.get("kv_cache_max_tokens", 0)

    def engine(self, model: Any, tokenizer: Any) -> HFEngine:
        """The preset's rollout engine on ``model``."""
        return make_engine(model, tokenizer, **self.engine_options)

    def grpo_config(self, difficulty: int | None = None, config_class: type[GRPOConfig] = GRPOConfig,
                    **overrides: Any) -> Any:
        """The trainer settings at ``difficulty`` (:func:`at_difficulty`), fine-tuned as the warm start was.
        ``config_class``: a :class:`GRPOConfig` subclass to build instead (e.g. the dual-LoRA agent's config,
        whose adapters make it ``finetune="lora"``); ``overrides`` set any field."""
        settings: dict[str, Any] = {**self.trainer, "finetune": self.warm_start.finetune}
        if config_class is not GRPOConfig:  # an agent on adapters: the warm start is the frozen base
            settings["finetune"] = "lora"
        return at_difficulty(config_class(**{**settings, **overrides}), difficulty)


def grpo_presets(env_id: str) -> dict[str, GRPOPreset]:
    """Every preset ``env_id`` registered, by name.

    Raises:
        ConfigError: ``env_id`` registered no presets (the message names the ids that did).
    """
    return {name: GRPOPreset.from_settings(name, settings) for name, settings in presets(env_id).items()}


def grpo_preset(env_id: str, name: str) -> GRPOPreset:
    """``env_id``'s preset ``name``.

    Raises:
        ConfigError: ``env_id`` registered no presets, or none called ``name`` (the message names them).
    """
    return GRPOPreset.from_settings(name, preset(env_id, name))


def __getattr__(name: str) -> Any:
    # names of the presets before envs registered them: CSR_PRESETS, CSRPreset, csr_engine
    if name == "CSR_PRESETS":
        warnings.warn("CSR_PRESETS is deprecated: use grpo_presets('CSRPhone-v1')", DeprecationWarning,
                      stacklevel=2)
        return grpo_presets("CSRPhone-v1")
    if name == "CSRPreset":
        warnings.warn("CSRPreset is deprecated: use GRPOPreset", DeprecationWarning, stacklevel=2)
        return GRPOPreset
    if name == "csr_engine":
        warnings.warn("csr_engine is deprecated: use make_engine(model, tokenizer, batch_size=...,"
                      " reuse_kv_cache=True, kv_cache_max_tokens=...)", DeprecationWarning, stacklevel=2)
        return _csr_engine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _csr_engine(model: Any, tokenizer: Any, batch_size: int, kv_cache_max_tokens: int) -> HFEngine:
    return make_engine(model, tokenizer, batch_size=batch_size, reuse_kv_cache=True,
                       kv_cache_max_tokens=kv_cache_max_tokens)
