"""``DualLoRAConfig``: the GRPO/DAPO settings plus the world-model adapter, its loss weight and transfer mode."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Literal

from worldgym.agents.grpo.config import GRPOConfig
from worldgym.agents.llm.tokenizer import WORLD_MODEL_TOKENS
from worldgym.config import check_choice, check_field, check_positive_int, check_range

__all__ = ["ADAPTER_TARGETS", "WM_SPECIAL_TOKENS", "DualLoRAConfig", "ImaginedReplyReading", "LambdaSchedule",
           "Transfer"]

Transfer = Literal["separate", "stacked", "shared", "iwm", "echo"]
LambdaSchedule = Literal["constant", "step", "adaptive"]
ImaginedReplyReading = Literal["exact", "nearest"]

# The world model reads ``conversation + phone call + <|predict_csr|>`` and writes ``<|csr|> reply <|/csr|>``.
WM_SPECIAL_TOKENS = WORLD_MODEL_TOKENS
WM_CHUNK_SIZE_DEFAULT = 8  # the deprecated wm_chunk_size's default
PREDICT_CSR, CSR_START, CSR_END = WORLD_MODEL_TOKENS

ADAPTER_TARGETS: dict[str, tuple[str, ...]] = {
    "qvo": ("q_proj", "v_proj", "o_proj"),
    "all-linear": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
}


@dataclass
class DualLoRAConfig(GRPOConfig):
    """Dual-LoRA agent settings: every :class:`GRPOConfig` field (the policy's DAPO) plus the ones below. Both
    adapters sit on one frozen base (lora_rank 16 / lora_alpha 32 inherited).

    Attributes:
        lora_dropout: dropout on both adapters' inputs.
        adapter_targets: "qvo", "all-linear" or "custom" (then lora_target_modules is used as given).
        wm_learning_rate: the world-model adapter's learning rate (a second parameter group of the one AdamW;
            None: learning_rate). It learns a new task from scratch while the policy adapter fine-tunes.
        wm_coef: λ in L = L_policy + λ·L_wm (0 = DAPO alone; the world model is still evaluated).
        clip_per_adapter: clip each adapter's gradient norm to grad_clip on its own ("separate" and "stacked":
            a world-model gradient many times the policy's otherwise shrinks the policy's step under the one
            shared clip, and the policy learns as DAPO does only with it on).
        transfer: how the world model can help the policy. "separate": two adapters, each loss on its own (only
            the shared grad-norm clip couples them; with clip_per_adapter the policy trains exactly as DAPO's).
            "stacked": the policy's forward (and its rollouts) runs with both adapters active, the world model's
            with its own only. "shared": one adapter gets both losses (an auxiliary loss). "iwm": implicit world
            modelling first (the policy adapter learns its own rollouts' CSR replies, no reward, for iwm_steps
            steps), then DAPO alone. "echo": one adapter; the policy itself learns the tool results in the
            rollout's own sequence, from the policy loss's forward pass (echo_coef, echo_tools; no markers, no
            world-model forward); wm_coef is not used.
        echo_coef: the echo loss's weight under transfer "echo" (other transfers leave the echo loss out).
        echo_tools: the tools whose results the echo loss learns (default: the phone calls' replies; empty:
            every tool's).
        imagined_fraction: share of each step's groups whose phone calls the world model answers instead of the
            env (the world_model adapter, or the policy under "echo"; lookups stay the env's; reward 1 when the
            imagined reply completes the task): :mod:`worldgym.agents.dual_lora.imagination`. 0 = none.
        imagined_reply_tokens: longest imagined reply, in tokens.
        imagined_reply_reading: how an imagined reply's type is read: "exact" (``classify_reply``: the reply
            follows one template whole) or "nearest" (``nearest_reply_type``: else the type of the template whose
            fixed words it covers best, in order, when it covers at least 75% of them).
        wm_token_rows: the world model's adapter trains its own embedding rows (and tied LM-head rows) of its
            three markers, ``<|predict_csr|>``, ``<|csr|>`` and ``<|/csr|>`` (LoRA's ``trainable_token_indices``).
            Added tokens start at the mean of the pieces their text split into, and LoRA layers alone barely
            make the model write an untrained ``<|/csr|>``: it writes the pieces instead and runs on past the
            reply's end. Imagined replies need it; a teacher-forced world model learns without it.
        wm_warmup_updates: before the first step, this many optimizer updates of the world model's adapter alone
            on the phone calls of recorded chats (the trainer's ``world_model_chats``, by default the env's
            expert's): :mod:`worldgym.agents.dual_lora.warmup`. An imagined call needs a world model that already
            writes replies. 0 = none.
        wm_warmup_chats_per_update: chats whose phone calls one warm-up update trains on.
        iwm_steps: world-model-only steps of "iwm".
        lambda_schedule: "constant"; "step": lambda_steps; "adaptive": λ shrinks by lambda_adapt_rate after a
            step whose world-model token accuracy beats the first validation's by lambda_adapt_margin and grows
            by it otherwise, within [lambda_min, lambda_max].
        lambda_steps: ((step, λ), ...) pairs of the "step" schedule, each λ from its step on; starts at step 0.
        lambda_adapt_rate: factor λ is multiplied or divided by in the "adaptive" schedule (>= 1).
        lambda_adapt_margin: accuracy gain over the first validation that counts as learning ("adaptive").
        lambda_min: lowest λ of the "adaptive" schedule.
        lambda_max: highest λ of the "adaptive" schedule.
        loss_ratio_band: warn when L_wm / |L_policy| leaves this (low, high) band (logged as wm/loss_ratio).
        wm_replay_capacity: phone calls kept for replay (0 = off).
        wm_replay_fraction: share of each minibatch's world-model examples drawn from past steps (0.2: 80%
            recent / 20% past).
        wm_confidence_skip: drop from the loss the phone calls whose mean target-token probability is above this
            (already predicted; None = keep all).
        wm_max_context_tokens: keep only the last this-many context tokens of a world-model input (None: all).
        wm_max_calls: train on at most this many of a minibatch's phone calls, drawn at random (None: every
            call). The calls of one conversation are scored in one forward over it (their replies packed after
            it, :func:`~worldgym.agents.dual_lora.world_model.pack_calls`), so this bounds the world model's cost.
        wm_chunk_size: deprecated and ignored (the world model scores one pack of a conversation's calls per
            forward); setting it warns. Removed in 0.3.0.
        output_dir: run directory (metrics.jsonl, checkpoints).
    """

    lora_dropout: float = 0.05
    adapter_targets: Literal["qvo", "all-linear", "custom"] = "qvo"
    wm_learning_rate: float | None = None
    wm_coef: float = 0.5
    clip_per_adapter: bool = False
    transfer: Transfer = "separate"
    echo_coef: float = 0.1
    echo_tools: tuple[str, ...] = ("make_phone_call",)
    imagined_fraction: float = 0.0
    imagined_reply_tokens: int = 96
    imagined_reply_reading: ImaginedReplyReading = "exact"
    wm_token_rows: bool = False
    wm_warmup_updates: int = 0
    wm_warmup_chats_per_update: int = 4
    iwm_steps: int = 4
    lambda_schedule: LambdaSchedule = "constant"
    lambda_steps: tuple[tuple[int, float], ...] = ((0, 1.0), (10, 0.5), (20, 0.3))
    lambda_adapt_rate: float = 1.25
    lambda_adapt_margin: float = 0.05
    lambda_min: float = 0.05
    lambda_max: float = 2.0
    loss_ratio_band: tuple[float, float] = (0.5, 2.0)
    wm_replay_capacity: int = 5000
    wm_replay_fraction: float = 0.2
    wm_confidence_skip: float | None = None
    wm_max_context_tokens: int | None = None
    wm_max_calls: int | None = None
    wm_chunk_size: int = WM_CHUNK_SIZE_DEFAULT  # deprecated: ignored
    output_dir: str = "runs/dual_lora"

    def __post_init__(self) -> None:
        if self.adapter_targets != "custom":
            self.lora_target_modules = ADAPTER_TARGETS.get(self.adapter_targets, ())
        self.lambda_steps = tuple((int(step), float(value)) for step, value in self.lambda_steps)
        self.loss_ratio_band = tuple(self.loss_ratio_band)  # type: ignore[assignment]
        super().__post_init__()
        check_choice("adapter_targets", self.adapter_targets, ("qvo", "all-linear", "custom"))
        check_choice("transfer", self.transfer, ("separate", "stacked", "shared", "iwm", "echo"))
        check_choice("lambda_schedule", self.lambda_schedule, ("constant", "step", "adaptive"))
        check_choice("imagined_reply_reading", self.imagined_reply_reading, ("exact", "nearest"))
        check_field(self.finetune == "lora", "finetune", self.finetune,
                    "use 'lora': both adapters sit on one frozen base")
        check_range("lora_dropout", self.lora_dropout, 0.0, 1.0, high_open=True)
        check_range("wm_replay_fraction", self.wm_replay_fraction, 0.0, 1.0, high_open=True)
        for name in ("wm_coef", "iwm_steps", "wm_replay_capacity", "lambda_min", "wm_warmup_updates"):
            check_range(name, getattr(self, name), 0, None)
        if self.wm_learning_rate is not None:
            check_range("wm_learning_rate", self.wm_learning_rate, 0, None, low_open=True)
        check_field(self.lambda_min <= self.lambda_max, "lambda_max", self.lambda_max,
                    f"use a value >= lambda_min={self.lambda_min}")
        check_field(self.lambda_adapt_rate >= 1, "lambda_adapt_rate", self.lambda_adapt_rate,
                    "use >= 1 (λ is multiplied or divided by it)")
        check_field(self.lambda_schedule != "step" or (bool(self.lambda_steps) and self.lambda_steps[0][0] == 0),
                    "lambda_steps", self.lambda_steps, "start at step 0, e.g. ((0, 1.0), (10, 0.5))")
        low, high = self.loss_ratio_band
        check_field(0 < low < high, "loss_ratio_band", self.loss_ratio_band, "use (low, high) with 0 < low < high")
        if self.wm_confidence_skip is not None:
            check_range("wm_confidence_skip", self.wm_confidence_skip, 0.0, 1.0)
        for name in ("wm_max_context_tokens", "wm_max_calls"):
            if getattr(self, name) is not None:
                check_positive_int(name, getattr(self, name))
        check_positive_int("wm_chunk_size", self.wm_chunk_size)
        if self.wm_chunk_size != WM_CHUNK_SIZE_DEFAULT:
            warnings.warn("DualLoRAConfig.wm_chunk_size is deprecated and ignored: the world model scores one pack "
                          "of a conversation's phone calls per forward", DeprecationWarning, stacklevel=3)
        check_field(not self.clip_per_adapter or len(self.adapter_names) == 2, "clip_per_adapter",
                    self.clip_per_adapter, f"use False with transfer={self.transfer!r} (one adapter)")
        check_range("imagined_fraction", self.imagined_fraction, 0.0, 1.0)
        check_positive_int("imagined_reply_tokens", self.imagined_reply_tokens)
        check_field(not self.wm_token_rows or self.transfer != "echo", "wm_token_rows", self.wm_token_rows,
                    "use False with transfer='echo' (its replies need no markers)")
        if self.imagined_fraction > 0:
            check_field(self.vectorization_mode == "none" and self.runtime == "local", "imagined_fraction",
                        self.imagined_fraction, "use 0 with vectorization_mode != 'none' or runtime='ray' "
                        "(imagined calls are answered in this process, in a pool of single envs)")
            check_field(self.transfer != "iwm", "imagined_fraction", self.imagined_fraction,
                        "use 0 with transfer='iwm' (its world model trains on the policy adapter first)")
        check_positive_int("wm_warmup_chats_per_update", self.wm_warmup_chats_per_update)
        if self.wm_warmup_updates:
            check_field("world_model" in self.adapter_names, "wm_warmup_updates", self.wm_warmup_updates,
                        f"use 0 with transfer={self.transfer!r} (it has no world-model adapter of its own)")
            check_field(self.learner == "single", "wm_warmup_updates", self.wm_warmup_updates,
                        f"use 0 with learner={self.learner!r} (the warm-up runs in one process)")
        check_field(self.transfer != "iwm" or self.iwm_steps < self.num_steps, "iwm_steps", self.iwm_steps,
                    f"use fewer than num_steps={self.num_steps}, or no DAPO step would run")
        check_field(self.learner == "single" or self.lambda_schedule != "adaptive", "lambda_schedule",
                    self.lambda_schedule, f"use 'constant' or 'step' with learner={self.learner!r}: the "
                    "adaptive rule's baseline comes from validation, which rank 0 alone runs, so the ranks' "
                    "λ would differ")

    @property
    def echo_weight(self) -> float:
        """``echo_coef`` under transfer "echo", else 0."""
        return self.echo_coef if self.transfer == "echo" else 0.0

    @property
    def adapter_names(self) -> tuple[str, ...]:
        """The adapters this transfer mode builds (``"shared"``/``"iwm"``/``"echo"``: the policy adapter
        only)."""
        return ("policy",) if self.transfer in ("shared", "iwm", "echo") else ("policy", "world_model")

    @property
    def policy_adapters(self) -> tuple[str, ...]:
        """The adapters the policy's forward (and every rollout) uses."""
        return ("policy", "world_model") if self.transfer == "stacked" else ("policy",)

    @property
    def world_model_adapter(self) -> str:
        """The adapter the world-model loss trains through."""
        return "world_model" if "world_model" in self.adapter_names else "policy"

