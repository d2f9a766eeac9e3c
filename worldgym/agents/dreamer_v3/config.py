"""Validated dataclass configs for Dreamer v3: model sizes, replay, schedule, losses, optimisers and runs."""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from worldgym.config import (
    apply_renamed_fields,
    check_choice,
    check_field,
    check_positive_int,
    renamed_fields,
)
from worldgym.precision import Precision, check_precision, resolve_dtype
from worldgym.retention import check_retention
from worldgym.tracking import check_report_to

SizeName = Literal["tiny", "XS", "S", "M"]
ObsKind = Literal["vector", "pixels"]
EngineName = Literal["cpu", "async"]


@dataclass(frozen=True)
class ModelConfig:
    """Network sizes (DreamerV3 paper, table of model sizes; ``tiny`` is for CPU tests).

    Attributes:
        recurrent_size (int): deterministic GRU state size.
        dense_units (int): hidden width of every MLP.
        mlp_layers (int): hidden layers of every MLP head.
        cnn_multiplier (int): channels of the first conv layer (doubled per stage).
        stochastic_size (int): number of categorical latents.
        discrete_size (int): classes per categorical latent.
        unimix (float): uniform mix into every categorical (0.01 in the paper).
        bins (int): two-hot bins for reward and critic (255 in the paper).
        layer_norm_eps (float): epsilon of every LayerNorm.
    """

    recurrent_size: int = 256
    dense_units: int = 256
    mlp_layers: int = 1
    cnn_multiplier: int = 24
    stochastic_size: int = 32
    discrete_size: int = 32
    unimix: float = 0.01
    bins: int = 255
    layer_norm_eps: float = 1e-3

    def __post_init__(self) -> None:
        for name in ("recurrent_size", "dense_units", "mlp_layers", "cnn_multiplier", "stochastic_size"):
            check_field(getattr(self, name) >= 1, name, getattr(self, name), "use a value >= 1")
        check_field(self.discrete_size >= 2, "discrete_size", self.discrete_size, "use a value >= 2")
        check_field(0.0 <= self.unimix < 1.0, "unimix", self.unimix, "use a value in [0, 1)")
        check_field(self.bins >= 3 and self.bins % 2 == 1, "bins", self.bins, "use an odd number >= 3 (255)")
        check_field(self.layer_norm_eps > 0, "layer_norm_eps", self.layer_norm_eps, "use a value > 0")

    @property
    def latent_size(self) -> int:
        """Size of the model state fed to heads: recurrent + flattened stochastic."""
        return self.recurrent_size + self.stochastic_size * self.discrete_size


MODEL_SIZES: dict[str, ModelConfig] = {
    "tiny": ModelConfig(
        recurrent_size=32, dense_units=32, mlp_layers=1, cnn_multiplier=4, stochastic_size=4, discrete_size=4
    ),
    "XS": ModelConfig(recurrent_size=256, dense_units=256, mlp_layers=1, cnn_multiplier=24),
    "S": ModelConfig(recurrent_size=512, dense_units=512, mlp_layers=2, cnn_multiplier=32),
    "M": ModelConfig(recurrent_size=1024, dense_units=640, mlp_layers=3, cnn_multiplier=48),
}


def model_size(name: SizeName, **overrides: Any) -> ModelConfig:
    """Return the preset ``name`` (tiny/XS/S/M), optionally with fields replaced.

    >>> model_size("XS").recurrent_size
    256
    """
    check_choice("size", name, tuple(MODEL_SIZES))
    return dataclasses.replace(MODEL_SIZES[name], **overrides)


@dataclass(frozen=True)
class ReplayConfig:
    """Replay ring and sampling geometry.

    Attributes:
        capacity (int): time steps kept per env (``T_cap``).
        seq_len (int): sampled sequence length ``T``.
        batch_size (int): sequences per gradient step ``B``.
        commit_stride (int): env steps written between two commit markers inside a rollout window (the end of
            a window always commits).
        min_ready_steps (int): committed steps needed before the first sample.
        safety_margin (int): steps the writer may run ahead of ``committed_t``; the learner never samples the
            ``safety_margin`` oldest slots because the writer may be overwriting them.
    """

    capacity: int = 100_000
    seq_len: int = 64
    batch_size: int = 16
    commit_stride: int = 1
    min_ready_steps: int = 64
    safety_margin: int = 64

    def __post_init__(self) -> None:
        check_field(self.commit_stride >= 1, "commit_stride", self.commit_stride, "use a value >= 1")
        check_field(self.seq_len >= 2, "seq_len", self.seq_len, "use a value >= 2 (a transition needs two steps)")
        check_field(self.batch_size >= 1, "batch_size", self.batch_size, "use a value >= 1")
        check_field(
            self.min_ready_steps >= self.seq_len,
            "min_ready_steps",
            self.min_ready_steps,
            f"use a value >= seq_len={self.seq_len} so a first sequence fits",
        )
        check_field(
            self.safety_margin >= self.seq_len,
            "safety_margin",
            self.safety_margin,
            f"use a value >= seq_len={self.seq_len}",
        )
        check_field(
            self.safety_margin >= self.commit_stride,
            "safety_margin",
            self.safety_margin,
            f"use a value >= commit_stride={self.commit_stride} (the writer runs up to one stride ahead)",
        )
        check_field(
            self.capacity >= self.min_ready_steps + self.safety_margin,
            "capacity",
            self.capacity,
            f"use a value >= min_ready_steps + safety_margin = {self.min_ready_steps + self.safety_margin}",
        )
        if self.commit_stride > self.seq_len / 2:
            warnings.warn(
                f"commit_stride={self.commit_stride} > seq_len/2={self.seq_len / 2}: the learner sees new "
                "data "
                "in coarse chunks; lower commit_stride for fresher samples",
                stacklevel=3,
            )


@dataclass(frozen=True)
class ScheduleConfig:
    """Replay-ratio schedule (same semantics as sheeprl's ``Ratio``).

    Attributes:
        replay_ratio (float): gradient steps per policy step (Hafner's train_ratio / (batch * seq_len)).
        learning_starts (int): policy steps of random prefill before training.
        pretrain_steps (int): gradient steps taken on the first training call.
        rollout_window (int): env steps the actor runs between two policy refreshes.
    """

    replay_ratio: float = 0.5
    learning_starts: int = 1024
    pretrain_steps: int = 1
    rollout_window: int = 1

    def __post_init__(self) -> None:
        check_field(self.replay_ratio >= 0, "replay_ratio", self.replay_ratio, "use a value >= 0")
        check_field(self.learning_starts >= 0, "learning_starts", self.learning_starts, "use a value >= 0")
        check_field(self.pretrain_steps >= 0, "pretrain_steps", self.pretrain_steps, "use a value >= 0")
        check_field(self.rollout_window >= 1, "rollout_window", self.rollout_window, "use a value >= 1")


@dataclass(frozen=True)
class LossConfig:
    """World-model and behavior loss coefficients (DreamerV3 defaults).

    Attributes:
        kl_dynamic (float): weight of the dynamics KL (prior towards stopped posterior).
        kl_representation (float): weight of the representation KL.
        kl_free_nats (float): free bits clipped per sequence step.
        gamma (float): discount (1 - 1/333).
        lmbda (float): lambda of the lambda-returns.
        horizon (int): imagination steps.
        entropy_coef (float): actor entropy bonus.
        critic_tau (float): slow-critic EMA rate.
        return_decay (float): EMA decay of the return percentiles.
        percentile_low (float): low return percentile.
        percentile_high (float): high return percentile.
    """

    kl_dynamic: float = 0.5
    kl_representation: float = 0.1
    kl_free_nats: float = 1.0
    gamma: float = 1 - 1 / 333
    lmbda: float = 0.95
    horizon: int = 15
    entropy_coef: float = 3e-4
    critic_tau: float = 0.02
    return_decay: float = 0.99
    percentile_low: float = 0.05
    percentile_high: float = 0.95

    def __post_init__(self) -> None:
        for name in ("kl_dynamic", "kl_representation", "kl_free_nats", "entropy_coef"):
            check_field(getattr(self, name) >= 0, name, getattr(self, name), "use a value >= 0")
        for name in ("gamma", "lmbda", "critic_tau", "return_decay"):
            check_field(0 < getattr(self, name) <= 1, name, getattr(self, name), "use a value in (0, 1]")
        check_field(self.horizon >= 1, "horizon", self.horizon, "use a value >= 1")
        check_field(
            0 <= self.percentile_low < self.percentile_high <= 1,
            "percentile_low",
            (self.percentile_low, self.percentile_high),
            "need 0 <= percentile_low < percentile_high <= 1",
        )


@renamed_fields(world_lr="world_learning_rate", actor_lr="actor_learning_rate", critic_lr="critic_learning_rate")
@dataclass(frozen=True)
class OptimConfig:
    """Adam settings per network (DreamerV3 defaults). ``world_lr``, ``actor_lr`` and ``critic_lr`` are
    deprecated names of the learning rates (:func:`worldgym.config.renamed_fields`).

    Attributes:
        world_learning_rate (float): world-model learning rate.
        actor_learning_rate (float): actor learning rate.
        critic_learning_rate (float): critic learning rate.
        eps (float): Adam epsilon.
        world_clip (float): world-model gradient-norm clip.
        behavior_clip (float): actor and critic gradient-norm clip.
    """

    world_learning_rate: float = 1e-4
    actor_learning_rate: float = 8e-5
    critic_learning_rate: float = 8e-5
    eps: float = 1e-8
    world_clip: float = 1000.0
    behavior_clip: float = 100.0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            check_field(getattr(self, f.name) > 0, f.name, getattr(self, f.name), "use a value > 0")


# The small setting of the CartPole benchmark and example (README, Dreamer v3): tiny's widths doubled and
# 16 x 16 latents, which cost the same as tiny's 4 x 4 on CPU, with behavior learning rates of 3e-4 instead of
# 8e-5. In a seed-0 sweep this pair turned an oscillating return curve into a steady climb; neither change did
# alone.
SMALL_CONTROL_MODEL = model_size(
    "tiny", dense_units=64, recurrent_size=64, stochastic_size=16, discrete_size=16
)
SMALL_CONTROL_OPTIM = OptimConfig(world_learning_rate=3e-4, actor_learning_rate=3e-4, critic_learning_rate=3e-4)


@renamed_fields(total_steps="num_steps", run_dir="output_dir")
@dataclass(frozen=True)
class DreamerConfig:
    """Everything one Dreamer v3 run needs. ``total_steps`` and ``run_dir`` are deprecated names of ``num_steps``
    and ``output_dir`` (:func:`worldgym.config.renamed_fields`).

    Attributes:
        env_id (str): Gymnasium id of the task.
        num_envs (int): parallel envs ``N``.
        num_steps (int): the run's budget, in policy steps: env steps summed over the envs (a history row's
            ``step``).
        seed (int): seed of every generator in the run.
        obs_kind (ObsKind): ``vector`` (MLP encoder) or ``pixels`` (2-bit packed frames, CNN encoder).
        model (ModelConfig): network sizes.
        replay (ReplayConfig): replay geometry.
        schedule (ScheduleConfig): replay-ratio schedule.
        loss (LossConfig): loss coefficients.
        optim (OptimConfig): optimiser settings.
        device (str): torch device of the learner.
        dtype (Precision): compute precision: ``float32``, ``bfloat16`` (mixed precision: weights, optimiser
            state, gradients, distributions and losses stay float32; the networks' forward passes in learning
            and acting run under ``torch.autocast`` to bfloat16) or ``auto`` (bfloat16 where ``device``
            computes it natively, else float32).
        log_every (int): policy steps between two JSONL metric lines.
        checkpoint_every (int): policy steps between two checkpoints (0 = only at the end).
        save_total_limit (int | None): checkpoints (``checkpoint-<iteration>``) kept, the newest (None: all;
            :mod:`worldgym.retention`).
        output_dir (str): the run folder: metrics, checkpoints and failure bundles.
        engine (EngineName): ``cpu`` (deterministic, one thread) or ``async`` (actor and learner threads).
        eval_episodes (int): episodes of :meth:`DreamerTrainer.evaluate`.
        report_to (str | list[str]): where metrics also go besides ``metrics.jsonl`` (TRL's name): "none",
            "tensorboard", "wandb", "all" or a list of them (:mod:`worldgym.tracking`; needs the ``tracking`` extra).
        progress (bool): show a progress bar.
    """

    env_id: str = "CartPole-v1"
    num_envs: int = 1
    num_steps: int = 10_000
    seed: int = 0
    obs_kind: ObsKind = "vector"
    model: ModelConfig = field(default_factory=lambda: model_size("XS"))
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    device: str = "cpu"
    dtype: Precision = "float32"
    log_every: int = 500
    checkpoint_every: int = 0
    save_total_limit: int | None = None
    output_dir: str = "runs/dreamer_v3"
    engine: EngineName = "cpu"
    eval_episodes: int = 10
    report_to: str | list[str] = "none"
    progress: bool = True

    def __post_init__(self) -> None:
        for name in ("num_envs", "num_steps", "log_every", "eval_episodes"):
            check_positive_int(name, getattr(self, name))
        check_choice("obs_kind", self.obs_kind, ("vector", "pixels"))
        check_choice("engine", self.engine, ("cpu", "async"))
        check_precision("dtype", self.dtype)
        check_field(self.checkpoint_every >= 0, "checkpoint_every", self.checkpoint_every, "use a value >= 0")
        check_retention(self.save_total_limit)
        check_report_to(self.report_to)
        check_field(
            self.checkpoint_every == 0 or self.checkpoint_every >= self.num_envs,
            "checkpoint_every",
            self.checkpoint_every,
            f"use 0 (only at the end) or a value >= num_envs={self.num_envs} (an iteration steps every env once)",
        )
        for name, kind in (
            ("model", ModelConfig),
            ("replay", ReplayConfig),
            ("schedule", ScheduleConfig),
            ("loss", LossConfig),
            ("optim", OptimConfig),
        ):
            value = getattr(self, name)
            if not isinstance(value, kind):
                raise TypeError(f"{name} must be a {kind.__name__}, got {type(value).__name__}")

    @property
    def compute_dtype(self) -> torch.dtype:
        """The torch dtype ``dtype`` resolves to on ``device`` (``auto`` made concrete)."""
        return resolve_dtype(self.dtype, self.device)

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (JSON-safe) of this config."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DreamerConfig:
        """Rebuild a config written by :meth:`to_dict` (old field names read as their new ones, with a
        ``DeprecationWarning``); unknown keys raise ``ValueError``."""
        nested = {"model": ModelConfig, "replay": ReplayConfig, "schedule": ScheduleConfig}
        nested |= {"loss": LossConfig, "optim": OptimConfig}
        data = apply_renamed_fields(cls, data)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown DreamerConfig keys {sorted(unknown)}: valid keys are {sorted(known)}")
        kwargs = dict(data)
        for name, kind in nested.items():
            if name in kwargs and isinstance(kwargs[name], dict):
                kwargs[name] = apply_renamed_fields(kind, kwargs[name])
                sub_known = {f.name for f in dataclasses.fields(kind)}
                sub_unknown = set(kwargs[name]) - sub_known
                if sub_unknown:
                    raise ValueError(
                        f"unknown {name} keys {sorted(sub_unknown)}: valid keys are {sorted(sub_known)}"
                    )
                kwargs[name] = kind(**kwargs[name])
        return cls(**kwargs)
