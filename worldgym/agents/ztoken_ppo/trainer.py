"""PPO trainer for the Z-token policy: rollouts from a vector env, clipped updates, logging, checkpoints."""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tqdm.auto import tqdm

from worldgym.agents.llm.rollout import make_vector_env
from worldgym.agents.ztoken_ppo.checkpoint import (
    load_policy,
    load_policy_weights,
    load_training_state,
    save_checkpoint,
)
from worldgym.agents.ztoken_ppo.config import ZTokenPPOConfig
from worldgym.agents.ztoken_ppo.encoding import ObservationEncoder
from worldgym.agents.ztoken_ppo.evaluate import episode_metrics, evaluate_policy
from worldgym.agents.ztoken_ppo.factory import build_policy
from worldgym.agents.ztoken_ppo.loss import episode_advantages, ppo_loss
from worldgym.agents.ztoken_ppo.model import PolicyOutput, ZTokenPolicy, joint_entropy, joint_log_prob
from worldgym.agents.ztoken_ppo.rollout import (
    ZTokenEpisode,
    check_same_step,
    collect_episodes,
    vocab_of,
    ztoken_vector_env,
)
from worldgym.checkpointing import LAST_CHECKPOINT, load_latest
from worldgym.jsonl import append_jsonl, read_jsonl, truncate_jsonl
from worldgym.precision import autocast, cast_for_training, dtype_name, recomputes_old_logprobs, resolve_dtype
from worldgym.tracking import Tracker, make_tracker

METRICS_FILE = "metrics.jsonl"
ROLLOUTS_FILE = "rollouts.jsonl"


class ZTokenPPOTrainer:
    """Runs ``config.num_steps`` PPO iterations (one rollout and its update each); ``train()`` continues from wherever the run stands.

    Args:
        config: the settings.
        policy: the policy to train (with ``encoder``, or neither); default: loaded from
            ``config.init_checkpoint`` when set, else built from ``config.model``. Under bfloat16
            (``config.dtype``) its frozen weights, if any, are cast to bfloat16 in place.
        encoder: the policy's observation encoder (with ``policy``, or neither).

    >>> from worldgym.agents.ztoken_ppo import ZTokenModelConfig
    >>> config = ZTokenPPOConfig(env_kwargs={"num_z_tokens": 4, "max_new_tokens": 4, "operand_digits": 1},
    ...                          model=ZTokenModelConfig(hidden_size=32, num_layers=1, num_heads=2,
    ...                                                  num_kv_heads=1, head_dim=16, intermediate_size=64),
    ...                          num_envs=4, episodes_per_rollout=8, num_steps=1, eval_episodes=4,
    ...                          progress=False, output_dir="/tmp/wg_ztoken_ppo_doctest")
    >>> trainer = ZTokenPPOTrainer(config)
    >>> history = trainer.train()          # the warm-start evaluation (step 0), then one row per rollout
    >>> [row["step"] for row in history]
    [0, 1]
    >>> sorted(trainer.evaluate())[:2]
    ['eval/digit0_accuracy', 'eval/digit1_accuracy']
    >>> trainer.close()
    """

    def __init__(
        self,
        config: ZTokenPPOConfig,
        policy: ZTokenPolicy | None = None,
        encoder: ObservationEncoder | None = None,
    ) -> None:
        if (policy is None) != (encoder is None):
            raise ValueError(
                "ZTokenPPOTrainer needs both policy and encoder (as build_policy or load_policy return them), "
                "or neither (then config.init_checkpoint or config.model supplies them)"
            )
        self.config = config
        self.envs = ztoken_vector_env(config.env_id, config.env_kwargs, config.num_envs)
        self.vocab = vocab_of(self.envs)
        if policy is None or encoder is None:
            policy, encoder = self._initial_policy()
        self.policy = policy
        self.encoder = encoder
        if len(policy.action_token_ids) != self.vocab.num_z_tokens + 1:
            raise ValueError(
                f"policy has {len(policy.action_token_ids) - 1} Z tokens, env has "
                f"{self.vocab.num_z_tokens}: set env_kwargs['num_z_tokens'] to match the checkpoint"
            )
        self.dtype = resolve_dtype(config.dtype, config.device)
        cast_for_training(self.policy.to(config.device), self.dtype)
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=config.learning_rate)
        self.generator = torch.Generator(device=config.device).manual_seed(config.seed)
        self.rollout_index = 0
        self.env_steps = 0
        self.output_dir = Path(config.output_dir)
        self.history: list[dict[str, Any]] = []
        self.tracker: Tracker | None = None  # config.report_to's backends, opened by train()

    def _initial_policy(self) -> tuple[ZTokenPolicy, ObservationEncoder]:
        """The policy of ``config.init_checkpoint``, else a fresh one of ``config.model``."""
        if self.config.init_checkpoint is not None:
            policy, encoder, _ = load_policy(self.config.init_checkpoint)
            return policy, encoder
        return build_policy(self.config.model, self.vocab)

    @property
    def recomputes_old_logprobs(self) -> bool:
        """Whether each update recomputes the rollout's log-probs first (``config.recompute_old_logprobs``;
        by default only under bfloat16)."""
        return recomputes_old_logprobs(self.config.recompute_old_logprobs, self.dtype)

    def autocast(self) -> AbstractContextManager:
        """The forward passes' autocast context for ``config.dtype`` (a no-op in float32)."""
        return autocast(self.dtype, self.config.device)

    @property
    def checkpoint_path(self) -> Path:
        """Where :meth:`save` writes by default: ``<output_dir>/checkpoint-last``."""
        return self.output_dir / LAST_CHECKPOINT

    def save(self, path: str | Path | None = None) -> Path:
        """Checkpoint policy, optimizer, RNG and counters (at :attr:`checkpoint_path` when ``path`` is None);
        return the checkpoint's folder."""
        state = {
            "rollout_index": self.rollout_index,
            "env_steps": self.env_steps,
            "config": self.config.to_dict(),
            "dtype": dtype_name(self.dtype),
        }
        return save_checkpoint(
            path or self.checkpoint_path,
            self.policy,
            self.encoder,
            self.vocab.num_z_tokens,
            self.optimizer,
            self.generator,
            state,
            step=self.rollout_index,
        )

    def load(self, path: str | Path) -> None:
        """Restore a :meth:`save` checkpoint (policy weights, optimizer, RNG, counters) so that :meth:`train`
        continues the same run exactly; log lines written after it (by a run that crashed later) are dropped
        and :attr:`history` holds the run's rows up to it.

        Raises:
            CheckpointError: naming the file, when the checkpoint is missing, damaged, policy-only (a warm
                start: set ``config.init_checkpoint`` to start from one) or of another policy.
        """
        load_policy_weights(path, self.policy, self.vocab.num_z_tokens)
        state = load_training_state(path, self.optimizer, self.generator)
        self.rollout_index, self.env_steps = int(state["rollout_index"]), int(state["env_steps"])
        truncate_jsonl(self.output_dir / METRICS_FILE, "step", self.rollout_index)
        for name in (METRICS_FILE, ROLLOUTS_FILE):  # metrics rows logged before "step" named them "rollout"
            truncate_jsonl(self.output_dir / name, "rollout", self.rollout_index)
        self.history = read_jsonl(self.output_dir / METRICS_FILE)

    def resume_latest(self) -> Path | None:
        """Load the run's newest checkpoint (:func:`~worldgym.checkpointing.latest_checkpoint`);
        returns its path, or None when the folder holds none (a fresh run)."""
        return load_latest(self.output_dir, self.load)

    def collect(self) -> list[ZTokenEpisode]:
        """One rollout of complete episodes with the current policy (sampled tokens, digits per config)."""
        seed = self.config.seed * 1_000_003 + self.rollout_index * self.config.num_envs
        with self.autocast():
            episodes, steps = collect_episodes(
                self.policy,
                self.encoder,
                self.envs,
                self.config.episodes_per_rollout // self.config.num_envs,
                seed,
                self.generator,
                "sample",
                self.config.digit_actions,
                id_prefix=f"r{self.rollout_index}",
            )
        self.env_steps += steps
        return episodes

    def _flatten(self, episodes: list[ZTokenEpisode]) -> dict[str, torch.Tensor]:
        advantages, returns = [], []
        for episode in episodes:
            rewards = torch.zeros(len(episode.tokens))
            rewards[-1] = episode.reward
            adv, ret = episode_advantages(
                rewards,
                torch.tensor(episode.values),
                self.config.advantage,
                self.config.gamma,
                self.config.gae_lambda,
            )
            advantages.append(adv)
            returns.append(ret)
        return {
            "obs": torch.as_tensor(np.stack([o for e in episodes for o in e.observations])),
            "tokens": torch.tensor([t for e in episodes for t in e.tokens]),
            "digits": torch.tensor([d for e in episodes for d in e.digits]),
            "logp_old": torch.tensor([p for e in episodes for p in e.log_probs]),
            "advantages": torch.cat(advantages),
            "returns": torch.cat(returns),
        }

    def update(self, episodes: list[ZTokenEpisode]) -> dict[str, float]:
        """``update_epochs`` passes of clipped PPO over the rollout's steps, ``num_minibatches`` each (the
        rollout's log-probs recomputed first when :attr:`recomputes_old_logprobs`)."""
        cfg = self.config
        batch = {
            key: value.to(cfg.device) if key != "obs" else value
            for key, value in self._flatten(episodes).items()
        }
        num_steps = batch["tokens"].shape[0]
        size = -(-num_steps // cfg.num_minibatches)
        logs: list[dict[str, float]] = []
        gaps: dict[str, float] = {}
        self.policy.train()
        for epoch in range(cfg.update_epochs):
            order = torch.randperm(num_steps, generator=self.generator, device=self.generator.device).cpu()
            minibatches = [order[start : start + size] for start in range(0, num_steps, size)]
            if epoch == 0 and self.recomputes_old_logprobs:
                gaps = self._recompute_old_logprobs(batch, minibatches)
            for idx in minibatches:
                logs.append(self._minibatch_step(batch, idx))
        return {**{key: float(np.mean([log[key] for log in logs])) for key in logs[0]}, **gaps}

    def _policy_log_probs(
        self, obs: torch.Tensor, tokens: torch.Tensor, digits: torch.Tensor
    ) -> tuple[PolicyOutput, torch.Tensor]:
        """The update's forward on ``obs`` (under autocast): its output and the float32 log-probs of the actions."""
        with self.autocast():
            out = self.policy(self.encoder.encode(obs.numpy()))
        include_digits = self.config.digit_actions == "sample"
        return out, joint_log_prob(out, tokens, digits, self.policy.answer_action, include_digits)

    @torch.no_grad()
    def _recompute_old_logprobs(
        self, batch: dict[str, torch.Tensor], minibatches: list[torch.Tensor]
    ) -> dict[str, float]:
        """Replace ``batch["logp_old"]`` by the update's forward over the same minibatches; return the mean and
        max absolute gap to the rollout's log-probs."""
        recomputed = batch["logp_old"].clone()
        for idx in minibatches:
            device_idx = idx.to(self.config.device)
            _, log_probs = self._policy_log_probs(
                batch["obs"][idx], batch["tokens"][device_idx], batch["digits"][device_idx]
            )
            recomputed[device_idx] = log_probs
        gap = (recomputed - batch["logp_old"]).abs()
        batch["logp_old"] = recomputed
        return {
            "precision/logprob_gap_mean": float(gap.mean()),
            "precision/logprob_gap_max": float(gap.max()),
        }

    def _minibatch_step(self, batch: dict[str, torch.Tensor], idx: torch.Tensor) -> dict[str, float]:
        """One clipped-PPO Adam step on the steps ``idx`` of ``batch``; the loss parts for logging."""
        cfg = self.config
        obs = batch["obs"][idx]
        idx = idx.to(cfg.device)
        out, log_probs = self._policy_log_probs(obs, batch["tokens"][idx], batch["digits"][idx])
        entropy = joint_entropy(out, self.policy.answer_action, cfg.digit_actions == "sample")
        advantages = batch["advantages"][idx]
        if cfg.normalize_advantages and idx.numel() > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        loss, parts = ppo_loss(
            log_probs,
            batch["logp_old"][idx],
            advantages,
            out.values,
            batch["returns"][idx],
            entropy,
            cfg.clip_eps,
            cfg.value_coef,
            cfg.entropy_coef,
        )
        self.optimizer.zero_grad()
        loss.backward()
        parts["loss/grad_norm"] = float(
            torch.nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.max_grad_norm)
        )
        self.optimizer.step()
        return parts

    def evaluate(self, env: gym.Env | gym.vector.VectorEnv | None = None) -> dict[str, float]:
        """Held-out metrics (``eval/*``) of ``config.eval_episodes`` episodes (argmax digits, Z tokens as
        ``config.eval_token_decoding``) on the test split of the config's env, or on ``env`` when given.

        ``env`` is a ZTokenDigits-style env or vector env (the same Z tokens as the policy), played as it is
        (choose its split); a vector env must autoreset in the step that ends an episode (``SAME_STEP``, as
        :func:`~worldgym.agents.llm.rollout.make_vector_env` builds it) and is not closed.
        """
        cfg = self.config
        if cfg.eval_episodes == 0:
            raise ValueError("config.eval_episodes is 0: set it to a multiple of num_envs to evaluate")
        envs = self._evaluation_envs(env)
        with self.autocast():
            return evaluate_policy(
                self.policy,
                self.encoder,
                cfg.env_id,
                cfg.env_kwargs,
                cfg.eval_episodes,
                cfg.num_envs,
                cfg.eval_seed,
                cfg.eval_token_decoding,
                envs=envs,
            )

    def _evaluation_envs(self, env: gym.Env | gym.vector.VectorEnv | None) -> gym.vector.VectorEnv | None:
        """``env`` as a checked vector env (a single env becomes a one-env vector env over it)."""
        if env is None:
            return None
        if isinstance(env, gym.vector.VectorEnv):
            check_same_step(env)
            envs = env
        elif isinstance(env, gym.Env):
            envs = make_vector_env(lambda: env, 1)
        else:
            raise TypeError(f"env must be a gymnasium Env or VectorEnv, got {type(env).__name__}")
        num_z = vocab_of(envs).num_z_tokens
        if num_z != self.vocab.num_z_tokens:
            raise ValueError(
                f"env has {num_z} Z tokens, the policy {self.vocab.num_z_tokens}: use a matching env"
            )
        return envs

    def close(self) -> None:
        """Close the training vector env and the trackers."""
        self.envs.close()
        if self.tracker is not None:
            self.tracker.close()
            self.tracker = None

    def _log(self, metrics: dict[str, Any], episodes: list[ZTokenEpisode] | None) -> None:
        metrics["dtype"] = dtype_name(self.dtype)
        self.history.append(metrics)
        append_jsonl(self.output_dir / METRICS_FILE, metrics)
        if self.tracker is not None:
            self.tracker.log(metrics, metrics["step"])
        if episodes is not None and self.config.log_rollouts:
            records = [{"rollout": metrics["step"], **e.to_record(self.vocab)} for e in episodes]
            append_jsonl(self.output_dir / ROLLOUTS_FILE, *records)

    def train(self) -> list[dict[str, Any]]:
        """Run the remaining rollouts; return :attr:`history`, every metrics row of the run (also in
        ``metrics.jsonl``): the warm-start evaluation at rollout 0 (when ``eval_episodes`` > 0), then one row
        per rollout, the last with ``eval/*`` from the final evaluation.

        A fresh run (rollout 0) starts new ``metrics.jsonl`` / ``rollouts.jsonl`` files, replacing any left in
        ``output_dir`` by an earlier run; a resumed run (:meth:`load`) appends to its own. When no rollout is
        left (the run already finished), nothing is trained and the history is returned as it is.
        """
        cfg = self.config
        self.output_dir.mkdir(parents=True, exist_ok=True)
        if self.tracker is None:
            resumed = None if self.rollout_index == 0 else self.rollout_index
            self.tracker = make_tracker(cfg.report_to, self.output_dir, cfg.to_dict(), resumed)
        if self.rollout_index == 0:
            for name in (METRICS_FILE, ROLLOUTS_FILE):
                (self.output_dir / name).unlink(missing_ok=True)
            self.history = []
            if cfg.eval_episodes:
                self._log({"step": 0, "env_steps": 0, **self.evaluate()}, None)
        bar = tqdm(
            range(self.rollout_index, cfg.num_steps),
            desc="ztoken ppo",
            disable=not cfg.progress,
            initial=self.rollout_index,
            total=cfg.num_steps,
        )
        for _ in bar:
            start = time.perf_counter()
            if cfg.anneal_lr:
                for group in self.optimizer.param_groups:
                    group["lr"] = cfg.learning_rate * (1.0 - self.rollout_index / cfg.num_steps)
            episodes = self.collect()
            collect_s = time.perf_counter() - start
            metrics = {**episode_metrics(episodes, "rollout"), **self.update(episodes)}
            update_s = time.perf_counter() - start - collect_s
            self.rollout_index += 1
            last = self.rollout_index == cfg.num_steps
            if cfg.eval_episodes and (self.rollout_index % cfg.eval_every == 0 or last):
                metrics.update(self.evaluate())
            metrics.update(
                {
                    "step": self.rollout_index,
                    "env_steps": self.env_steps,
                    "charts/lr": self.optimizer.param_groups[0]["lr"],
                    "time/collect_s": collect_s,
                    "time/update_s": update_s,
                    "time/rollout_s": time.perf_counter() - start,
                }
            )
            self._log(metrics, episodes)
            bar.set_postfix(
                reward=f"{metrics['rollout/reward_mean']:.3f}", exact=f"{metrics['rollout/exact_match']:.3f}"
            )
            if self.rollout_index % cfg.checkpoint_every == 0 or last:
                self.save()
        return self.history
