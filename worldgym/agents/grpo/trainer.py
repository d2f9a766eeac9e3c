"""``GRPOTrainer``: rollout -> rewards -> group advantages -> clipped token-level updates -> weight sync."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch
from peft import PeftModel
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from worldgym.agents.grpo.auxiliary import SINGLE_PROCESS, AuxiliaryLoss, LossShard
from worldgym.agents.grpo.config import GRPOConfig
from worldgym.agents.grpo.echo import EchoTargets, echo_loss
from worldgym.agents.grpo.learner import SINGLE_PROCESS_LEARNER, Learner
from worldgym.agents.grpo.rewards import EpisodeRewardFn, episode_rewards
from worldgym.agents.grpo.step import MinibatchLoss, longest_sequence, loss_shares, step_on_minibatch
from worldgym.agents.llm.adapters import (
    activation_checkpointing_paused,
    enable_activation_checkpointing,
    seeded_lora,
)
from worldgym.agents.llm.allocator import map_large_allocations_on_cpu, release_free_heap_on_cpu
from worldgym.agents.llm.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from worldgym.agents.llm.engines import GenerationEngine, HFEngine, SamplingParams
from worldgym.agents.llm.envs import make_text_env
from worldgym.agents.llm.evaluation import VALIDATION_SEEDS_START, episode_metrics
from worldgym.agents.llm.export import save_policy_base
from worldgym.agents.llm.loading import build_or_load_chat_model
from worldgym.agents.llm.losses import (
    dynamic_sampling_mask,
    entropy_from_logits,
    group_advantages,
    policy_loss,
    truncated_importance_weights,
)
from worldgym.agents.llm.models import TINY_SIZES, build_tiny_model
from worldgym.agents.llm.rollout import Episode, RolloutCollector, Turn, collate_episodes, make_vector_env
from worldgym.agents.llm.runtime import LocalRollouts, RolloutBatch, RolloutRuntime
from worldgym.agents.llm.scoring import score_tokens
from worldgym.agents.llm.tokenizer import env_text_corpus
from worldgym.agents.llm.transcripts import episode_record
from worldgym.checkpointing import LAST_CHECKPOINT, load_latest
from worldgym.jsonl import append_jsonl, truncate_jsonl
from worldgym.precision import autocast, cast_for_training, dtype_name, recomputes_old_logprobs, resolve_dtype
from worldgym.retention import CheckpointKeeper, prune_run_files
from worldgym.segment_store import SEGMENT_FILES
from worldgym.tracking import Tracker, make_tracker
from worldgym.transcripts import TRAIN_EPISODES_PER_STEP, write_transcript

if TYPE_CHECKING:
    from worldgym.distributed.data_parallel import DataParallelLearner

__all__ = ["GRPOTrainer", "MinibatchLoss", "TrainBatch", "loss_shares"]

_AUXILIARY = "auxiliary/"  # checkpoint key prefix of the auxiliary loss's tensors
# a validation row's per-episode successes (seed order): a list, so kept apart from the float ``eval/*`` figures
EPISODE_SUCCESS_KEY = "validation/episode_success"
_PRINTED_EVAL_KEYS = ("eval/success_rate", "eval/reward_mean", "eval/copy_probe", "eval/wm_token_accuracy")


@dataclass
class TrainBatch:
    """A step's training data, ready for the update: ``batch`` as :func:`collate_episodes` pads it (row ``i``
    is episode ``i``), ``advantages`` ``[B]`` and the shaped ``rewards`` ``[B]`` they came from."""

    batch: dict[str, Any]
    advantages: torch.Tensor
    rewards: torch.Tensor


@dataclass
class _ScoreInputs:
    """Some rows of a training batch, cut to ``width`` tokens, as :func:`score_tokens` takes them."""

    width: int
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    mask: torch.Tensor
    group_ids: torch.Tensor | None
    allowed: list[dict[int, list[int]]]


@dataclass
class _Round:
    """A submitted round of rollouts: its tasks and sampling (kept to generate them again) and the request."""

    seeds: list[int]
    params: SamplingParams
    first_group_id: int
    request: Any = None


def default_engine(pad_token_id: int, eos_token_id: int, min_shared_prefix: int, policy: PreTrainedModel,
                   dtype: torch.dtype | None = None) -> HFEngine:
    """The trainer's default engine: :class:`HFEngine` on ``policy`` computing in ``dtype`` (None: the
    policy's frozen weights' dtype); a module-level function, so rollout workers can build the same engine on
    their copy."""
    return HFEngine(policy, pad_token_id, [eos_token_id], min_shared_prefix=min_shared_prefix, dtype=dtype)


class GRPOTrainer:
    """GRPO / DAPO / Dr.GRPO on any worldgym text env.

    Args:
        config: the settings.
        model: a causal LM to train (default: built or loaded from ``config.model`` by
            :func:`~worldgym.agents.llm.loading.build_or_load_chat_model`, the tokenizer of a tiny model trained
            on the training env's text).
        tokenizer: its chat tokenizer (left padding, an eos that ends assistant turns); given without a model,
            a tiny ``config.model`` is built for it.
        make_env: the training env factory (default: ``config.env_id`` with ``env_kwargs``).
        make_eval_env: the validation env factory (default: ``config.env_id`` with
            ``env_kwargs | eval_env_kwargs``).
        make_engine: builds the generation engine from the policy once it exists (default:
            :class:`HFEngine` on it), e.g. ``lambda policy: VLLMEngine("Qwen/Qwen3-8B", peft_model=policy)``.
        reward_fn: the training reward of a finished episode (reward shaping, e.g. partial credit read from
            the turns' infos); default: the env's reward. Metrics and validation always report the env's
            reward and success.
        auxiliary_loss: an objective added to every minibatch's loss in the same backward pass
            (:class:`~worldgym.agents.grpo.auxiliary.AuxiliaryLoss`, e.g. the dual-LoRA world model); also
            settable after construction as ``trainer.auxiliary_loss``.

    >>> trainer = GRPOTrainer(GRPOConfig(num_steps=2, prompts_per_step=2, group_size=2, max_new_tokens=8,
    ...                                   eval_every=0, progress=False, output_dir="/tmp/wg_grpo_doctest"))
    >>> history = trainer.train()
    >>> [row["step"] for row in history], "rollout/reward_mean" in history[-1]
    ([1, 2], True)
    """

    # atomic tokens a tokenizer built or loaded here gets (a subclass's markers)
    special_tokens: tuple[str, ...] = ()

    def __init__(
        self,
        config: GRPOConfig,
        model: PreTrainedModel | None = None,
        tokenizer: PreTrainedTokenizerBase | None = None,
        make_env: Callable[[], gym.Env] | None = None,
        make_eval_env: Callable[[], gym.Env] | None = None,
        make_engine: Callable[[PreTrainedModel], GenerationEngine] | None = None,
        reward_fn: EpisodeRewardFn | None = None,
        auxiliary_loss: AuxiliaryLoss | None = None,
    ):
        self.config = config
        self.dtype = resolve_dtype(config.dtype, config.device)  # what "auto" means on this machine
        map_large_allocations_on_cpu(config.device, config.cpu_mmap_threshold)
        self.rank = _join_learner_group(config)
        self.reward_fn = reward_fn
        self.auxiliary_loss = auxiliary_loss
        self.echo_targets: EchoTargets | None = None  # the step's echo targets (echo_coef > 0)
        self.rng = np.random.default_rng(config.seed)
        self.make_env = make_env or partial(make_text_env, config.env_id, config.env_kwargs)
        eval_kwargs = {**config.env_kwargs, **config.eval_env_kwargs}
        self.make_eval_env = make_eval_env or partial(make_text_env, config.env_id, eval_kwargs)
        self.tokenizer, model = self._model_and_tokenizer(model, tokenizer)
        self.policy = self._prepare_policy(model).to(config.device)
        if config.activation_checkpointing:  # only in training mode: generation (eval mode) keeps its KV cache
            enable_activation_checkpointing(self.policy)
        self.trainable = {name: p for name, p in self.policy.named_parameters() if p.requires_grad}
        if not self.trainable:
            raise ValueError(
                f"GRPOTrainer: the model has no trainable tensor (finetune={config.finetune!r}); its weights are "
                "frozen, e.g. by peft's merge_and_unload(): call model.requires_grad_(True), or use finetune='lora'"
            )
        self.optimizer = self._make_optimizer()
        self.reference = self._frozen_reference(model)
        make_engine = make_engine or partial(
            default_engine, self.tokenizer.pad_token_id, self.tokenizer.eos_token_id,
            config.min_shared_prefix if config.share_prompt_prefix else 0, dtype=self.dtype,
        )
        self.engine = make_engine(self.policy)
        self.rollout_limits = {"max_turns": config.max_turns, "max_episode_tokens": config.max_episode_tokens,
                               "decoding": config.decoding}
        if config.vectorization_mode == "none" or config.runtime == "ray":
            train_envs: dict[str, Any] = {"make_env": self.make_env}
        else:  # one sub-env per episode of a step
            num_envs = config.prompts_per_step * config.group_size
            train_envs = {"vector_env": make_vector_env(self.make_env, num_envs, config.vectorization_mode)}
        self.collector = RolloutCollector(self.engine, self.tokenizer, **train_envs, **self.rollout_limits)
        self.eval_collector = RolloutCollector(self.engine, self.tokenizer, self.make_eval_env,
                                              **self.rollout_limits)
        self.rollouts = self._make_rollouts(make_engine)
        self._pending: _Round | None = None  # async rollouts: the next step's first round, already running
        self.parallel = _data_parallel_learner(self)  # learner "ddp"/"fsdp": this rank's part of the updates
        self.step = 0
        self.output_dir = Path(config.output_dir)
        # shared: the replay segments an auxiliary loss stores once per run (AuxiliaryLoss.state)
        self.checkpoints = CheckpointKeeper(self.output_dir, config.save_total_limit, config.metric_for_best_model,
                                            config.greater_is_better, prunes=self.is_main, shared=(SEGMENT_FILES,))
        self.history: list[dict[str, Any]] = []
        self.last_episode_success: list[float] = []  # each episode's success in the last evaluate(), seed order
        self.last_validation_scoring_s = 0.0  # seconds of the last evaluate()'s metrics after its episodes
        self._episodes: dict[str, list[Episode]] = {}  # the newest validation's and training step's, for transcripts
        self.tracker: Tracker | None = None  # config.report_to's backends, opened by train()

    # ---------------------------------------------------------------- setup
    def _model_and_tokenizer(self, model, tokenizer):
        config = self.config
        if model is not None:
            if tokenizer is None:
                raise ValueError(
                    "GRPOTrainer got a model but no tokenizer; pass the tokenizer the model was built for"
                )
            return tokenizer, model
        if tokenizer is not None:
            if config.model not in TINY_SIZES:
                raise ValueError(f"GRPOTrainer got a tokenizer but no model for model={config.model!r}, which "
                                 "loads its own tokenizer: pass both, or neither")
            return tokenizer, build_tiny_model(tokenizer, config.model, seed=config.seed, dtype=self.dtype)
        loaded = build_or_load_chat_model(config.model, partial(env_text_corpus, self.make_env), seed=config.seed,
                                          dtype=self.dtype, extra_special_tokens=self.special_tokens)
        return loaded.tokenizer, loaded.model

    def _make_rollouts(self, make_engine: Callable[[PreTrainedModel], GenerationEngine]) -> RolloutRuntime:
        """Where training rollouts run (``config.runtime``): this process, or Ray workers built from copies of
        the policy, the env factory and the engine factory."""
        config = self.config
        if config.runtime == "local" or self.rank != 0:  # data-parallel: rank 0 alone runs rollouts
            return LocalRollouts(self.collector)
        from worldgym.agents.llm.ray_rollouts import RayRollouts, WorkerSpec

        return RayRollouts(
            WorkerSpec(self.policy, self.tokenizer, self.make_env, make_engine, self.rollout_limits),
            num_workers=config.num_rollout_workers,
            worker_resources={"num_cpus": config.rollout_worker_cpus, "num_gpus": config.rollout_worker_gpus},
            max_restarts=config.max_worker_restarts, address=config.ray_address,
        )

    def _prepare_policy(self, model: PreTrainedModel) -> PreTrainedModel:
        """The model to train, its frozen weights in the trainer's dtype and trainable ones in float32."""
        return cast_for_training(self._with_adapter(model), self.dtype)

    def _with_adapter(self, model: PreTrainedModel) -> PreTrainedModel:
        config = self.config
        if config.finetune == "full" or isinstance(model, PeftModel):
            return model
        return seeded_lora(model, config.seed, rank=config.lora_rank, alpha=config.lora_alpha,
                           target_modules=config.lora_target_modules)

    def rebuild_optimizer(self) -> None:
        """Collect the policy's trainable tensors again and build a fresh optimizer over them: for a learner that
        replaced the policy's parameters (FSDP shards them in place)."""
        self.trainable = {name: p for name, p in self.policy.named_parameters() if p.requires_grad}
        self.optimizer = self._make_optimizer()

    def _make_optimizer(self) -> torch.optim.Optimizer:
        """AdamW over the trainable tensors (a subclass may split them into parameter groups)."""
        return torch.optim.AdamW(
            list(self.trainable.values()), lr=self.config.learning_rate, weight_decay=self.config.weight_decay
        )

    def _frozen_reference(self, model: PreTrainedModel) -> PreTrainedModel | None:
        """A frozen copy for the KL term, needed only for full fine-tuning (LoRA disables its adapters
        instead)."""
        if self.config.kl_coef == 0 or isinstance(self.policy, PeftModel):
            return None
        reference = copy.deepcopy(model).eval()
        reference.requires_grad_(False)
        return cast_for_training(reference, self.dtype)

    # ---------------------------------------------------------------- loop
    @property
    def is_main(self) -> bool:
        """Whether this process validates, logs and saves (the only one, or rank 0 of a data-parallel group)."""
        return self.rank == 0

    def train(self, until: int | None = None) -> list[dict[str, Any]]:
        """Run until step ``until`` (default and at most ``config.num_steps``; a later call continues from
        there, so a caller can act between chunks); returns the metrics of every step so far (also in
        ``metrics.jsonl``)."""
        config = self.config
        main = self.is_main
        until = config.num_steps if until is None else min(until, config.num_steps)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        fresh = self.step == 0 and not self.history
        if main and self.tracker is None:
            self.tracker = make_tracker(config.report_to, self.output_dir, config.to_dict(),
                                        None if fresh else self.step)
        if fresh:  # a fresh run starts a fresh log; a resumed (or continued) one appends
            if main:
                (self.output_dir / "metrics.jsonl").write_text("")
                if config.learner != "fsdp":  # what `worldgym export` rebuilds (FSDP holds only shards here)
                    save_policy_base(self.output_dir, self.policy, self.tokenizer)
            validation = self._timed_validation() if config.eval_every else {}
            if main and config.eval_every:
                self._log({"step": 0, **validation, **self._write_transcripts(validated=True)})
                if self.parallel is None:
                    self.checkpoints.save_best(self.history, self.save)
        with tqdm(total=config.num_steps, initial=self.step, desc="grpo", disable=not (config.progress and main)
                  ) as bar:
            while self.step < until:
                metrics = self.train_step()
                validated = bool(config.eval_every) and self.step % config.eval_every == 0
                if validated:
                    metrics.update(self._timed_validation())
                metrics.update(self._write_transcripts(validated))
                self._log(metrics)
                if config.checkpoint_every and self.step % config.checkpoint_every == 0:
                    self.checkpoints.save_step(self.step, self.save)
                if self.parallel is None:  # a data-parallel group keeps no best checkpoint: ranks would disagree
                    self.checkpoints.save_best(self.history, self.save)
                bar.update(1)
                bar.set_postfix(reward=f"{metrics['rollout/reward_mean']:.3f}")
        self.save(self.output_dir / LAST_CHECKPOINT)
        return [m for m in self.history if "rollout/reward_mean" in m]

    def train_step(self) -> dict[str, Any]:
        """One GRPO iteration: :meth:`collect_batch`, :meth:`prepare`, :meth:`update`, then sync the rollout
        weights. With ``async_rollouts`` the next step's first round is submitted before the update, so the
        rollout workers generate while the learner trains."""
        start = time.perf_counter()
        episodes, rollout_metrics = self.collect_batch()
        release_free_heap_on_cpu(self.config.device, self.config.cpu_release_heap)  # the rollouts' KV caches
        self._episodes["train"] = episodes
        rollout_end = time.perf_counter()
        rollout_time = rollout_end - start
        prepared = self.prepare(episodes)
        update_start = time.perf_counter()
        if self.config.async_rollouts and self.step + 1 < self.config.num_steps:
            self._pending = self._submit_round(0, self._first_round_prompts)
        if self._nothing_to_learn(prepared):
            update_metrics = {"loss/skipped_update": 1.0}
        else:
            update_metrics = (self.parallel or self).update(prepared)
        self.step += 1
        sync_start = time.perf_counter()
        self._sync_weights()
        end = time.perf_counter()
        tokens = int(prepared.batch["attention_mask"].sum())
        workers = self.rollouts.num_workers
        return {
            "step": self.step,
            **rollout_metrics,
            **update_metrics,
            "rollout/shaped_reward_mean": prepared.rewards.mean().item(),
            "perf/gen_tokens_per_s": rollout_metrics["rollout/model_tokens"] / max(rollout_time, 1e-9),
            "perf/train_tokens_per_s": tokens * self.config.ppo_epochs / max(sync_start - update_start, 1e-9),
            "perf/step_tokens_per_s": tokens / max(end - start, 1e-9),
            "perf/worker_utilisation": rollout_metrics["time/worker_busy_s"] / max((end - start) * workers, 1e-9),
            "time/rollout_s": rollout_time,
            "time/prepare_s": update_start - rollout_end,
            "time/update_s": sync_start - update_start,
            "time/sync_s": end - sync_start,
            "time/step_s": end - start,
        }

    def _nothing_to_learn(self, prepared: TrainBatch) -> bool:
        """Whether an update would compute a zero loss: every advantage is 0 (no group's rewards differed, even
        after resampling), and no auxiliary objective, echo, KL or entropy term adds anything. The update is skipped
        then (logged as ``loss/skipped_update``): it would be a full forward and backward pass for AdamW's weight
        decay alone (641 s of a SmolLM2 d3 step whose 32 sampled episodes all failed). Single learner only: the
        ranks of a data-parallel one see different shares and must all step."""
        config = self.config
        return (self.parallel is None and self.auxiliary_loss is None and config.kl_coef == 0
                and config.entropy_coef == 0 and config.echo_weight == 0 and not bool(prepared.advantages.any()))

    def _sync_weights(self) -> None:
        """The trainer's own engine (validation, in-process rollouts) and the rollout runtime get the current
        weights, as version ``self.step`` (Ray workers get whole tensors, gathered by every rank of a sharded
        learner)."""
        self.engine.sync_weights()
        remote = self.parallel is not None and self.config.runtime == "ray"
        self.rollouts.sync_weights(self.step, self.parallel.full_trainable() if remote else self.trainable)

    def _validate(self) -> dict[str, Any]:
        """:meth:`evaluate`'s metrics and each episode's success (:data:`EPISODE_SUCCESS_KEY`) on rank 0 (``{}``
        on the other ranks, which help gather the weights)."""
        if self.parallel is None:
            return self.validation_row()
        with self.parallel.full_weights():
            return self.validation_row() if self.is_main else {}

    def _timed_validation(self) -> dict[str, Any]:
        """:meth:`_validate`'s row with its seconds, ``time/validation_s``."""
        start = time.perf_counter()
        row = self._validate()
        return {**row, "time/validation_s": time.perf_counter() - start} if row else row

    def validation_row(self) -> dict[str, Any]:
        """The row a validation logs: :meth:`evaluate`'s metrics, each episode's success and the seconds of the
        metrics after the episodes (``time/validation_scoring_s``)."""
        metrics = self.evaluate()
        return {**metrics, EPISODE_SUCCESS_KEY: list(self.last_episode_success),
                "time/validation_scoring_s": self.last_validation_scoring_s}

    def log_initial_validation(self, validation: dict[str, Any]) -> None:
        """Log ``validation`` (a :meth:`train` validation row's figures) as this fresh run's step-0 validation
        instead of computing it: runs that start from the same weights can share one. :meth:`train` then starts
        with the first step.

        Raises:
            ValueError: the run has already started (a step taken or something logged).
        """
        if self.step or self.history:
            raise ValueError(f"log_initial_validation: the run has started (step {self.step}, "
                             f"{len(self.history)} rows logged); only a fresh run takes a step-0 validation")
        self.output_dir.mkdir(parents=True, exist_ok=True)
        if self.is_main:
            (self.output_dir / "metrics.jsonl").write_text("")
        self._log({**validation, "step": 0})

    def collect_batch(self) -> tuple[list[Episode], dict[str, float]]:
        """The step's training episodes and rollout metrics: ``prompts_per_step`` groups, filtered by dynamic
        sampling where it is on (not when the auxiliary objective trains alone: then every group informs)."""
        dynamic_sampling = self._samples_dynamically
        if self.parallel is None:
            return self._collect_batch(dynamic_sampling)
        # rank 0 collects (with the whole weights where it generates them); every rank trains on its episodes
        gathered = self.parallel.full_weights() if self.config.runtime == "local" else nullcontext()
        with gathered:
            return self.parallel.share_from_rank0(lambda: self._collect_batch(dynamic_sampling), self.rng)

    def prepare(self, episodes: list[Episode]) -> TrainBatch:
        """Shaped rewards, the padded batch and group advantages of a step's episodes (and the auxiliary
        objective's targets, :meth:`AuxiliaryLoss.begin_step`)."""
        config = self.config
        if self.auxiliary_loss is not None:
            self.auxiliary_loss.begin_step(episodes, self.step)
        self.echo_targets = (EchoTargets.from_episodes(episodes, config.echo_tools) if config.echo_weight > 0
                             else None)
        max_response = config.max_new_tokens * config.max_turns
        _, rewards = episode_rewards(
            episodes, max_response, config.overlong_buffer, config.overlong_penalty, self.reward_fn
        )
        batch = collate_episodes(episodes, self.tokenizer.pad_token_id)
        advantages = group_advantages(rewards, batch["group_ids"], config.advantage_norm)
        return TrainBatch(batch, advantages, rewards)

    def update(self, prepared: TrainBatch, learner: Learner | None = None) -> dict[str, float]:
        """``ppo_epochs`` passes of shuffled minibatch steps over a batch from :meth:`prepare`; returns the mean
        of each minibatch metric (and the auxiliary objective's step metrics).

        Args:
            prepared: the step's batch.
            learner: who runs each minibatch step (default: this trainer's data-parallel learner, else this
                process alone); a data-parallel learner's ``update`` passes itself.
        """
        batch, metrics = prepared.batch, {}
        if self.recomputes_old_logprobs:
            batch, metrics = self._with_learner_logprobs(batch)
        metrics |= self._update(batch, prepared.advantages, learner or self.parallel or SINGLE_PROCESS_LEARNER)
        if self.auxiliary_loss is not None:
            metrics.update(self.auxiliary_loss.end_step())
        return metrics

    @property
    def recomputes_old_logprobs(self) -> bool:
        """Whether the PPO ratio's old logprobs come from the learner's forward rather than the engine's
        (``config.recompute_old_logprobs``; by default only under bf16, where the two differ by rounding)."""
        return recomputes_old_logprobs(self.config.recompute_old_logprobs, self.dtype)

    @torch.no_grad()
    def _with_learner_logprobs(self, batch: dict[str, Any]) -> tuple[dict[str, Any], dict[str, float]]:
        """``batch`` with ``old_logprobs`` scored again by the learner's forward (in microbatches, before any
        update), and the engine-vs-learner gap over the trained tokens: ``precision/logprob_gap_mean|max``."""
        config = self.config
        was_training = self.policy.training
        self.policy.eval()  # no dropout: the old policy's logprobs are its deterministic ones
        engine_logprobs = batch["old_logprobs"]
        recomputed = torch.zeros_like(engine_logprobs)
        rows = torch.arange(len(recomputed))
        try:
            for chunk in rows.split(config.microbatch_size or config.minibatch_size):
                inputs = self._score_inputs(batch, chunk)
                with self._autocast():
                    scored = score_tokens(self.policy, inputs.input_ids, inputs.attention_mask, inputs.mask,
                                          config.temperature, group_ids=inputs.group_ids, allowed=inputs.allowed)
                recomputed[chunk, : inputs.width - 1] = scored.logprobs.float().cpu()
        finally:
            self.policy.train(was_training)
        trained = batch["action_mask"].bool()
        gap = (recomputed - engine_logprobs)[trained].abs()
        metrics = {"precision/logprob_gap_mean": gap.mean().item() if gap.numel() else 0.0,
                   "precision/logprob_gap_max": gap.max().item() if gap.numel() else 0.0}
        batch = {**batch, "old_logprobs": recomputed * trained}
        if config.importance_sampling_cap is not None:
            weights = truncated_importance_weights(recomputed, engine_logprobs, trained,
                                                   config.importance_sampling_cap)
            on_trained = weights[trained]
            batch["importance_weights"] = weights
            metrics["precision/is_weight_mean"] = on_trained.mean().item() if on_trained.numel() else 1.0
            metrics["precision/is_weight_capped"] = (
                (on_trained >= config.importance_sampling_cap).float().mean().item() if on_trained.numel() else 0.0)
        return batch, metrics

    @property
    def _samples_dynamically(self) -> bool:
        """Whether this step's rollouts use dynamic sampling (not when the auxiliary objective trains alone: then
        every group informs)."""
        return self.config.dynamic_sampling and self.policy_weight > 0

    @property
    def _first_round_prompts(self) -> int:
        """Tasks in a step's first round: ``first_round_prompts`` under dynamic sampling (when set), else
        ``prompts_per_step``."""
        config = self.config
        if not self._samples_dynamically:
            return config.prompts_per_step
        return config.first_round_prompts or config.prompts_per_step

    def _submit_round(self, first_group_id: int, prompts: int) -> _Round:
        """Draw ``prompts`` tasks and a sampling seed, and submit their groups to the runtime."""
        return self._submit(self._draw_round(first_group_id, prompts))

    def _draw_round(self, first_group_id: int, prompts: int) -> _Round:
        """A round of ``prompts`` tasks and a sampling seed drawn from the trainer's generator (not submitted)."""
        config = self.config
        seeds = self.rng.integers(0, 2**31 - 1, size=prompts).tolist()
        params = SamplingParams(
            config.temperature, config.top_p, config.max_new_tokens, seed=int(self.rng.integers(0, 2**31 - 1))
        )
        return _Round(seeds, params, first_group_id)

    def _submit(self, round_: _Round) -> _Round:
        """Submit (or submit again) a round's groups to the runtime, with the newest synced weights."""
        round_.request = self.rollouts.submit(round_.seeds, self.config.group_size, round_.params,
                                              round_.first_group_id)
        return round_

    def _gather_round(self, round_: _Round, costs: dict[str, float]) -> list[Episode]:
        """A round's episodes; a round sampled by weights more than ``max_policy_lag`` updates old is refused
        and generated again from the current ones (``costs`` adds up the runtime's costs and refusals)."""
        batch = self.rollouts.gather(round_.request)
        _add_costs(costs, batch)
        if self.step - min(e.policy_version for e in batch.episodes) > self.config.max_policy_lag:
            costs["rollout/stale_rounds_refused"] += 1
            batch = self.rollouts.gather(self._submit(round_).request)
            _add_costs(costs, batch)
        return batch.episodes

    def _collect_batch(self, dynamic_sampling: bool) -> tuple[list[Episode], dict[str, float]]:
        """Sample ``prompts_per_step`` groups (``first_round_prompts`` in the first round); with dynamic
        sampling keep only groups whose rewards differ and resample (up to ``max_resample_rounds``) to refill.
        Rollout metrics describe the first, unfiltered round; the policy lag, the trained episodes."""
        config = self.config
        kept: list[Episode] = []
        metrics: dict[str, float] = {}
        costs = {"time/worker_busy_s": 0.0, "time/weight_load_s": 0.0, "rollout/worker_restarts": 0,
                 "rollout/stale_rounds_refused": 0}
        group_offset, real_sampled = 0, 0
        for round_index in range(1 + (config.max_resample_rounds if dynamic_sampling else 0)):
            if round_index == 0 and self._pending is not None:
                round_, self._pending = self._pending, None
            else:
                prompts = self._first_round_prompts if round_index == 0 else config.prompts_per_step
                round_ = self._submit_round(group_offset, prompts)
            episodes = self._gather_round(round_, costs)
            group_offset += len(round_.seeds)
            real_sampled += sum(not e.imagined for e in episodes)
            if round_index == 0:
                metrics = _rollout_metrics(episodes)
            if not dynamic_sampling:
                return episodes, metrics | costs | _lag_metrics(episodes, self.step) | {
                    "rollout/episodes_sampled": len(episodes), "rollout/real_episodes_sampled": real_sampled}
            rewards = [self.reward_fn(e) if self.reward_fn else e.reward for e in episodes]
            informative = dynamic_sampling_mask(
                torch.tensor(rewards), torch.tensor([e.group_id for e in episodes])
            )
            kept += [e for e, keep in zip(episodes, informative.tolist()) if keep]
            if len(kept) >= config.prompts_per_step * config.group_size:
                break
        metrics["rollout/kept_groups"] = len(kept) / config.group_size
        metrics["rollout/episodes_sampled"] = group_offset * config.group_size
        metrics["rollout/real_episodes_sampled"] = real_sampled  # episodes with no step answered in the env's place
        batch_size = config.prompts_per_step * config.group_size
        trained = kept[:batch_size] or episodes[:batch_size]  # none informative: the last round (zero advantages)
        return trained, metrics | costs | _lag_metrics(trained, self.step)

    def _update(self, batch: dict[str, torch.Tensor], advantages: torch.Tensor, learner: Learner
                ) -> dict[str, float]:
        config = self.config
        size = batch["input_ids"].shape[0]
        seed = int(self.rng.integers(0, 2**31 - 1))
        generator = torch.Generator().manual_seed(seed)
        totals: dict[str, list[float]] = {}
        self.policy.train()
        devices = [self.config.device] if self.config.device.startswith("cuda") else []
        with torch.random.fork_rng(devices=devices):  # dropout masks from the trainer's seed: resumes exactly
            torch.manual_seed(seed + 1)
            for _ in range(config.ppo_epochs):
                order = torch.randperm(size, generator=generator)
                for start in range(0, size, config.minibatch_size):
                    rows = order[start : start + config.minibatch_size]
                    for key, value in self.minibatch_step(batch, advantages, rows, learner).items():
                        totals.setdefault(key, []).append(value)
        metrics = {key: float(np.mean(values)) for key, values in totals.items()}
        if "loss/ratio_mean" in totals:  # before any update: 1 where old and new logprobs agree
            metrics["loss/ratio_first_minibatch"] = totals["loss/ratio_mean"][0]
        return metrics

    def minibatch_step(self, batch: dict[str, torch.Tensor], advantages: torch.Tensor, rows: torch.Tensor,
                       learner: Learner = SINGLE_PROCESS_LEARNER) -> dict[str, float]:
        """One optimizer step on the minibatch ``rows`` as ``learner`` runs it (default: this process alone;
        :func:`~worldgym.agents.grpo.step.step_on_minibatch`); returns its metrics."""
        return step_on_minibatch(self, learner, batch, advantages, rows)

    def minibatch_loss(
        self, batch: dict[str, torch.Tensor], advantages: torch.Tensor, rows: torch.Tensor,
        with_auxiliary: bool = True, minibatch_rows: torch.Tensor | None = None,
    ) -> MinibatchLoss:
        """The differentiable loss terms of the minibatch ``rows`` of ``batch`` (no backward); the auxiliary
        objective's too unless ``with_auxiliary`` is False. ``rows`` may be a part of the minibatch
        ``minibatch_rows`` (default: the whole), over whose observations the echo loss is averaged."""
        config, device = self.config, self.config.device
        inputs = self._score_inputs(batch, rows)
        old_logprobs = batch["old_logprobs"][rows, : inputs.width - 1].to(device)
        mask = inputs.mask
        echo_segments = None
        if self.echo_targets is not None:
            echo_segments = self.echo_targets.segments(rows, inputs.width).to(device)
        scored_mask = mask if echo_segments is None else mask.bool() | (echo_segments >= 0)
        with self._autocast():
            scored = score_tokens(self.policy, inputs.input_ids, inputs.attention_mask, scored_mask,
                                  config.temperature, group_ids=inputs.group_ids, allowed=inputs.allowed)
        echo, echo_metrics = None, {}
        action_logits = scored.logits
        if echo_segments is not None:
            selected = echo_segments[scored_mask.bool()]
            action_logits = scored.logits[selected < 0]
            on_echo = echo_segments >= 0
            echo, echo_metrics = echo_loss(
                scored.logits[selected >= 0] * config.temperature,  # the model's own distribution
                inputs.input_ids[:, 1:][on_echo], echo_segments[on_echo],
                self.echo_targets.count(rows if minibatch_rows is None else minibatch_rows))
            echo = config.echo_weight * echo
        ref_logprobs = None
        if config.kl_coef > 0:
            ref_logprobs = self._reference_logprobs(inputs.input_ids, inputs.attention_mask, mask,
                                                    inputs.group_ids, inputs.allowed)
        out = policy_loss(
            scored.logprobs,
            old_logprobs,
            advantages[rows].to(device),
            mask,
            config.eps_low,
            config.eps_high,
            config.loss_aggregation,
            ref_logprobs,
            config.kl_coef,
            max_tokens=config.max_new_tokens * config.max_turns,
            importance_weights=(batch["importance_weights"][rows, : inputs.width - 1].to(device)
                                if "importance_weights" in batch else None),
        )
        with torch.set_grad_enabled(config.entropy_coef > 0):  # a metric only, unless it is in the loss
            entropy = entropy_from_logits(action_logits).mean() if len(action_logits) else torch.zeros(())
        auxiliary, auxiliary_metrics = self.auxiliary_term(rows) if with_auxiliary else (None, {})
        return MinibatchLoss(out, entropy, config.entropy_coef, auxiliary, self.policy_weight,
                             auxiliary_metrics, echo, echo_metrics)

    def _score_inputs(self, batch: dict[str, Any], rows: torch.Tensor) -> _ScoreInputs:
        """The rows' tensors as :func:`score_tokens` takes them, cut to their longest sequence and on the
        trainer's device."""
        config, device = self.config, self.config.device
        width = longest_sequence(batch, rows)
        return _ScoreInputs(
            width=width,
            input_ids=batch["input_ids"][rows, :width].to(device),
            attention_mask=batch["attention_mask"][rows, :width].to(device),
            mask=batch["action_mask"][rows, : width - 1].to(device),
            group_ids=batch["group_ids"][rows] if config.share_prompt_prefix else None,
            allowed=[batch["allowed"][row] for row in rows.tolist()],  # constrained decoding's masks
        )

    @property
    def policy_weight(self) -> float:
        """The policy loss's weight this step: the auxiliary objective's (0 when it trains alone), else 1."""
        return self.auxiliary_loss.policy_weight if self.auxiliary_loss is not None else 1.0

    def auxiliary_term(self, rows: torch.Tensor, shard: LossShard = SINGLE_PROCESS
                       ) -> tuple[torch.Tensor | None, dict[str, float]]:
        """The auxiliary objective's loss on the minibatch ``rows`` (this ``shard``'s part of it under a
        data-parallel learner) and its metrics; ``(None, {})`` without one."""
        if self.auxiliary_loss is None:
            return None, {}
        return self.auxiliary_loss.loss(rows.tolist(), shard)

    def forward_memory(self, positions: int) -> AbstractContextManager[Any]:
        """The context of a microbatch forward over ``positions`` token positions: activation checkpointing
        paused below ``checkpointing_min_tokens`` (the activations fit; the backward recomputes nothing)."""
        config = self.config
        if config.activation_checkpointing and positions < config.checkpointing_min_tokens:
            return activation_checkpointing_paused(self.policy)
        return nullcontext()

    def clip_and_step(self) -> torch.Tensor:
        """Clip the accumulated gradients' norm to ``grad_clip`` and step the optimizer; the norm before."""
        grad_norm = torch.nn.utils.clip_grad_norm_(list(self.trainable.values()), self.config.grad_clip)
        self.optimizer.step()
        return grad_norm

    @torch.no_grad()
    def _reference_logprobs(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        mask: torch.Tensor,
        group_ids: torch.Tensor | None = None,
        allowed: list[dict[int, list[int]]] | None = None,
    ) -> torch.Tensor:
        """Logprobs under the frozen reference: the base model with adapters disabled (LoRA) or the frozen
        copy (over the same allowed tokens as the policy where decoding was constrained)."""
        context = self.policy.disable_adapter() if isinstance(self.policy, PeftModel) else nullcontext()
        model = self.reference if self.reference is not None else self.policy
        with context, self._autocast():
            scored = score_tokens(
                model,
                input_ids,
                attention_mask,
                mask,
                self.config.temperature,
                group_ids=group_ids,
                allowed=allowed,
            )
            return scored.logprobs

    def _autocast(self):
        return autocast(self.dtype, self.config.device)

    # ---------------------------------------------------------------- evaluation
    def evaluate(
        self, env: gym.Env | gym.vector.VectorEnv | None = None, num_episodes: int | None = None
    ) -> dict[str, float]:
        """Greedy episodes on a fixed set of validation seeds (:meth:`validation_episodes`): mean reward and
        success rate (and the mean ``reward_fn`` reward when the trainer has one; the copy probe where the env's
        tools mark copied arguments and the policy wrote some). Each episode's success is kept in
        ``last_episode_success``, and the seconds the metrics took after the episodes (e.g. a world model's
        teacher-forced scoring) in ``last_validation_scoring_s``."""
        episodes = self.validation_episodes(env, num_episodes)
        release_free_heap_on_cpu(self.config.device, self.config.cpu_release_heap)
        self.last_episode_success = [float(episode.success) for episode in episodes]
        self._episodes["validation"] = episodes
        start = time.perf_counter()
        metrics = self.evaluation_metrics(episodes)
        self.last_validation_scoring_s = time.perf_counter() - start
        return metrics

    def validation_episodes(
        self, env: gym.Env | gym.vector.VectorEnv | None = None, num_episodes: int | None = None
    ) -> list[Episode]:
        """The policy's greedy episodes on the validation seeds ``VALIDATION_SEEDS_START, ...``, in seed order.

        Args:
            env: the env to validate on (default: ``make_eval_env``'s). A single env is deep-copied once per
                episode run at a time; a vector env needs one sub-env per episode (``num_episodes``).
            num_episodes: default ``config.eval_episodes``.
        """
        count = num_episodes or self.config.eval_episodes
        collector = self.eval_collector
        if env is not None:
            source = ({"vector_env": env} if isinstance(env, gym.vector.VectorEnv)
                      else {"make_env": lambda: copy.deepcopy(env)})
            collector = RolloutCollector(self.engine, self.tokenizer, **source, **self.rollout_limits)
        params = SamplingParams(temperature=0.0, max_new_tokens=self.config.max_new_tokens)
        return collector.collect(range(VALIDATION_SEEDS_START, VALIDATION_SEEDS_START + count), 1, params)

    def evaluation_metrics(self, episodes: list[Episode]) -> dict[str, float]:
        """The metrics of validation ``episodes``: :func:`episode_metrics`, the ``reward_fn`` mean and the
        auxiliary objective's."""
        metrics = episode_metrics(episodes)
        if self.reward_fn is not None:
            metrics["eval/shaped_reward_mean"] = float(np.mean([self.reward_fn(e) for e in episodes]))
        if self.auxiliary_loss is not None:
            metrics.update(self.auxiliary_loss.evaluate(episodes))
        return metrics

    # ---------------------------------------------------------------- logging and checkpoints
    def _log(self, metrics: dict[str, Any]) -> None:
        self.history.append(metrics)
        if not self.is_main:
            return
        append_jsonl(self.output_dir / "metrics.jsonl", metrics)
        if self.tracker is not None:
            self.tracker.log(metrics, metrics["step"])
        shown = [f"{key[5:]} {metrics[key]:.3f}" for key in _PRINTED_EVAL_KEYS if key in metrics]
        if self.config.progress and shown:  # validation figures as they move, above the progress bar
            success = _rollout_success_since_last_validation(self.history)
            training = f"  | training tasks: success {np.mean(success):.3f}" if success else ""
            tqdm.write(f"step {metrics['step']:4d}  validation: " + ", ".join(shown) + training)

    def _write_transcripts(self, validated: bool) -> dict[str, float]:
        """The transcripts ``config.log_episodes`` asks for at this step: the validation's episodes (when it
        validated; also as a table to ``report_to``) and, with "all", the first :data:`TRAIN_EPISODES_PER_STEP` of
        the step's training episodes. Returns ``time/transcripts_s`` when it wrote any (a subclass's records may
        cost generation, e.g. the dual-LoRA world model's predicted replies)."""
        mode = self.config.log_episodes
        if not self.is_main:
            return {}
        start, wrote = time.perf_counter(), False
        validation = self._episodes.pop("validation", None) if validated else None
        if validation is not None and (mode != "none" or self.tracker is not None):
            records = self.transcript_records(validation)
            if mode != "none":
                write_transcript(self.output_dir, self.step, records)
            if self.tracker is not None:  # the sample-episodes table of report_to
                self.tracker.log_episodes(records, self.step)
            wrote = True
        if mode == "all" and "train" in self._episodes:
            sampled = self._episodes.pop("train")[:TRAIN_EPISODES_PER_STEP]
            records = [episode_record(e, self.tokenizer, i) for i, e in enumerate(sampled)]
            write_transcript(self.output_dir, self.step, records, training=True)
            wrote = True
        return {"time/transcripts_s": time.perf_counter() - start} if wrote else {}

    def transcript_records(self, episodes: list[Episode]) -> list[dict[str, Any]]:
        """The transcript lines of validation ``episodes`` (a subclass may add to them)."""
        return [episode_record(episode, self.tokenizer, index) for index, episode in enumerate(episodes)]

    def close(self) -> None:
        """Close the training vector env (its subprocesses, with ``vectorization_mode="async"``) or the Ray
        rollout workers, and the trackers."""
        self.rollouts.close()
        if self.tracker is not None:
            self.tracker.close()
            self.tracker = None

    def save(self, path: str | Path) -> Path:
        """Trainable weights + optimizer (safetensors) and step, RNG and config (JSON), and the auxiliary loss's
        state, whose run files (its replay segments) go beside ``path`` and are listed in the manifest. Under a
        data-parallel learner every rank calls it (a sharded learner gathers the whole state) and rank 0 alone
        writes."""
        if self.parallel is not None:
            weights, optimizer_state = self.parallel.full_state()
        else:
            weights, optimizer_state = dict(self.trainable), self.optimizer.state_dict()
        if not self.is_main:
            return Path(path)
        state = {"step": self.step, "rng": self.rng.bit_generator.state, "config": self.config.to_dict(),
                 "dtype": dtype_name(self.dtype)}
        if self._pending is not None:  # async: the next step's tasks, already drawn from the RNG
            state["pending_round"] = {"seeds": self._pending.seeds, "params": asdict(self._pending.params),
                                      "first_group_id": self._pending.first_group_id}
        state |= self.extra_checkpoint_state()
        shared: dict[str, str] = {}
        if self.auxiliary_loss is not None:
            tensors, state["auxiliary"], shared = self.auxiliary_loss.state(Path(path))
            weights.update({_AUXILIARY + name: tensor for name, tensor in tensors.items()})
        saved = save_checkpoint(path, weights, state, optimizer_state, step=self.step, shared=shared)
        prune_run_files(saved.parent, (SEGMENT_FILES,))  # segments only the checkpoint it replaced listed
        return saved

    def extra_checkpoint_state(self) -> dict[str, Any]:
        """JSON-ready entries a subclass adds to a checkpoint's state (none here); :meth:`load` hands the state
        back to :meth:`load_extra_checkpoint_state`."""
        return {}

    def load_extra_checkpoint_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`extra_checkpoint_state` saved (``state``: the whole checkpoint state)."""

    def resume_latest(self) -> Path | None:
        """Load the run's newest checkpoint (:func:`~worldgym.checkpointing.latest_checkpoint`)
        and the metrics logged up to it; returns its path, or None when the folder holds none (a fresh run)."""
        path = load_latest(self.output_dir, self.load)
        if path is None:
            return None
        log = self.output_dir / "metrics.jsonl"
        self.history = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
        # a kill after the newest checkpoint: its pruning and best checkpoint (none under a data-parallel group)
        self.checkpoints.resumed(self.history, self.save if self.parallel is None else None)
        return path

    def load(self, path: str | Path) -> None:
        """Restore a :meth:`save` checkpoint into this trainer so training continues the same run exactly."""
        weights, state, optimizer_state = load_checkpoint(path)
        auxiliary = {name[len(_AUXILIARY):]: weights.pop(name) for name in list(weights)
                     if name.startswith(_AUXILIARY)}
        if (self.auxiliary_loss is not None) != ("auxiliary" in state):
            raise CheckpointError(
                f"checkpoint {path} was saved {'with' if 'auxiliary' in state else 'without'} an auxiliary loss, "
                f"this trainer has {'one' if self.auxiliary_loss is not None else 'none'}"
            )
        missing = sorted(set(self.trainable) - set(weights))
        unexpected = sorted(set(weights) - set(self.trainable))
        if missing or unexpected:
            raise CheckpointError(
                f"checkpoint {path} does not fit this model: missing {missing[:3]}, "
                f"unexpected {unexpected[:3]} (was it saved with another finetune mode or model?)"
            )
        for name, tensor in weights.items():
            if tensor.shape != self.trainable[name].shape:
                raise CheckpointError(
                    f"checkpoint {path}: {name} has shape {tuple(tensor.shape)}, the model "
                    f"expects {tuple(self.trainable[name].shape)}"
                )
        if self.parallel is not None:
            self.parallel.load_full_state(weights, optimizer_state)
        else:
            self.load_trainable(weights, optimizer_state)
        self.rng.bit_generator.state = state["rng"]
        self.step = int(state["step"])
        self.load_extra_checkpoint_state(state)
        if self.auxiliary_loss is not None:
            self.auxiliary_loss.load_state(auxiliary, state["auxiliary"], Path(path))
        # a crash after this checkpoint left later lines in the log: drop them so no step is logged twice
        truncate_jsonl(self.output_dir / "metrics.jsonl", "step", self.step)
        self._sync_weights()
        self._pending = None
        if "pending_round" in state:  # the same tasks, generated again by the loaded weights (lag 0)
            pending = state["pending_round"]
            self._pending = self._submit(
                _Round(pending["seeds"], SamplingParams(**pending["params"]), pending["first_group_id"]))

    def load_trainable(self, weights: dict[str, torch.Tensor], optimizer_state: dict[str, Any] | None
                       ) -> None:
        """Copy whole trainable tensors (by name) and an ``optimizer.state_dict()`` into this process's."""
        with torch.no_grad():
            for name, tensor in weights.items():
                self.trainable[name].copy_(tensor)
        if optimizer_state is not None:
            self.optimizer.load_state_dict(optimizer_state)


def _join_learner_group(config: GRPOConfig) -> int:
    """This process's rank among the data-parallel learners (0 for a single learner), joining torchrun's
    process group where ``config.learner`` is ``"ddp"`` or ``"fsdp"``."""
    if config.learner == "single":
        return 0
    import torch.distributed as dist

    from worldgym.distributed.ddp import init_process_group_from_env

    init_process_group_from_env()
    return dist.get_rank()


def _data_parallel_learner(trainer: GRPOTrainer) -> DataParallelLearner | None:
    """The trainer's ``config.learner`` (a DDPLearner or FSDPLearner, which shards the policy), or None."""
    if trainer.config.learner == "single":
        return None
    from worldgym.distributed import DDPLearner, FSDPLearner

    return (DDPLearner if trainer.config.learner == "ddp" else FSDPLearner)(trainer)


def _rollout_success_since_last_validation(history: list[dict[str, Any]]) -> list[float]:
    """Training rollouts' success rates logged after the previous validation, up to the newest row."""
    success = []
    for row in reversed(history):
        if "rollout/success_rate" in row:
            success.append(row["rollout/success_rate"])
        if "eval/success_rate" in row and row is not history[-1]:
            break
    return success


def _add_costs(costs: dict[str, float], batch: RolloutBatch) -> None:
    costs["time/worker_busy_s"] += batch.busy_seconds
    costs["time/weight_load_s"] += batch.weight_load_seconds
    costs["rollout/worker_restarts"] += batch.worker_restarts


def _lag_metrics(episodes: list[Episode], version: int) -> dict[str, float]:
    """How many updates behind the learner (at ``version``) the trained episodes' weights are."""
    lags = np.array([version - e.policy_version for e in episodes])
    return {"rollout/policy_lag_mean": float(lags.mean()), "rollout/policy_lag_max": int(lags.max())}


def _rollout_metrics(episodes: list[Episode]) -> dict[str, float]:
    rewards = np.array([e.reward for e in episodes])
    lengths = np.array([e.num_model_tokens for e in episodes])
    metrics = {
        "rollout/reward_mean": float(rewards.mean()),
        "rollout/reward_std": float(rewards.std()),
        "rollout/success_rate": float(np.mean([e.success for e in episodes])),
        "rollout/response_tokens_mean": float(lengths.mean()),
        "rollout/model_tokens": int(lengths.sum()),
        "rollout/truncated_rate": float(np.mean([e.truncated for e in episodes])),
    }
    return metrics | _imagined_metrics(episodes) if any(e.imagined for e in episodes) else metrics


def _imagined_metrics(episodes: list[Episode]) -> dict[str, float]:
    """Real and imagined episodes counted apart (a step override answered some steps of the imagined ones),
    how often an imagined answer's type matched the env's unseen answer to the same step, and of the imagined
    successes, the share the env would have given too (its unseen answer to the final step had the same type)."""
    imagined = [e for e in episodes if e.imagined]
    real = [e for e in episodes if not e.imagined]
    turns = [t for e in imagined for t in e.turns if t.info.get("imagined")]
    judged = [t for t in turns if "real_response_type" in t.info]
    metrics = {"rollout/real_episodes": float(len(real)), "rollout/imagined_episodes": float(len(imagined)),
               "rollout/imagined_success_rate": float(np.mean([e.success for e in imagined])),
               "rollout/imagined_steps": float(len(turns))}
    if real:
        metrics["rollout/real_success_rate"] = float(np.mean([e.success for e in real]))
    if judged:
        metrics["rollout/imagined_type_accuracy"] = float(np.mean([_type_confirmed(t) for t in judged]))
    finals = [t for t in judged if t.info.get("success")]  # an imagined success ends its episode
    if finals:
        metrics["rollout/imagined_success_confirmed_rate"] = float(np.mean([_type_confirmed(t) for t in finals]))
    return metrics


def _type_confirmed(turn: Turn) -> bool:
    """Whether an imagined answer had the type of the env's unseen answer to the same step."""
    return turn.info["response_type"] == turn.info["real_response_type"]
