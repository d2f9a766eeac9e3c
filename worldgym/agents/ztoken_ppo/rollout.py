"""Collect complete episodes from a Gymnasium vector env with per-step actions, log-probs, values, entropy."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from worldgym.agents.ztoken_ppo.encoding import ObservationEncoder
from worldgym.agents.ztoken_ppo.model import Decoding, ZTokenPolicy
from worldgym.envs.ztoken.vocab import ZTokenVocab


def make_vector_env(env_id: str, env_kwargs: dict[str, Any], num_envs: int) -> SyncVectorEnv:
    """``num_envs`` copies of the env, auto-reset in the same step (each step's info holds ``final_info``)."""
    return SyncVectorEnv(
        [lambda: gym.make(env_id, **env_kwargs) for _ in range(num_envs)],
        autoreset_mode=AutoresetMode.SAME_STEP,
    )


def vocab_of(envs: gym.vector.VectorEnv) -> ZTokenVocab:
    """The env's token vocabulary, from its action space (``token`` has V + 1 values)."""
    return ZTokenVocab(int(envs.single_action_space["token"].n) - 1)


@dataclass
class Episode:
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
        """The rollout-log line (the seed's schema)."""
        logits = torch.tensor(self.digit_logits)
        b = self.breakdown
        return {
            "id": self.episode_id,
            "input_ids": [int(i) for i in self.observations[0] if int(i) != vocab.pad_id],
            "generated_ids": [vocab.action_to_id(t) for t in self.tokens],
            "terminated_by": b["terminated_by"],
            "num_generated": b["num_generated"],
            "digit_logits": [[round(x, 5) for x in row] for row in self.digit_logits],
            "digit_probs": [[round(x, 5) for x in row] for row in logits.softmax(-1).tolist()],
            "digit_pred": b["digit_pred"],
            "digit_true": b["digit_true"],
            "reward_full": b["reward_full"],
            "partial_scale": b["partial_scale"],
            "keep_prob": b["keep_prob"],
            "applied_mask": b["applied_mask"],
            "applied_count": b["applied_count"],
            "correct_count": b["correct_count"],
            "reward_partial": b["reward_partial"],
            "length_penalty": b["length_penalty"],
            "reward_final": b["reward_final"],
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
) -> tuple[list[Episode], int]:
    """Run the policy until every sub-env has finished ``episodes_per_env`` episodes.

    The vector env is reset with ``seed`` (sub-env ``i`` gets ``seed + i``), so a (seed, policy, generator)
    triple fixes the episodes. Sub-envs that reach their quota early keep stepping in lockstep; those extra
    partial episodes are discarded. Returns the episodes ordered by (sub-env, episode) and the env steps.
    """
    num_envs = envs.num_envs
    observations, _ = envs.reset(seed=seed)
    builders = [Episode(f"{id_prefix}-e{i}-0") for i in range(num_envs)]
    finished: list[list[Episode]] = [[] for _ in range(num_envs)]
    env_steps = 0
    was_training = policy.training
    policy.eval()
    while min(len(done) for done in finished) < episodes_per_env:
        sample = policy.act(encoder.encode(observations), generator, token_decoding, digit_decoding)
        tokens, digits = sample.tokens.cpu().numpy(), sample.digits.cpu().numpy()
        next_observations, _, terminated, truncated, infos = envs.step({"token": tokens, "digits": digits})
        env_steps += num_envs
        for i, builder in enumerate(builders):
            builder.observations.append(observations[i].copy())
            builder.tokens.append(int(tokens[i]))
            builder.digits.append(digits[i].tolist())
            builder.log_probs.append(float(sample.log_probs[i]))
            builder.values.append(float(sample.values[i]))
            builder.entropy.append(float(sample.entropy[i]))
            if terminated[i] or truncated[i]:
                builder.digit_logits = sample.digit_logits[i].tolist()
                builder.breakdown = final_info_of(infos, i)
                if len(finished[i]) < episodes_per_env:
                    finished[i].append(builder)
                builders[i] = Episode(f"{id_prefix}-e{i}-{len(finished[i])}")
        observations = next_observations
    policy.train(was_training)
    return [episode for per_env in finished for episode in per_env], env_steps


def append_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    """Append one JSON line per record."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")
