"""Multi-turn rollouts of an engine in worldgym text envs, keeping the exact token ids the model produced.

Every text env is treated as "string action in, string observation out": MathQA-v0 takes the answer text, a
tool env wrapped in :class:`worldgym.wrappers.ParseToolCall` takes the raw reply. The chat is rendered with
the tokenizer's chat template (with ``tools`` from reset info when present); after each reply only the *new*
template text (the observation turn and the next assistant header) is tokenized and appended, so the model's
own tokens are never re-tokenized.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import gymnasium as gym
import torch
from transformers import PreTrainedTokenizerBase

from worldgym.agents.llm.engines.base import GenerationEngine, SamplingParams

__all__ = ["Episode", "RolloutCollector", "Turn", "collate_episodes", "encode_chat"]


@dataclass
class Turn:
    """One model reply and what the env answered."""

    action: str
    observation: str
    reward: float
    finish_reason: str
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Episode:
    """A whole episode as one token sequence.

    ``action_mask[i]`` is 1 when ``token_ids[i]`` was sampled by the model (trained on) and 0 for prompt, env
    and template tokens; ``old_logprobs[i]`` is the sampling policy's logprob of a model token (0.0
    elsewhere).
    """

    token_ids: list[int]
    action_mask: list[int]
    old_logprobs: list[float]
    prompt_length: int
    group_id: int
    env_seed: int
    reward: float = 0.0
    turns: list[Turn] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    success: bool = False

    @property
    def num_model_tokens(self) -> int:
        return sum(self.action_mask)

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    def extend(
        self, token_ids: Sequence[int], from_model: bool, logprobs: Sequence[float] | None = None
    ) -> None:
        """Append tokens, marking them as model output (with their logprobs) or as context."""
        self.token_ids.extend(int(t) for t in token_ids)
        self.action_mask.extend([int(from_model)] * len(token_ids))
        self.old_logprobs.extend(logprobs if from_model and logprobs is not None else [0.0] * len(token_ids))


def encode_chat(
    tokenizer: PreTrainedTokenizerBase,
    messages: list[dict[str, str]],
    tools: list | None = None,
    add_generation_prompt: bool = True,
) -> list[int]:
    """Token ids of ``messages`` rendered with the tokenizer's chat template."""
    text = tokenizer.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=add_generation_prompt
    )
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@dataclass
class _Running:
    episode: Episode
    env: gym.Env
    messages: list[dict[str, str]]
    tools: list | None


class RolloutCollector:
    """Runs groups of episodes with an engine until every episode ends.

    Args:
        engine: any :class:`GenerationEngine`.
        tokenizer: the chat tokenizer (its ``eos_token`` ends an assistant turn).
        make_env: builds one env (called as often as episodes run at once; envs are kept and reused).
        max_turns: model replies per episode before it is truncated.
        max_episode_tokens: an episode whose next reply could exceed this many tokens is truncated.
        system_prompt: used when reset info has no ``system_prompt``.
    """

    def __init__(
        self,
        engine: GenerationEngine,
        tokenizer: PreTrainedTokenizerBase,
        make_env: Callable[[], gym.Env],
        max_turns: int = 8,
        max_episode_tokens: int = 4096,
        system_prompt: str | None = None,
    ):
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer needs an eos_token (the end of an assistant turn)")
        self.engine, self.tokenizer, self.make_env = engine, tokenizer, make_env
        self.max_turns, self.max_episode_tokens, self.system_prompt = (
            max_turns,
            max_episode_tokens,
            system_prompt,
        )
        self._envs: list[gym.Env] = []
        self._prompt_cache: dict[str, list[int]] = {}

    def collect(
        self, env_seeds: Sequence[int], group_size: int, params: SamplingParams, first_group_id: int = 0
    ) -> list[Episode]:
        """``group_size`` episodes per env seed (same task, one group id each), sampled with ``params`` (n=1
        per
        turn; ``params.seed`` + turn index seeds each turn)."""
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}")
        while len(self._envs) < len(env_seeds) * group_size:
            self._envs.append(self.make_env())
        running = [
            self._start(self._envs[g * group_size + k], int(seed), first_group_id + g)
            for g, seed in enumerate(env_seeds)
            for k in range(group_size)
        ]
        for turn in range(self.max_turns):
            active = [run for run in running if not run.episode.done]
            if not active:
                break
            turn_params = replace(params, n=1, seed=params.seed + 7919 * turn)
            generations = self.engine.generate([run.episode.token_ids for run in active], turn_params)
            for run, (generation,) in zip(active, generations):
                self._advance(run, generation.token_ids, generation.logprobs, generation.finish_reason)
        return [run.episode for run in running]

    def _start(self, env: gym.Env, seed: int, group_id: int) -> _Running:
        observation, info = env.reset(seed=seed)
        tools = info.get("tools") or None
        system = info.get("system_prompt", self.system_prompt)
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": str(observation)})
        key = json.dumps([messages, tools], sort_keys=True)  # a group shares one prompt: render it once
        prompt = self._prompt_cache.get(key)
        if prompt is None:
            if len(self._prompt_cache) >= 4096:
                self._prompt_cache.clear()
            prompt = self._prompt_cache[key] = encode_chat(self.tokenizer, messages, tools)
        episode = Episode([], [], [], len(prompt), group_id, seed)
        episode.extend(prompt, from_model=False)
        return _Running(episode, env, messages, tools)

    def _advance(
        self, run: _Running, token_ids: list[int], logprobs: list[float], finish_reason: str
    ) -> None:
        episode, eos = run.episode, self.tokenizer.eos_token_id
        episode.extend(token_ids, from_model=True, logprobs=logprobs)
        reply_ids = token_ids[:-1] if token_ids and token_ids[-1] == eos else token_ids
        if finish_reason == "length" or not token_ids or token_ids[-1] != eos:
            episode.extend([eos], from_model=False)  # close the cut-off turn; not a model token
        text = self.tokenizer.decode(reply_ids, skip_special_tokens=False)
        observation, reward, terminated, truncated, info = run.env.step(text)
        if not isinstance(
            observation, str
        ):  # a broken env ends the episode with no reward instead of crashing
            info = {"error": f"observation is {type(observation).__name__}, not str"}
            observation, reward, terminated, truncated = "", 0.0, False, True
        episode.reward += float(reward)
        episode.turns.append(Turn(text, observation, float(reward), finish_reason, dict(info)))
        episode.success = bool(info.get("success", episode.success))
        episode.terminated = bool(terminated)
        episode.truncated = bool(truncated) or (not terminated and len(episode.turns) >= self.max_turns)
        if episode.done:
            return
        role = "tool" if run.tools else "user"
        before = run.messages + [{"role": "assistant", "content": text}]
        run.messages = before + [{"role": role, "content": observation}]
        suffix = self._turn_suffix(before, run.messages, run.tools)
        if len(episode.token_ids) + len(suffix) + 1 >= self.max_episode_tokens:
            episode.truncated = True
            return
        episode.extend(suffix, from_model=False)

    def _turn_suffix(self, before: list[dict], after: list[dict], tools: list | None) -> list[int]:
        """Tokens of the template text that follows the last assistant turn's eos in ``after``."""
        kwargs = {"tools": tools, "tokenize": False}
        rendered_before = self.tokenizer.apply_chat_template(before, add_generation_prompt=False, **kwargs)
        rendered_after = self.tokenizer.apply_chat_template(after, add_generation_prompt=True, **kwargs)
        end_of_reply = rendered_before.rfind(self.tokenizer.eos_token) + len(self.tokenizer.eos_token)
        if not rendered_after.startswith(rendered_before[:end_of_reply]):
            raise ValueError("the chat template does not render conversations as prefixes of each other")
        return self.tokenizer(rendered_after[end_of_reply:], add_special_tokens=False)["input_ids"]


def collate_episodes(episodes: Sequence[Episode], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Right-padded training tensors: ``input_ids``/``attention_mask`` ``[B, T]``, and ``action_mask``/
    ``old_logprobs`` ``[B, T-1]`` aligned with the *targets* ``input_ids[:, 1:]``; ``rewards``, ``group_ids``
    ``[B]``.
    """
    if not episodes:
        raise ValueError("collate_episodes needs at least one episode")
    width = max(len(e.token_ids) for e in episodes)
    batch = len(episodes)
    input_ids = torch.full((batch, width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((batch, width), dtype=torch.long)
    action_mask = torch.zeros((batch, width), dtype=torch.float32)
    old_logprobs = torch.zeros((batch, width), dtype=torch.float32)
    for row, episode in enumerate(episodes):
        length = len(episode.token_ids)
        input_ids[row, :length] = torch.tensor(episode.token_ids)
        attention_mask[row, :length] = 1
        action_mask[row, :length] = torch.tensor(episode.action_mask, dtype=torch.float32)
        old_logprobs[row, :length] = torch.tensor(episode.old_logprobs)
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "action_mask": action_mask[:, 1:],
        "old_logprobs": old_logprobs[:, 1:],
        "rewards": torch.tensor([e.reward for e in episodes], dtype=torch.float32),
        "group_ids": torch.tensor([e.group_id for e in episodes], dtype=torch.long),
    }
