"""``GRPOConfig``: every setting of the GRPO / DAPO / Dr.GRPO trainer, validated on construction."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from worldgym.agents.llm.losses import AdvantageNorm, Aggregation

__all__ = ["GRPOConfig"]

_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass
class GRPOConfig:
    """GRPO/DAPO trainer settings. Defaults follow DAPO (clip 0.2/0.28, token-mean) with LoRA on a tiny model.

    Model:
        model: ``"tiny"``/``"small"`` (a Qwen3 built from config with a tokenizer trained on env text) or a
        hub name
            / local path for ``from_pretrained`` (ignored when the trainer is given a model).
        finetune: ``"lora"`` (PEFT adapters; the reference model is the base with adapters disabled) or
        ``"full"``. lora_rank, lora_alpha, lora_target_modules: the LoRA adapter. device: ``"cpu"`` or
        ``"cuda"``. bf16_autocast: run the training forward under bfloat16 autocast (CPUs with AMX and GPUs
        gain).
    Environment and rollouts:
        env_id, env_kwargs: the training env (``gym.make(env_id, **env_kwargs)``); text in, text out.
        eval_env_kwargs: overrides for the validation env (e.g. ``{"split": "test"}``).
        wrap_tool_calls: wrap the env in ``ParseToolCall`` (for tool-call envs such as CSRPhone-v0).
        vectorization_mode: ``"none"`` runs training episodes in a pool of single envs; ``"sync"`` /
        ``"async"`` in a gymnasium vector env of ``prompts_per_step * group_size`` sub-envs (async: one
        subprocess each). Validation always uses single envs.
        prompts_per_step: distinct tasks per step; group_size: samples per task (the GRPO group).
        max_new_tokens, temperature, top_p: sampling per model reply; max_turns, max_episode_tokens: episode
        limits. decoding: ``"free"``, or ``"constrained"``: tool arguments the env's schema marks as copied
        take only values its observations showed, in rollouts and validation alike, and the learner scores
        those tokens over the same allowed set (:mod:`worldgym.agents.llm.constrained`).
    Loss:
        eps_low, eps_high: asymmetric PPO clip range (DAPO clip-higher).
        loss_aggregation: ``"token_mean"`` (DAPO), ``"seq_mean"`` (GRPO), ``"dr_grpo"``.
        advantage_norm: ``"group_std"`` (GRPO) or ``"none"`` (Dr.GRPO).
        kl_coef: k3 KL penalty to the reference (0 = off, no reference forward).
        entropy_coef: entropy bonus.
        dynamic_sampling, max_resample_rounds: DAPO: drop groups with all-equal rewards, resample to refill.
        overlong_buffer, overlong_penalty: DAPO soft length penalty (buffer 0 = off).
    Optimisation:
        learning_rate, weight_decay, grad_clip, ppo_epochs (passes over each batch), minibatch_size (episodes
        per optimizer step), num_steps, seed.
        share_prompt_prefix: run the opening that a group's samples share (their prompt) once per group, in
        the engine's prefill and in the training forward/backward pass, instead of once per sample (same
        results up to float rounding); min_shared_prefix: the shortest opening the engine shares.
    Bookkeeping:
        output_dir (metrics.jsonl, checkpoints), eval_every / eval_episodes (0 = no validation),
        checkpoint_every (0 = only at the end), progress (progress bar).
    """

    model: str = "tiny"
    finetune: Literal["lora", "full"] = "lora"
    lora_rank: int = 16
    lora_alpha: int = 32
    lora_target_modules: tuple[str, ...] = _TARGET_MODULES
    device: str = "cpu"
    bf16_autocast: bool = False

    env_id: str = "MathQA-v0"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    eval_env_kwargs: dict[str, Any] = field(default_factory=lambda: {"split": "test"})
    wrap_tool_calls: bool = False
    vectorization_mode: Literal["none", "sync", "async"] = "none"
    prompts_per_step: int = 8
    group_size: int = 8
    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    max_turns: int = 1
    max_episode_tokens: int = 2048
    decoding: Literal["free", "constrained"] = "free"

    eps_low: float = 0.2
    eps_high: float = 0.28
    loss_aggregation: Aggregation = "token_mean"
    advantage_norm: AdvantageNorm = "group_std"
    kl_coef: float = 0.0
    entropy_coef: float = 0.0
    dynamic_sampling: bool = False
    max_resample_rounds: int = 3
    overlong_buffer: int = 0
    overlong_penalty: float = 1.0

    learning_rate: float = 1e-4
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    ppo_epochs: int = 1
    minibatch_size: int = 64
    num_steps: int = 50
    seed: int = 0
    share_prompt_prefix: bool = True
    min_shared_prefix: int = 16

    output_dir: str = "runs/grpo"
    eval_every: int = 10
    eval_episodes: int = 32
    checkpoint_every: int = 0
    progress: bool = True

    def __post_init__(self) -> None:
        self.lora_target_modules = tuple(self.lora_target_modules)
        _choice(self, "finetune", ("lora", "full"))
        _choice(self, "loss_aggregation", ("token_mean", "seq_mean", "dr_grpo"))
        _choice(self, "advantage_norm", ("group_std", "none"))
        _choice(self, "vectorization_mode", ("none", "sync", "async"))
        _choice(self, "decoding", ("free", "constrained"))
        for name in (
            "lora_rank",
            "lora_alpha",
            "prompts_per_step",
            "max_new_tokens",
            "max_turns",
            "ppo_epochs",
            "minibatch_size",
            "num_steps",
            "max_episode_tokens",
            "min_shared_prefix",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"GRPOConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.group_size < 2:
            raise ValueError(
                f"GRPOConfig.group_size must be >= 2 (group-relative advantages need a group), "
                f"got {self.group_size}"
            )
        for name in ("eps_low", "eps_high"):
            if not 0 < getattr(self, name) < 1:
                raise ValueError(f"GRPOConfig.{name} must be in (0, 1), got {getattr(self, name)}")
        for name in (
            "kl_coef",
            "entropy_coef",
            "weight_decay",
            "temperature",
            "eval_every",
            "eval_episodes",
            "checkpoint_every",
            "overlong_buffer",
            "max_resample_rounds",
            "overlong_penalty",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"GRPOConfig.{name} must be >= 0, got {getattr(self, name)}")
        if self.temperature == 0:
            raise ValueError(
                "GRPOConfig.temperature must be > 0 for training rollouts (greedy groups are all "
                "identical, so every advantage would be 0); validation already decodes greedily"
            )
        if not 0 < self.top_p <= 1:
            raise ValueError(f"GRPOConfig.top_p must be in (0, 1], got {self.top_p}")
        if self.learning_rate <= 0 or self.grad_clip <= 0:
            raise ValueError(
                f"GRPOConfig.learning_rate and grad_clip must be > 0, got {self.learning_rate}, "
                f"{self.grad_clip}"
            )
        if self.overlong_buffer > self.max_new_tokens * self.max_turns:
            raise ValueError(
                f"GRPOConfig.overlong_buffer ({self.overlong_buffer}) must not exceed the longest "
                f"response, max_new_tokens * max_turns = {self.max_new_tokens * self.max_turns}"
            )
        if self.device not in ("cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ValueError(f"GRPOConfig.device must be 'cpu', 'cuda' or 'cuda:N', got {self.device!r}")

    def to_dict(self) -> dict[str, Any]:
        """The config as JSON-compatible data (stored in checkpoints)."""
        data = asdict(self)
        data["lora_target_modules"] = list(self.lora_target_modules)
        return data


def _choice(config: GRPOConfig, name: str, options: tuple[str, ...]) -> None:
    value = getattr(config, name)
    if value not in options:
        raise ValueError(f"GRPOConfig.{name} must be one of {list(options)}, got {value!r}")
