"""Collect complete episodes from a Gymnasium vector env with per-step actions, log-probs, values, entropy.

The vector envs come from :func:`worldgym.agents.llm.rollout.make_vector_env` (sub-envs autoreset in the step
that ends them, so each step's info holds ``final_info`` / ``final_obs``), e.g. :func:`ztoken_vector_env`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from worldgym.agents.llm.rollout import make_vector_env
from worldgym.agents.ztoken_ppo.encoding import ObservationEncoder
from worldgym.agents.ztoken_ppo.model import ActionSample, Decoding, ZTokenPolicy
from worldgym.envs.ztoken.reward import RewardBreakdown
from worldgym.envs.ztoken.vocab import ZTokenVocab

BREAKDOWN_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(RewardBreakdown))


def ztoken_vector_env(env_id: str, env_kwargs: dict[str, Any], num_envs: int) -> gym.vector.VectorEnv:
    """``num_envs`` copies of ``gym.make(env_id, **env_kwargs)`` in the shared stack's
    :func:`~worldgym.agents.llm.rollout.make_vector_env` (sync, autoreset in the step that ends an episode)."""
    return make_vector_env(partial(gym.make, env_id, **env_kwargs), num_envs)


def vocab_of(envs: gym.vector.VectorEnv) -> ZTokenVocab:
    """The env's token vocabulary, from its action space (``token`` has V + 1 values)."""
    return ZTokenVocab(int(envs.single_action_space["token"].n) - 1)


@dataclass
class ZTokenEpisode:
    """One finished episode: the observation before each step, what the policy did, the env's breakdown."""

    episode_id: str
    observations: list[np.ndarray] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    digits: list[list[int]] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    entropy: list[float] = field(default_factory=list)
    digit_logits: list[list[float]] = field(default_factory=list)
    breakdown: dict[str, Any] = field(default_factory=dict)

    @property
    def reward(self) -> float:
        """The episode's (terminal) reward."""
        return float(self.breakdown["reward_final"])

    @property
    def num_z(self) -> int:
        """Z tokens emitted (every generated token except a final ``<ANSWER>``)."""
        return int(self.breakdown["num_generated"]) - int(self.breakdown["terminated_by"] == "answer")

    def to_record(self, vocab: ZTokenVocab) -> dict[str, Any]:
        """The rollout-log line: every :class:`RewardBreakdown` field, plus the policy's."""
        logits = torch.tensor(self.digit_logits)
        return {
            "id": self.episode_id,
            "input_ids": [int(i) for i in self.observations[0] if int(i) != vocab.pad_id],
            "generated_ids": [vocab.action_to_id(t) for t in self.tokens],
            **{name: self.breakdown[name] for name in BREAKDOWN_FIELDS},
            "digit_logits": [[round(x, 5) for x in row] for row in self.digit_logits],
            "digit_probs": [[round(x, 5) for x in row] for row in logits.softmax(-1).tolist()],
            "actions": self.tokens,
            "digit_actions": self.digits,
            "logp_old": self.log_probs,
            "entropy": self.entropy,
            "values": self.values,
        }


def _python(value: Any) -> Any:
    """numpy scalars/arrays -> plain Python for JSON."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def final_info_of(infos: dict[str, Any], index: int) -> dict[str, Any]:
    """The finished sub-env's step info out of a SAME_STEP vector env's batched ``final_info``."""
    batched = infos["final_info"]
    return {key: _python(values[index]) for key, values in batched.items() if not key.startswith("_")}


def check_same_step(envs: gym.vector.VectorEnv) -> None:
    """Episodes are read from ``final_info`` / ``final_obs``, which only a ``SAME_STEP`` autoreset reports."""
    if not isinstance(envs, gym.vector.VectorEnv):
        raise TypeError(f"envs must be a gymnasium VectorEnv, got {type(envs).__name__}")
    mode = envs.metadata.get("autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP)
    if gym.vector.AutoresetMode(mode) != gym.vector.AutoresetMode.SAME_STEP:
        raise ValueError(
            f"the vector env autoresets in mode {gym.vector.AutoresetMode(mode).name}: build it with "
            "autoreset_mode=gym.vector.AutoresetMode.SAME_STEP (ztoken_vector_env / make_vector_env do)"
        )


@dataclass
class FinishedEpisode:
    """What a SAME_STEP vector env reports for a sub-env's finished episode."""

    info: dict[str, Any]
    observation: np.ndarray


StepHook = Callable[[np.ndarray, Any, np.ndarray, dict[str, Any]], None]


def run_until_episodes(
    envs: gym.vector.VectorEnv,
    episodes_per_env: int,
    seed: int,
    act: Callable[[np.ndarray], Any],
    on_step: StepHook | None = None,
) -> tuple[list[list[FinishedEpisode]], int]:
    """Step a SAME_STEP vector env with ``act(observations)`` until every sub-env has finished
    ``episodes_per_env`` episodes.

    The envs are reset with ``seed`` (sub-env ``i`` gets ``seed + i``). After each step,
    ``on_step(observations_before, action, done, infos)`` sees the batch (``done`` = terminated or
    truncated). Sub-envs that reach their quota early keep stepping in lockstep; their extra episodes are
    not returned. Returns, per sub-env, its first ``episodes_per_env`` finished episodes (final info and
    final observation, from ``final_info`` / ``final_obs``) and the env steps taken.
    """
    check_same_step(envs)
    num_envs = envs.num_envs
    observations, _ = envs.reset(seed=seed)
    finished: list[list[FinishedEpisode]] = [[] for _ in range(num_envs)]
    env_steps = 0
    while min(map(len, finished)) < episodes_per_env:
        action = act(observations)
        next_observations, _, terminated, truncated, infos = envs.step(action)
        env_steps += num_envs
        done = terminated | truncated
        if on_step is not None:
            on_step(observations, action, done, infos)
        for i in np.flatnonzero(done):
            if len(finished[i]) < episodes_per_env:
                finished[i].append(FinishedEpisode(final_info_of(infos, i), infos["final_obs"][i]))
        observations = next_observations
    return finished, env_steps


@torch.no_grad()
def collect_episodes(
    policy: ZTokenPolicy,
    encoder: ObservationEncoder,
    envs: gym.vector.VectorEnv,
    episodes_per_env: int,
    seed: int,
    generator: torch.Generator | None,
    token_decoding: Decoding = "sample",
    digit_decoding: Decoding = "sample",
    id_prefix: str = "ep",
) -> tuple[list[ZTokenEpisode], int]:
    """Run the policy until every sub-env has finished ``episodes_per_env`` episodes.

    The vector env is reset with ``seed`` (sub-env ``i`` gets ``seed + i``), so a (seed, policy, generator)
    triple fixes the episodes. Sub-envs that reach their quota early keep stepping in lockstep; those extra
    partial episodes are discarded. Returns the episodes ordered by (sub-env, episode) and the env steps.
    """
    num_envs = envs.num_envs
    builders = [ZTokenEpisode(f"{id_prefix}-e{i}-0") for i in range(num_envs)]
    completed: list[list[ZTokenEpisode]] = [[] for _ in range(num_envs)]
    pending: list[ActionSample] = []  # the sample behind the action being stepped, for ``record``

    def act(observations: np.ndarray) -> dict[str, np.ndarray]:
        pending.append(policy.act(encoder.encode(observations), generator, token_decoding, digit_decoding))
        return {"token": pending[-1].tokens.cpu().numpy(), "digits": pending[-1].digits.cpu().numpy()}

    def record(observations: np.ndarray, action: dict[str, np.ndarray], done: np.ndarray, _: dict) -> None:
        sample = pending.pop()
        for i, builder in enumerate(builders):
            builder.observations.append(observations[i].copy())
            builder.tokens.append(int(action["token"][i]))
            builder.digits.append(action["digits"][i].tolist())
            builder.log_probs.append(float(sample.log_probs[i]))
            builder.values.append(float(sample.values[i]))
            builder.entropy.append(float(sample.entropy[i]))
            if done[i]:
                builder.digit_logits = sample.digit_logits[i].tolist()
                completed[i].append(builder)
                builders[i] = ZTokenEpisode(f"{id_prefix}-e{i}-{len(completed[i])}")

    was_training = policy.training
    policy.eval()
    finished, env_steps = run_until_episodes(envs, episodes_per_env, seed, act, record)
    policy.train(was_training)
    episodes = []
    for per_env, reports in zip(completed, finished, strict=True):
        for episode, report in zip(per_env, reports, strict=False):  # per_env may hold extra episodes
            episode.breakdown = report.info
            episodes.append(episode)
    return episodes, env_steps
