"""Configuration dataclasses for the Z-token agent: model, warm start and PPO."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

from worldgym.config import check_choice, check_field, check_positive_int, renamed_fields
from worldgym.precision import Precision, check_precision
from worldgym.tracking import check_report_to

DigitActions = Literal["sample", "greedy"]
AdvantageMode = Literal["terminal", "gae"]
TokenDecoding = Literal["greedy", "sample"]
LrSchedule = Literal["onecycle", "constant"]


@dataclass
class ZTokenModelConfig:
    """Which causal LM backs the policy.

    Attributes:
        pretrained (str | None): HF model name or local path; ``None`` builds a tiny Qwen3 from config
            over the env's own vocabulary (CPU default; :func:`worldgym.agents.llm.models.tiny_model_config`
            with the shape below). A pretrained model gets ``<Z_i>``, ``<ANSWER>`` (and a pad token if
            missing) added to its tokenizer, with ``resize_token_embeddings``.
        hidden_size (int): tiny model width.
        num_layers (int): depth.
        num_heads (int): attention heads.
        num_kv_heads (int): key/value heads (must divide num_heads).
        head_dim (int): per-head width.
        intermediate_size (int): MLP width.
        seed (int): seed for the tiny model's and the heads' initialisation.
    """

    pretrained: str | None = None
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 16
    intermediate_size: int = 192
    seed: int = 0

    def __post_init__(self) -> None:
        for name in (
            "hidden_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "intermediate_size",
        ):
            check_positive_int(name, getattr(self, name))
        check_field(
            self.num_heads % self.num_kv_heads == 0,
            "num_kv_heads",
            self.num_kv_heads,
            f"it must divide num_heads={self.num_heads}",
        )

    def tiny_shape(self) -> dict[str, int]:
        """The tiny model's shape in :data:`worldgym.agents.llm.models.TINY_SIZES` keys.

        >>> ZTokenModelConfig(hidden_size=32).tiny_shape()["hidden_size"]
        32
        """
        return {
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
        }


@renamed_fields(lr="learning_rate")
@dataclass
class ZTokenWarmStartConfig:
    """Supervised "phase 2/3" warm start: digit heads + a scripted Z policy, learnt from env episodes.

    The behaviour policy emits ``k ~ Uniform{z_min..z_max}`` Z tokens (``<Z_0>, <Z_1>, ...`` in order), then
    ``<ANSWER>``; the true digits come from the env's reward breakdown. The model learns the behaviour's
    tokens (cross-entropy over the masked token set) and the digits at the ``<ANSWER>`` position.

    Attributes:
        steps (int): optimiser steps.
        batch_size (int): episodes per step.
        learning_rate (float): AdamW learning rate (``lr``: its deprecated name).
        weight_decay (float): AdamW weight decay.
        z_min (int): shortest Z trace (inclusive).
        z_max (int): longest Z trace (inclusive).
        token_loss_coef (float): weight of the Z-policy loss.
        digit_loss_coef (float): weight of the digit loss.
        max_grad_norm (float): gradient clipping.
        num_envs (int): vector env width for data collection.
        lr_schedule (Literal["onecycle", "constant"]): both warm up over the first 10% of steps; "onecycle"
            then anneals to ~0, "constant" holds ``learning_rate`` (better here at 1000 steps; PPO anneals later).
        seed (int): seeds the env resets and the scripted Z-trace lengths (the batches are fresh episodes
            each step, so there is nothing to shuffle).
    """

    steps: int = 1000
    batch_size: int = 64
    learning_rate: float = 2e-3
    weight_decay: float = 0.01
    z_min: int = 1
    z_max: int = 4
    token_loss_coef: float = 1.0
    digit_loss_coef: float = 1.0
    max_grad_norm: float = 1.0
    lr_schedule: LrSchedule = "constant"
    num_envs: int = 8
    seed: int = 0

    def __post_init__(self) -> None:
        check_choice("lr_schedule", self.lr_schedule, get_args(LrSchedule))
        for name in ("steps", "batch_size", "num_envs"):
            check_positive_int(name, getattr(self, name))
        check_field(self.learning_rate > 0, "learning_rate", self.learning_rate, "use a positive learning rate")
        check_field(
            0 <= self.z_min <= self.z_max, "z_min", (self.z_min, self.z_max), "need 0 <= z_min <= z_max"
        )
        check_field(
            self.token_loss_coef >= 0 and self.digit_loss_coef >= 0,
            "loss coefs",
            (self.token_loss_coef, self.digit_loss_coef),
            "use non-negative weights",
        )
        check_field(self.max_grad_norm > 0, "max_grad_norm", self.max_grad_norm, "use a positive norm")


@renamed_fields(num_rollouts="num_steps", lr="learning_rate")
@dataclass
class ZTokenPPOConfig:
    """PPO over the masked token action and the 5 digits, with a value head and an episodic terminal reward.
    ``num_rollouts`` and ``lr`` are deprecated names of ``num_steps`` and ``learning_rate``
    (:func:`worldgym.config.renamed_fields`).

    Attributes:
        model (ZTokenModelConfig): the policy the trainer builds when it is given none (and
            ``init_checkpoint`` is None).
        init_checkpoint (str | None): a policy checkpoint (e.g. the warm start's, from
            :func:`~worldgym.agents.ztoken_ppo.save_checkpoint`) to start from instead of building ``model``.
        env_id (str): a registered env id.
        env_kwargs (dict): keyword arguments for ``gym.make``.
        num_envs (int): sub-envs of the ``SyncVectorEnv``.
        episodes_per_rollout (int): complete episodes per rollout (a multiple of ``num_envs``).
        num_steps (int): the run's budget, in PPO iterations: one rollout of ``episodes_per_rollout``
            episodes and its update each (a history row's ``step``).
        update_epochs (int): passes over each rollout.
        num_minibatches (int): minibatches (of steps) per pass.
        learning_rate (float): Adam learning rate.
        anneal_lr (bool): decay it linearly to 0 over ``num_steps``.
        max_grad_norm (float): gradient-norm clip.
        clip_eps (float): PPO ratio clip epsilon.
        value_coef (float): c_v of ``(V_t - R)^2``.
        entropy_coef (float): c_ent of the entropy bonus (0 by default: the joint entropy includes the
            digits and any bonus slowed learning here).
        advantage (Literal["terminal", "gae"]): ``"terminal"``: ``A_t = R - V_t``; ``"gae"``: GAE.
        gamma (float): discount, used by ``"gae"`` only.
        gae_lambda (float): GAE lambda, used by ``"gae"`` only.
        normalize_advantages (bool): standardise advantages per minibatch.
        digit_actions (Literal["sample", "greedy"]): ``"sample"`` makes the digits part of the PPO action
            (their log-probs join the ratio at ``<ANSWER>`` steps); ``"greedy"`` takes the argmax and trains
            only the Z/stop choice.
        eval_episodes (int): held-out episodes per evaluation; 0 disables it.
        eval_every (int): rollouts between evaluations.
        eval_token_decoding (Literal["greedy", "sample"]): how evaluation picks Z/<ANSWER>.
        eval_seed (int): fixes the held-out problems (the same set for every training seed).
        checkpoint_every (int): rollouts between checkpoints (the last rollout is always saved).
        log_rollouts (bool): write every episode to ``rollouts.jsonl``.
        output_dir (str): where metrics, rollouts and checkpoints go.
        seed (int): seeds env resets, sampling and minibatch shuffling.
        device (str): torch device for the policy, e.g. ``"cuda"``; sampling uses a generator on that device.
        dtype (Literal["auto", "float32", "bfloat16"]): compute precision (:mod:`worldgym.precision`). Under
            bfloat16, frozen weights (if any) are stored in bfloat16, trainable ones (the LM, which PPO trains in
            full, and the heads) and the Adam state stay float32, and rollouts, evaluations and the update's
            forward run under autocast; log-probs, values, losses and advantages stay float32. "auto":
            bfloat16 where the device computes it natively. The resolved dtype is logged in every metrics row
            (``dtype``) and stored in checkpoints.
        recompute_old_logprobs (bool | None): recompute the rollout's log-probs with the update's own forward
            (the first epoch's minibatches) before the first update of each rollout, so the first minibatch's
            ratio is exactly 1; logs the mean and max gap to the rollout's (``precision/logprob_gap_mean|max``).
            None: on under bfloat16 (the rollout batches its steps otherwise than the update, and bf16 kernels
            may round other batch shapes differently), off in float32.
        report_to (str | list[str]): where metrics also go besides ``metrics.jsonl`` (TRL's name): "none",
            "tensorboard", "wandb", "all" or a list of them (:mod:`worldgym.tracking`; needs the ``tracking`` extra).
        progress (bool): show a tqdm bar.
    """

    model: ZTokenModelConfig = field(default_factory=ZTokenModelConfig)
    init_checkpoint: str | None = None
    env_id: str = "ZTokenDigits-v1"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    num_envs: int = 8
    episodes_per_rollout: int = 512
    num_steps: int = 10
    update_epochs: int = 2
    num_minibatches: int = 4
    learning_rate: float = 3e-4
    anneal_lr: bool = True
    max_grad_norm: float = 1.0
    clip_eps: float = 0.2
    value_coef: float = 0.5
    entropy_coef: float = 0.0
    advantage: AdvantageMode = "terminal"
    gamma: float = 1.0
    gae_lambda: float = 0.95
    normalize_advantages: bool = True
    digit_actions: DigitActions = "sample"
    eval_episodes: int = 256
    eval_every: int = 5
    eval_token_decoding: TokenDecoding = "greedy"
    eval_seed: int = 1234
    checkpoint_every: int = 5
    log_rollouts: bool = True
    output_dir: str = "runs/ztoken_ppo"
    seed: int = 0
    device: str = "cpu"
    dtype: Precision = "float32"
    recompute_old_logprobs: bool | None = None
    report_to: str | list[str] = "none"
    progress: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.model, dict):  # e.g. a config read back from a checkpoint's JSON
            self.model = ZTokenModelConfig(**self.model)
        if not isinstance(self.model, ZTokenModelConfig):
            raise TypeError(f"model must be a ZTokenModelConfig, got {type(self.model).__name__}")
        if self.init_checkpoint is not None:
            self.init_checkpoint = str(self.init_checkpoint)  # a Path is fine too; JSON stores the text
        for name in (
            "num_envs",
            "episodes_per_rollout",
            "num_steps",
            "update_epochs",
            "num_minibatches",
            "eval_every",
            "checkpoint_every",
        ):
            check_positive_int(name, getattr(self, name))
        check_report_to(self.report_to)
        check_field(
            self.episodes_per_rollout % self.num_envs == 0,
            "episodes_per_rollout",
            self.episodes_per_rollout,
            f"use a multiple of num_envs={self.num_envs}",
        )
        check_field(
            isinstance(self.eval_episodes, int)
            and not isinstance(self.eval_episodes, bool)
            and self.eval_episodes >= 0
            and self.eval_episodes % self.num_envs == 0,
            "eval_episodes",
            self.eval_episodes,
            f"use 0 (off) or a multiple of num_envs={self.num_envs}",
        )
        check_field(self.learning_rate > 0, "learning_rate", self.learning_rate, "use a positive learning rate")
        check_field(self.max_grad_norm > 0, "max_grad_norm", self.max_grad_norm, "use a positive norm")
        check_field(0 < self.clip_eps < 1, "clip_eps", self.clip_eps, "use a value in (0, 1), e.g. 0.2")
        check_field(self.value_coef >= 0, "value_coef", self.value_coef, "use a non-negative weight")
        check_field(self.entropy_coef >= 0, "entropy_coef", self.entropy_coef, "use a non-negative weight")
        check_choice("advantage", self.advantage, get_args(AdvantageMode))
        check_field(0 <= self.gamma <= 1, "gamma", self.gamma, "use a value in [0, 1]")
        check_field(0 <= self.gae_lambda <= 1, "gae_lambda", self.gae_lambda, "use a value in [0, 1]")
        check_choice("digit_actions", self.digit_actions, get_args(DigitActions))
        check_choice("eval_token_decoding", self.eval_token_decoding, get_args(TokenDecoding))
        check_field(
            isinstance(self.env_kwargs, dict), "env_kwargs", self.env_kwargs, "use a dict of gym.make kwargs"
        )
        check_precision("dtype", self.dtype)
        check_field(
            self.recompute_old_logprobs is None or isinstance(self.recompute_old_logprobs, bool),
            "recompute_old_logprobs",
            self.recompute_old_logprobs,
            "use True, False or None (on under bfloat16)",
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready copy."""
        return asdict(self)
