"""``DualLoRATrainer``: DAPO on a policy LoRA plus a world-model LoRA, one frozen base, ``L = L_policy + λ·L_wm``.

The GRPO trainer does the rollouts, rewards, DAPO loss, optimiser step and checkpoints; this trainer builds the
two adapters and plugs the world model in through the GRPO trainer's auxiliary-loss hook (one AdamW over both
adapters, one backward, one grad-norm clip over every trainable tensor).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from peft import PeftModel
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from worldgym.agents.dual_lora.config import WM_SPECIAL_TOKENS, DualLoRAConfig
from worldgym.agents.dual_lora.imagination import PhoneCallImagination, reply_stops
from worldgym.agents.dual_lora.objective import WorldModelObjective
from worldgym.agents.dual_lora.transcripts import add_predicted_replies
from worldgym.agents.dual_lora.warmup import chat_phone_calls, warm_up_world_model
from worldgym.agents.dual_lora.world_model import wm_token_ids
from worldgym.agents.grpo.rewards import EpisodeRewardFn
from worldgym.agents.grpo.trainer import GRPOTrainer
from worldgym.agents.llm.adapters import activate_adapters, of_adapter, save_adapter_flat, seeded_lora
from worldgym.agents.llm.engines import GenerationEngine, HFEngine
from worldgym.agents.llm.rollout import Episode
from worldgym.agents.llm.sft import Chat
from worldgym.agents.llm.warm_start import demonstrations, expert_options

__all__ = ["DualLoRATrainer", "attach_adapters", "wm_success_correlation"]

logger = logging.getLogger(__name__)


def attach_adapters(model: PreTrainedModel, config: DualLoRAConfig,
                    tokenizer: PreTrainedTokenizerBase | None = None) -> PeftModel:
    """Freeze ``model`` and put the config's adapters on it (a ``PeftModel`` warm start's adapter is merged into
    the base first), the policy's adapters active, every adapter trainable. Seeded by ``config.seed``. With
    ``config.wm_token_rows`` the world model's adapter trains the rows of the markers (``tokenizer``'s ids)."""
    if isinstance(model, PeftModel):
        model = model.merge_and_unload()
    options = {}
    if config.wm_token_rows:
        if tokenizer is None:
            raise ValueError("wm_token_rows needs the tokenizer, to find the world model's markers")
        options[config.world_model_adapter] = {"trainable_token_indices": list(wm_token_ids(tokenizer))}
    peft_model = seeded_lora(model, config.seed, rank=config.lora_rank, alpha=config.lora_alpha,
                             target_modules=config.lora_target_modules, dropout=config.lora_dropout,
                             adapter_names=config.adapter_names, adapter_options=options)
    activate_adapters(peft_model, config.policy_adapters, trainable=config.adapter_names)
    return peft_model


class DualLoRATrainer(GRPOTrainer):
    """The dual-LoRA world-model agent (see :class:`DualLoRAConfig` for the transfer modes).

    Args:
        config: the settings.
        model: the warm start to build on (a full model, or a ``PeftModel`` whose adapter is merged into the
            frozen base). Default: a tiny model built from config, or ``config.model`` loaded by name.
        tokenizer: its tokenizer, with the world model's markers (``WM_SPECIAL_TOKENS``).
        make_env: as for :class:`GRPOTrainer`.
        make_eval_env: as for :class:`GRPOTrainer`.
        make_engine: as for :class:`GRPOTrainer`; the engine gets the policy model with only the policy's
            adapters active.
        reward_fn: as for :class:`GRPOTrainer`.
        world_model_chats: the chats whose phone calls ``config.wm_warmup_updates`` warm the world model up on
            (e.g. :func:`~worldgym.agents.llm.warm_start.expert_chats` of the warm start: calls of tasks the
            policy has already seen). Default: the env's registered expert on as many train-split tasks as the
            warm-up uses chats.

    >>> trainer = DualLoRATrainer(DualLoRAConfig(env_id="CSRPhone-v1", max_turns=2,
    ...     env_kwargs={"difficulty": 1}, num_steps=1, prompts_per_step=1, group_size=2, max_new_tokens=8,
    ...     eval_every=0, progress=False, output_dir="/tmp/wg_dual_lora_doctest"))
    >>> sorted(trainer.world_model.config.adapter_names)
    ['policy', 'world_model']
    """

    config: DualLoRAConfig
    special_tokens = WM_SPECIAL_TOKENS

    def __init__(
        self,
        config: DualLoRAConfig,
        model: PreTrainedModel | None = None,
        tokenizer: PreTrainedTokenizerBase | None = None,
        make_env: Callable[[], gym.Env] | None = None,
        make_eval_env: Callable[[], gym.Env] | None = None,
        make_engine: Callable[[PreTrainedModel], GenerationEngine] | None = None,
        reward_fn: EpisodeRewardFn | None = None,
        world_model_chats: Sequence[Chat] | None = None,
    ):
        if not isinstance(config, DualLoRAConfig):
            raise TypeError(f"DualLoRATrainer needs a DualLoRAConfig, got {type(config).__name__}")
        super().__init__(config, model, tokenizer, make_env, make_eval_env, make_engine, reward_fn)
        # evaluated in every mode; trained beside the policy loss except under "echo", where the policy loss's
        # own forward pass learns the replies (GRPOConfig.echo_weight)
        self.world_model = WorldModelObjective(self.policy, self.tokenizer, config)
        self.auxiliary_loss = None if config.transfer == "echo" else self.world_model
        if config.imagined_fraction > 0:
            self.collector.step_override = PhoneCallImagination(
                self.policy, self.tokenizer, config, self.make_env().unwrapped.action_space, self.dtype)
        self._ratio_outside = False
        self._reply_engine: HFEngine | None = None  # the world model's replies in transcripts, built on first use
        self.world_model_chats = world_model_chats
        self._warmup_metrics: dict[str, float] | None = None  # once the warm-up is done

    def _sync_weights(self) -> None:
        """The GRPO sync; the imagined replies' engine also drops its stored KV, which the old weights
        computed."""
        super()._sync_weights()
        if isinstance(self.collector.step_override, PhoneCallImagination):
            self.collector.step_override.engine.sync_weights()

    def _make_optimizer(self) -> torch.optim.Optimizer:
        """One AdamW over both adapters; with ``wm_learning_rate`` the world model's tensors are a second
        parameter group with their own learning rate."""
        config = self.config
        if config.wm_learning_rate is None or "world_model" not in config.adapter_names:
            return super()._make_optimizer()
        policy, world_model = self._adapter_groups()
        return torch.optim.AdamW([{"params": policy}, {"params": world_model, "lr": config.wm_learning_rate}],
                                 lr=config.learning_rate, weight_decay=config.weight_decay)

    def evaluation_metrics(self, episodes: list[Episode]) -> dict[str, float]:
        """The GRPO validation metrics and the world model's (under "echo" too: scored in the episodes' own
        sequences)."""
        metrics = super().evaluation_metrics(episodes)
        if self.auxiliary_loss is None:
            metrics.update(self.world_model.evaluate(episodes))
        return metrics

    def log_initial_validation(self, validation: dict[str, Any]) -> None:
        """The GRPO trainer's shared step-0 validation; its world-model token accuracy becomes the adaptive λ's
        baseline, as a computed first validation's would."""
        super().log_initial_validation(validation)
        if "eval/wm_token_accuracy" in validation:
            self.world_model.schedule.observe_validation(validation["eval/wm_token_accuracy"])

    def clip_and_step(self) -> torch.Tensor:
        """The GRPO step; with ``clip_per_adapter`` each adapter's gradient is clipped to ``grad_clip`` on its
        own (returns the norm of both together, before clipping, as the shared clip does)."""
        if not self.config.clip_per_adapter:
            return super().clip_and_step()
        norms = [torch.nn.utils.clip_grad_norm_(group, self.config.grad_clip) for group in self._adapter_groups()]
        self.optimizer.step()
        return torch.stack(norms).norm()

    def _adapter_groups(self) -> list[list[torch.Tensor]]:
        """The trainable tensors of the policy's adapter and of the world model's."""
        world_model = [p for name, p in self.trainable.items() if of_adapter(name, "world_model")]
        policy = [p for name, p in self.trainable.items() if not of_adapter(name, "world_model")]
        return [policy, world_model]

    def _with_adapter(self, model: PreTrainedModel) -> PeftModel:
        return attach_adapters(model, self.config, self.tokenizer)

    def train_step(self) -> dict[str, Any]:
        """One DAPO step with the world-model loss; logs ``wm/loss_ratio`` = L_wm / |L_policy| and warns when it
        leaves ``config.loss_ratio_band`` while nothing else bounds the world model's share of the gradient (not
        with ``clip_per_adapter``, where each adapter is clipped on its own, nor with ``auxiliary_grad_ratio``,
        which caps the world model's gradient against the policy's)."""
        warmup = self._warm_up_once() if self.step == 0 and self.config.wm_warmup_updates else {}
        metrics = super().train_step() | warmup
        if "loss/world_model" in metrics and metrics.get("loss/policy") and self.world_model.policy_weight > 0:
            ratio = metrics["loss/world_model"] / max(abs(metrics["loss/policy"]), 1e-8)
            metrics["wm/loss_ratio"] = ratio
            low, high = self.config.loss_ratio_band
            bounded = self.config.clip_per_adapter or self.config.auxiliary_grad_ratio is not None
            outside = not low <= ratio <= high and not bounded
            if outside and not self._ratio_outside:
                logger.warning("step %d: L_wm / |L_policy| = %.3g left [%g, %g]: one loss dominates the shared "
                               "gradient clip (tune wm_coef or the schedule)", self.step, ratio, low, high)
            self._ratio_outside = outside
        return metrics

    def _warm_up_once(self) -> dict[str, float]:
        """The world model's warm-up before the first step, then (with ``checkpoint_every``) ``checkpoint-0``,
        from which a resume goes on to the first step without warming up again; the warm-up's metrics, for
        the first step's row."""
        if self._warmup_metrics is None:
            self._warmup_metrics = self.warm_up_world_model()
            if self.config.checkpoint_every:
                self.checkpoints.save_step(0, self.save)
        return self._warmup_metrics

    def extra_checkpoint_state(self) -> dict[str, Any]:
        """Before the first step, the finished warm-up's metrics (a resume skips the warm-up)."""
        return {"wm_warmup": self._warmup_metrics} if self.step == 0 and self._warmup_metrics is not None else {}

    def load_extra_checkpoint_state(self, state: dict[str, Any]) -> None:
        self._warmup_metrics = state.get("wm_warmup")

    def warm_up_world_model(self) -> dict[str, float]:
        """``config.wm_warmup_updates`` updates of the world model's adapter alone on the phone calls of
        ``world_model_chats`` (:mod:`worldgym.agents.dual_lora.warmup`); its metrics for the first step's row."""
        config = self.config
        start = time.perf_counter()
        chats = self.world_model_chats
        if chats is None:
            first = config.seed * 10**6
            chats = demonstrations(config.env_id, {**config.env_kwargs, "split": "train"},
                                   range(first, first + config.wm_warmup_updates * config.wm_warmup_chats_per_update),
                                   max_turns=config.max_turns, **expert_options(config.env_id, config.seed))
        examples = chat_phone_calls(chats, self.tokenizer, config.wm_max_context_tokens)
        world_model = self._adapter_groups()[1]
        losses = warm_up_world_model(
            self.policy, config.world_model_adapter, config.adapter_names, examples, self.optimizer,
            lambda: torch.nn.utils.clip_grad_norm_(world_model, config.grad_clip), config.wm_warmup_updates,
            config.wm_warmup_chats_per_update, config.seed, progress=config.progress and self.is_main)
        self._sync_weights()
        return {"wm_warmup/loss_first": losses[0], "wm_warmup/loss_last": losses[-1],
                "wm_warmup/calls": float(sum(map(len, examples))), "time/wm_warmup_s": time.perf_counter() - start}

    def transcript_records(self, episodes: list[Episode]) -> list[dict[str, Any]]:
        """The GRPO transcript lines, each real phone call's answer with the world model's ``predicted_reply``
        beside it (greedy, from the conversation up to the call)."""
        records = super().transcript_records(episodes)
        if self._reply_engine is None:  # its own KV caches, stopping at the end of a reply
            stops = reply_stops(self.tokenizer, self.config)
            self._reply_engine = HFEngine(self.policy, self.tokenizer.pad_token_id, stops, dtype=self.dtype)
        add_predicted_replies(records, episodes, self.policy, self.tokenizer, self.config, self._reply_engine)
        return records

    def save_policy_adapter(self, path: str | Path) -> Path:
        """The policy adapter alone, as a flat PEFT folder (what a vLLM ``LoRARequest`` or
        ``PeftModel.from_pretrained`` loads). ``"stacked"`` rollouts also need the world-model adapter."""
        return save_adapter_flat(self.policy, "policy", path)


def wm_success_correlation(history: list[dict[str, Any]]) -> float | None:
    """Pearson correlation between the world model's validation token accuracy and the policy's validation
    success over the evaluations in ``history`` (None with fewer than 3, or when either is constant)."""
    rows = [(m["eval/wm_token_accuracy"], m["eval/success_rate"]) for m in history
            if "eval/wm_token_accuracy" in m and "eval/success_rate" in m]
    if len(rows) < 3:
        return None
    accuracy, success = np.array(rows).T
    if accuracy.std() == 0 or success.std() == 0:
        return None
    return float(np.corrcoef(accuracy, success)[0, 1])
