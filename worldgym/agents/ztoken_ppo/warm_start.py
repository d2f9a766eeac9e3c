"""Supervised warm start ("phase 2/3"): teach a scripted Z policy and the digit heads from env episodes.

The behaviour comes from the env's registered expert (:mod:`worldgym.env_training`), like every warm start's
demonstrations; it is a ``"vector"`` expert acting on batched envs, and what is learnt from it differs from the
chat warm starts' SFT (:mod:`worldgym.agents.llm.warm_start`): the Z tokens' masked cross-entropy and the digit
heads' cross-entropy against the env's true digits, on a policy with its own heads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from worldgym.agents.ztoken_ppo.config import ZTokenWarmStartConfig
from worldgym.agents.ztoken_ppo.encoding import EncodedBatch, ObservationEncoder
from worldgym.agents.ztoken_ppo.model import ZTokenPolicy
from worldgym.agents.ztoken_ppo.rollout import run_until_episodes, vocab_of, ztoken_vector_env
from worldgym.env_training import make_expert
from worldgym.jsonl import append_jsonl


def collect_scripted_episodes(
    envs: gym.vector.VectorEnv,
    episodes_per_env: int,
    z_min: int,
    z_max: int,
    seed: int,
    rng: np.random.Generator,
    env_id: str = "ZTokenDigits-v1",
) -> tuple[np.ndarray, np.ndarray]:
    """Play ``env_id``'s registered expert (:func:`worldgym.env_training.make_expert`; ZTokenDigits-v1's:
    ``k ~ U{z_min..z_max}`` tokens ``<Z_0>, <Z_1>, ...``, then ``<ANSWER>``) on ``envs``, its draws from ``rng``.

    This is the registry's vector expert, not the text experts' chats: the Z-token agent learns the behaviour's
    tokens and its digit heads from the final observations and the env's true digits, not chat text.

    Returns the final observations (question + Z trace) and the true digits from the env's reward breakdown.
    """
    expert = make_expert(env_id, num_envs=envs.num_envs, num_z=vocab_of(envs).num_z_tokens, z_min=z_min,
                         z_max=z_max, rng=rng)
    expert.begin()
    finished, _ = run_until_episodes(envs, episodes_per_env, seed, lambda _obs: expert.act(),
                                     lambda _obs, _action, done, _infos: expert.advance(done))
    episodes = [episode for per_env in finished for episode in per_env]
    obs = np.stack([episode.observation for episode in episodes])
    return obs, np.asarray([episode.info["digit_true"] for episode in episodes], dtype=np.int64)


def warm_start_loss(
    policy: ZTokenPolicy, batch: EncodedBatch, digit_true: torch.Tensor, token_coef: float, digit_coef: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """Cross-entropy of the behaviour's tokens (masked, teacher-forced) + digit cross-entropy at <ANSWER>."""
    batch, digit_true = batch.to(policy.device), digit_true.to(policy.device)
    token_log_probs, digit_logits = policy.teacher_forced(batch)
    ids = policy.action_token_ids
    vocab_to_action = torch.full((int(max(ids.max(), batch.input_ids.max())) + 1,), -1, device=ids.device)
    vocab_to_action[ids] = torch.arange(len(ids), device=ids.device)
    positions = torch.arange(batch.input_ids.shape[1] - 1, device=ids.device)[None, :]
    generated = (positions >= batch.prompt_lengths[:, None] - 1) & (positions < batch.answer_index[:, None])
    targets = vocab_to_action[batch.input_ids[:, 1:]]
    step_log_probs = token_log_probs[:, :-1].gather(-1, targets.clamp(min=0)[..., None]).squeeze(-1)
    token_loss = -(step_log_probs * generated).sum() / generated.sum()
    digit_loss = F.cross_entropy(digit_logits.reshape(-1, 10), digit_true.reshape(-1))
    exact = (digit_logits.argmax(-1) == digit_true).all(-1).float().mean()
    total = token_coef * token_loss + digit_coef * digit_loss
    return total, {
        "warm/token_loss": token_loss.item(),
        "warm/digit_loss": digit_loss.item(),
        "warm/train_exact_match": exact.item(),
    }


def warm_start(
    policy: ZTokenPolicy,
    encoder: ObservationEncoder,
    env_id: str,
    env_kwargs: dict[str, Any],
    config: ZTokenWarmStartConfig,
    metrics_path: str | Path | None = None,
    progress: bool = True,
) -> dict[str, float]:
    """Train ``policy`` in place for ``config.steps`` steps on fresh env episodes; return the last metrics."""
    envs = ztoken_vector_env(env_id, env_kwargs, config.num_envs)
    max_new_tokens = int(envs.get_attr("max_new_tokens")[0])
    if config.z_max >= max_new_tokens:
        raise ValueError(
            f"z_max={config.z_max} leaves no room for <ANSWER>: use z_max < max_new_tokens={max_new_tokens}"
        )
    per_env = -(-config.batch_size // config.num_envs)
    rng = np.random.default_rng(config.seed)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
    schedule = _lr_schedule(optimizer, config)
    metrics: dict[str, float] = {}
    if metrics_path is not None:  # a warm start has no resume: every run starts a fresh log
        Path(metrics_path).unlink(missing_ok=True)
    policy.train()
    for step in tqdm(range(config.steps), desc="warm start", disable=not progress):
        obs, digits = collect_scripted_episodes(
            envs, per_env, config.z_min, config.z_max, config.seed * 1_000_003 + step * config.num_envs, rng,
            env_id=env_id,
        )
        loss, metrics = warm_start_loss(
            policy,
            encoder.encode(obs),
            torch.as_tensor(digits),
            config.token_loss_coef,
            config.digit_loss_coef,
        )
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), config.max_grad_norm)
        optimizer.step()
        schedule.step()
        if metrics_path is not None:
            append_jsonl(metrics_path, {"step": step, **metrics})
    envs.close()
    return metrics


def _lr_schedule(
    optimizer: torch.optim.Optimizer, config: ZTokenWarmStartConfig
) -> torch.optim.lr_scheduler.LRScheduler:
    """10% linear warm-up, then anneal (``"onecycle"``) or hold (``"constant"``)."""
    if config.lr_schedule == "onecycle":
        return torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=config.learning_rate, total_steps=config.steps, pct_start=0.1
        )
    warmup = max(1, config.steps // 10)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
