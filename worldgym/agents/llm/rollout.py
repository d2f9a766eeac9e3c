"""Multi-turn rollouts of an engine in worldgym text envs, keeping the exact token ids the model produced.

Every text env is treated as "string action in, string observation out": MathQA-v1 takes the answer text, a
tool env wrapped in :class:`worldgym.wrappers.ParseToolCall` takes the raw reply. The chat is rendered with
the tokenizer's chat template (with ``tools`` from reset info when present); after each reply only the *new*
template text (the observation turn and the next assistant header) is tokenized and appended, so the model's
own tokens are never re-tokenized.

Episodes run in a pool of single envs or in the sub-envs of a gymnasium vector env (sync or async); the same
seeds give the same episodes either way.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from transformers import PreTrainedTokenizerBase

from worldgym.agents.llm.constrained import CopyConstraint, TokenTextIndex, copied_argument_keys
from worldgym.agents.llm.engines.base import Generation, GenerationEngine, SamplingParams

__all__ = ["Episode", "RolloutCollector", "StepOverride", "Turn", "collate_episodes", "content_token_range",
           "encode_chat", "make_vector_env"]


@dataclass
class Turn:
    """One model reply and what the env answered.

    ``action_span`` is the ``[start, end)`` range of the reply's tokens in the episode's ``token_ids`` (the
    sampled tokens, plus a closing eos the collector appended to a cut-off reply); ``observation_span`` the
    range of the template tokens that carry the env's answer and open the next reply (empty after the last
    turn), and ``content_span`` the tokens inside it that spell the answer's text itself, without the
    template's role header and end-of-turn tokens (empty when the tokenizer gives no character offsets).
    Auxiliary losses index these tokens directly instead of re-tokenising text.
    """

    action: str
    observation: str
    reward: float
    finish_reason: str
    info: dict[str, Any] = field(default_factory=dict)
    action_span: tuple[int, int] = (0, 0)
    observation_span: tuple[int, int] = (0, 0)
    content_span: tuple[int, int] = (0, 0)


@dataclass
class Episode:
    """A whole episode as one token sequence.

    ``action_mask[i]`` is 1 when ``token_ids[i]`` was sampled by the model (trained on) and 0 for prompt, env
    and template tokens; ``old_logprobs[i]`` is the sampling policy's logprob of a model token (0.0
    elsewhere); ``allowed_token_ids[i]`` lists the tokens a constrained sampler could choose from at model
    token ``i`` (only where a constraint narrowed it). ``reset_info`` is the env's reset info (tools, task
    details); ``observed_values`` the copyable strings the env's observations showed
    (``info["observed_values"]``), in order. ``policy_version`` counts the optimizer updates of the weights
    that sampled it (set by the rollout runtime; a learner at version ``v`` trains on it with lag
    ``v - policy_version``). ``imagined``: a :class:`StepOverride` may answer some of its steps in the env's
    place (their turns' info says ``imagined``).
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
    allowed_token_ids: dict[int, list[int]] = field(default_factory=dict)
    reset_info: dict[str, Any] = field(default_factory=dict)
    observed_values: list[str] = field(default_factory=list)
    policy_version: int = 0
    imagined: bool = False

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


def reset_messages(observation: Any, info: dict[str, Any], system_prompt: str | None = None) -> list[dict[str, str]]:
    """An episode's opening chat: the env's ``info["system_prompt"]`` (else ``system_prompt``), if any, then the
    reset observation as the user's turn."""
    system = info.get("system_prompt", system_prompt)
    messages = [{"role": "system", "content": system}] if system else []
    return [*messages, {"role": "user", "content": str(observation)}]


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
    messages: list[dict[str, str]]
    tools: list | None
    constraint: CopyConstraint | None = None


StepResult = tuple[Any, float, bool, bool, dict[str, Any]]


class StepOverride(Protocol):
    """Answers some steps of some episodes in the env's place (e.g. a learned model of the env)."""

    def selects(self, group_id: int) -> bool:
        """Whether episodes of this group may have steps answered by :meth:`answer` (``Episode.imagined``)."""
        ...

    def answer(self, episodes: Sequence[Episode], actions: Sequence[str], envs: Sequence[gym.Env]
               ) -> list[StepResult | None]:
        """Per episode, its reply text and the env that plays it: the step result in the env's place, or None
        for the env to answer."""
        ...


class _EnvPool:
    """One single env per episode, built by ``make_env`` on demand and reused across calls."""

    def __init__(self, make_env: Callable[[], gym.Env]):
        self.make_env = make_env
        self.envs: list[gym.Env] = []

    def reset(self, seeds: list[int]) -> list[tuple[Any, dict[str, Any]]]:
        while len(self.envs) < len(seeds):
            self.envs.append(self.make_env())
        return [env.reset(seed=seed) for env, seed in zip(self.envs, seeds)]

    def step(self, rows: list[int], actions: list[str]) -> list[StepResult]:
        return [self.envs[row].step(action) for row, action in zip(rows, actions)]

    def name(self, row: int) -> str:
        """The env that plays row ``row``, for error messages."""
        return _env_name(self.envs[row])


class _VectorEnvRows:
    """A gymnasium ``VectorEnv`` of text envs seen as rows: sub-env ``i`` plays episode ``i``.

    A vector env can only step all its sub-envs at once, and episodes end at different turns. Every turn
    therefore steps every sub-env; a row whose episode has ended gets a placeholder ``""`` action and its
    results are dropped, so it never feeds a new episode's data into the finished one. This works under each
    of gymnasium 1.x's autoreset modes (``vector_env.metadata["autoreset_mode"]``):

    * ``NEXT_STEP`` (the default): the step after an episode ends resets that sub-env and ignores its action;
      later placeholder steps play a throw-away episode.
    * ``SAME_STEP``: the ending step already returns the next episode's first observation, so the real last
      observation and info are read from ``info["final_obs"]`` / ``info["final_info"]``.
    * ``DISABLED``: sub-envs the last step ended are reset (``options={"reset_mask": ...}``) before the next
      step, as that mode requires.

    An ``AsyncVectorEnv`` needs ``shared_memory=False`` (shared memory garbles ``Text`` observations) and
    ``SAME_STEP`` or ``DISABLED``: in gymnasium 1.4 its workers without shared memory keep a pending
    ``NEXT_STEP`` autoreset across ``reset()``, so a reseeded sub-env would restart on its first step.

    :meth:`reset` reseeds every sub-env, so each ``collect`` starts from the same state whatever the previous
    one left behind. Vector infos (a dict of per-env arrays with ``_key`` masks) are split back into one plain
    dict per row with Python scalars, equal to what the single env returned.
    """

    def __init__(self, vector_env: gym.vector.VectorEnv):
        if not isinstance(vector_env, gym.vector.VectorEnv):
            raise TypeError(f"vector_env must be a gymnasium VectorEnv, got {type(vector_env).__name__}")
        if getattr(vector_env.unwrapped, "shared_memory", False) and isinstance(
            vector_env.single_observation_space, spaces.Text
        ):
            raise ValueError(
                "AsyncVectorEnv(shared_memory=True) garbles Text observations in gymnasium 1.x: build it "
                "with shared_memory=False (gym.make_vec(..., vector_kwargs={'shared_memory': False}))"
            )
        self.env = vector_env
        self.size = vector_env.num_envs
        self.mode = gym.vector.AutoresetMode(
            vector_env.metadata.get("autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP)
        )
        if isinstance(vector_env.unwrapped, gym.vector.AsyncVectorEnv) and (
            self.mode == gym.vector.AutoresetMode.NEXT_STEP
        ):
            raise ValueError(
                "an AsyncVectorEnv without shared memory does not clear a pending NEXT_STEP autoreset on "
                "reset() (gymnasium 1.4), which would restart reseeded episodes: build it with "
                "autoreset_mode=gym.vector.AutoresetMode.SAME_STEP (or DISABLED), e.g. via make_vector_env"
            )
        self._ended = np.zeros(self.size, dtype=bool)  # sub-envs whose (possibly throw-away) episode ended

    def reset(self, seeds: list[int]) -> list[tuple[Any, dict[str, Any]]]:
        observations, info = self.env.reset(seed=seeds)
        self._ended[:] = False
        return [(observations[row], _row_info(info, row)) for row in range(self.size)]

    def step(self, rows: list[int], actions: list[str]) -> list[StepResult]:
        if self.mode == gym.vector.AutoresetMode.DISABLED and self._ended.any():
            self.env.reset(options={"reset_mask": self._ended.copy()})
        batch = [""] * self.size
        for row, action in zip(rows, actions):
            batch[row] = action
        observations, rewards, terminated, truncated, info = self.env.step(tuple(batch))
        self._ended = np.logical_or(terminated, truncated)
        results = []
        for row in rows:
            observation, row_info = observations[row], _row_info(info, row)
            if self.mode == gym.vector.AutoresetMode.SAME_STEP and self._ended[row]:
                observation, row_info = info["final_obs"][row], _row_info(info["final_info"], row)
            ended = bool(terminated[row]), bool(truncated[row])
            results.append((observation, float(rewards[row]), *ended, row_info))
        return results

    def name(self, row: int) -> str:
        """The sub-env that plays row ``row``, for error messages."""
        sub_envs = getattr(self.env.unwrapped, "envs", None)  # a SyncVectorEnv's; AsyncVectorEnv has none
        if sub_envs is not None:
            return f"{_env_name(sub_envs[row])}, sub-env {row} of a {type(self.env).__name__},"
        return f"sub-env {row} of {_env_name(self.env)}"


def _env_name(env: gym.Env | gym.vector.VectorEnv) -> str:
    """``"<env id> (<class>)"``, or the class alone for an env not made from a registered id."""
    name = type(env.unwrapped).__name__
    return f"{env.spec.id} ({name})" if getattr(env, "spec", None) is not None else name


def _check_observation(observation: Any, env_name: str, call: str) -> None:
    """A text env's observation must be a str: anything else is an env bug, not training data."""
    if not isinstance(observation, str):
        raise TypeError(
            f"{env_name} returned a {type(observation).__name__} observation from {call}(); RolloutCollector "
            f"needs str observations (text envs, or a wrapper that renders the observation as text)"
        )


def content_token_range(tokenizer: PreTrainedTokenizerBase, text: str, content: str
                        ) -> tuple[list[int], tuple[int, int]]:
    """``text``'s token ids and the ``[start, end)`` range of the tokens that lie wholly inside the first
    occurrence of ``content`` in it; ``(0, 0)`` when ``content`` is empty or absent, or the tokenizer gives no
    character offsets (a slow tokenizer)."""
    if not tokenizer.is_fast:
        return tokenizer(text, add_special_tokens=False)["input_ids"], (0, 0)
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    begin = text.find(content) if content else -1
    if begin < 0:
        return encoded["input_ids"], (0, 0)
    end = begin + len(content)
    inside = [i for i, (s, e) in enumerate(encoded["offset_mapping"]) if begin <= s and e <= end and e > s]
    return encoded["input_ids"], (inside[0], inside[-1] + 1) if inside else (0, 0)


def _observed_values(info: dict[str, Any], observation: str, earlier: list[str]) -> list[str]:
    """``earlier`` plus the new strings of ``info["observed_values"]`` that really occur in ``observation``."""
    new = [v for v in info.get("observed_values", ()) if isinstance(v, str) and v and v in observation]
    return earlier + [v for v in dict.fromkeys(new) if v not in earlier]


def _row_info(info: dict[str, Any], row: int) -> dict[str, Any]:
    """Sub-env ``row``'s info out of a gymnasium vector info (arrays with ``_key`` masks; dicts nest)."""
    out = {}
    for key, value in info.items():
        mask = info.get(f"_{key}")
        if mask is None or not mask[row]:  # ``key`` is itself a mask, or this sub-env did not report it
            continue
        item = _row_info(value, row) if isinstance(value, dict) else value[row]
        out[key] = item.item() if isinstance(item, np.generic) else item
    return out


def make_vector_env(
    make_env: Callable[[], gym.Env],
    num_envs: int,
    mode: Literal["sync", "async"] = "sync",
    **vector_kwargs: Any,
) -> gym.vector.VectorEnv:
    """A gymnasium vector env of ``num_envs`` envs from ``make_env``, ready for a :class:`RolloutCollector`
    (text envs) or Z-token PPO (token envs): ``"sync"`` steps them in this process, ``"async"`` each in a
    subprocess (without shared memory). Sub-envs autoreset in the step that ends them (``SAME_STEP``, so the
    step's info holds ``final_obs`` / ``final_info``); ``vector_kwargs`` go to the vector env class."""
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    vector_kwargs = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP, **vector_kwargs}
    if mode == "sync":
        return gym.vector.SyncVectorEnv([make_env] * num_envs, **vector_kwargs)
    if mode == "async":
        return gym.vector.AsyncVectorEnv([make_env] * num_envs, **{"shared_memory": False, **vector_kwargs})
    raise ValueError(f"mode must be 'sync' or 'async', got {mode!r}")


class RolloutCollector:
    """Runs groups of episodes with an engine until every episode ends.

    Episodes run either in a pool of single envs (``make_env``) or in the sub-envs of a gymnasium vector env
    (``vector_env``, e.g. ``gym.make_vec("CSRPhone-v1", num_envs=16, wrappers=[ParseToolCall])`` or
    :func:`make_vector_env`); both give the same episodes for the same seeds. A vector env needs exactly one
    sub-env per episode of a :meth:`collect` call (``len(env_seeds) * group_size``); see
    :class:`_VectorEnvRows` for how sub-envs that finished early are handled.

    Args:
        engine: any :class:`GenerationEngine`.
        tokenizer: the chat tokenizer (its ``eos_token`` ends an assistant turn).
        make_env: builds one env (called as often as episodes run at once; envs are kept and reused).
        max_turns: model replies per episode before it is truncated.
        max_episode_tokens: an episode whose next reply could exceed this many tokens is truncated.
        system_prompt: used when reset info has no ``system_prompt``.
        vector_env: a gymnasium ``VectorEnv`` of text envs, instead of ``make_env`` (kept as
            ``self.vector_env``, ``None`` for a pool; the caller closes it).
        decoding: ``"free"``, or ``"constrained"``: tool arguments the schema marks as copied can only take
            values the episode's observations showed (:mod:`worldgym.agents.llm.constrained`; needs an engine
            that applies constraints, e.g. :class:`HFEngine`).

    ``step_override`` (a :class:`StepOverride`, settable after construction; pools of single envs only) answers
    some steps of the episodes it selects in the env's place; those steps never reach the env.
    """

    def __init__(
        self,
        engine: GenerationEngine,
        tokenizer: PreTrainedTokenizerBase,
        make_env: Callable[[], gym.Env] | None = None,
        max_turns: int = 8,
        max_episode_tokens: int = 4096,
        system_prompt: str | None = None,
        *,
        vector_env: gym.vector.VectorEnv | None = None,
        decoding: Literal["free", "constrained"] = "free",
    ):
        if decoding not in ("free", "constrained"):
            raise ValueError(f"decoding must be 'free' or 'constrained', got {decoding!r}")
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer needs an eos_token (the end of an assistant turn)")
        if (make_env is None) == (vector_env is None):
            raise ValueError(
                "RolloutCollector needs exactly one of make_env (a factory of single envs) or vector_env "
                "(a gymnasium VectorEnv)"
            )
        self.engine, self.tokenizer, self.make_env, self.vector_env = engine, tokenizer, make_env, vector_env
        self.max_turns, self.max_episode_tokens, self.system_prompt = (
            max_turns,
            max_episode_tokens,
            system_prompt,
        )
        self._envs = _EnvPool(make_env) if make_env is not None else _VectorEnvRows(vector_env)
        self._prompt_cache: dict[str, list[int]] = {}
        self.decoding = decoding
        self._token_index: TokenTextIndex | None = None  # built on first constrained use (decodes the vocab)
        self.step_override: StepOverride | None = None

    def collect(
        self, env_seeds: Sequence[int], group_size: int, params: SamplingParams, first_group_id: int = 0
    ) -> list[Episode]:
        """``group_size`` episodes per env seed (same task, one group id each), sampled with ``params`` (n=1
        per turn; ``params.seed`` + turn index seeds each turn)."""
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}")
        seeds = [int(seed) for seed in env_seeds for _ in range(group_size)]
        if isinstance(self._envs, _VectorEnvRows) and len(seeds) != self._envs.size:
            raise ValueError(
                f"the vector env has num_envs={self._envs.size}, but collect() runs one episode per sub-env: "
                f"{len(env_seeds)} env seeds x group_size {group_size} = {len(seeds)}; build the vector env "
                f"with num_envs={len(seeds)} or pass that many seeds"
            )
        starts = self._envs.reset(seeds)
        for row, (observation, _) in enumerate(starts):
            _check_observation(observation, self._envs.name(row), "reset")
        running = [
            self._start(observation, info, seed, first_group_id + index // group_size)
            for index, (seed, (observation, info)) in enumerate(zip(seeds, starts))
        ]
        for turn in range(self.max_turns):
            rows = [row for row, run in enumerate(running) if not run.episode.done]
            if not rows:
                break
            turn_params = replace(params, n=1, seed=params.seed + 7919 * turn)
            prompts = [running[row].episode.token_ids for row in rows]
            if self.decoding == "constrained":
                constraints = [running[row].constraint for row in rows]
                generations = self.engine.generate(prompts, turn_params, constraints)
            else:
                generations = self.engine.generate(prompts, turn_params)
            replies = [
                self._add_reply(running[row].episode, generation)
                for row, (generation,) in zip(rows, generations)
            ]
            results = self._step(running, rows, [text for text, _ in replies])
            for row, (observation, *_) in zip(rows, results):
                _check_observation(observation, self._envs.name(row), "step")
            for row, (generation,), (text, span), result in zip(rows, generations, replies, results):
                self._add_step(running[row], text, span, generation.finish_reason, *result)
        return [run.episode for run in running]

    def _step(self, running: list[_Running], rows: list[int], actions: list[str]) -> list[StepResult]:
        """The envs' answers to ``actions`` (row ``rows[i]`` took ``actions[i]``), some from the step override."""
        if self.step_override is None:
            return self._envs.step(rows, actions)
        if not isinstance(self._envs, _EnvPool):
            raise ValueError("a step override needs a pool of single envs (make_env), not a vector env: a vector "
                             "env steps every sub-env on every turn")
        results = self.step_override.answer([running[row].episode for row in rows], actions,
                                            [self._envs.envs[row] for row in rows])
        real = [index for index, result in enumerate(results) if result is None]
        for index, result in zip(real, self._envs.step([rows[i] for i in real], [actions[i] for i in real])):
            results[index] = result
        return results  # type: ignore[return-value]

    def _start(self, observation: Any, info: dict[str, Any], seed: int, group_id: int) -> _Running:
        tools = info.get("tools") or None
        messages = reset_messages(observation, info, self.system_prompt)
        key = json.dumps([messages, tools], sort_keys=True)  # a group shares one prompt: render it once
        prompt = self._prompt_cache.get(key)
        if prompt is None:
            if len(self._prompt_cache) >= 4096:
                self._prompt_cache.clear()
            prompt = self._prompt_cache[key] = encode_chat(self.tokenizer, messages, tools)
        episode = Episode([], [], [], len(prompt), group_id, seed, reset_info=dict(info))
        episode.imagined = self.step_override is not None and self.step_override.selects(group_id)
        episode.extend(prompt, from_model=False)
        episode.observed_values = _observed_values(info, str(observation), [])
        run = _Running(episode, messages, tools)
        if self.decoding == "constrained":
            if self._token_index is None:
                self._token_index = TokenTextIndex(self.tokenizer)
            keys = copied_argument_keys(tools or [])
            run.constraint = CopyConstraint(self._token_index, keys, tuple(episode.observed_values))
        return run

    def _add_reply(self, episode: Episode, generation: Generation) -> tuple[str, tuple[int, int]]:
        """Append the model's tokens (closing a cut-off turn with a context eos); returns the reply text and
        its token span."""
        token_ids, eos = generation.token_ids, self.tokenizer.eos_token_id
        start = len(episode.token_ids)
        for offset, allowed in enumerate(generation.allowed_token_ids or []):
            if allowed is not None:
                episode.allowed_token_ids[start + offset] = list(allowed)
        episode.extend(token_ids, from_model=True, logprobs=generation.logprobs)
        reply_ids = token_ids[:-1] if token_ids and token_ids[-1] == eos else token_ids
        if generation.finish_reason == "length" or not token_ids or token_ids[-1] != eos:
            episode.extend([eos], from_model=False)  # close the cut-off turn; not a model token
        return self.tokenizer.decode(reply_ids, skip_special_tokens=False), (start, len(episode.token_ids))

    def _add_step(
        self,
        run: _Running,
        text: str,
        action_span: tuple[int, int],
        finish_reason: str,
        observation: Any,
        reward: float,
        terminated: bool,
        truncated: bool,
        info: dict[str, Any],
    ) -> None:
        """Record what the env answered to ``text`` and append the next turn's template tokens."""
        episode = run.episode
        episode.reward += float(reward)
        turn = Turn(text, observation, float(reward), finish_reason, dict(info), action_span)
        episode.turns.append(turn)
        episode.success = bool(info.get("success", episode.success))
        episode.terminated = bool(terminated)
        episode.truncated = bool(truncated) or (not terminated and len(episode.turns) >= self.max_turns)
        seen = len(episode.observed_values)
        episode.observed_values = _observed_values(info, observation, episode.observed_values)
        if run.constraint is not None and len(episode.observed_values) > seen:
            run.constraint = replace(run.constraint, values=tuple(episode.observed_values))
        turn.observation_span = (len(episode.token_ids), len(episode.token_ids))
        if episode.done:
            return
        role = "tool" if run.tools else "user"
        before = run.messages + [{"role": "assistant", "content": text}]
        run.messages = before + [{"role": role, "content": observation}]
        suffix, content = self._turn_suffix(before, run.messages, run.tools, str(observation))
        if len(episode.token_ids) + len(suffix) + 1 >= self.max_episode_tokens:
            episode.truncated = True
            return
        start = len(episode.token_ids)
        episode.extend(suffix, from_model=False)
        turn.observation_span = (start, len(episode.token_ids))
        turn.content_span = (start + content[0], start + content[1])

    def _turn_suffix(self, before: list[dict], after: list[dict], tools: list | None, observation: str
                     ) -> tuple[list[int], tuple[int, int]]:
        """Tokens of the template text that follows the last assistant turn's eos in ``after``, and the range of
        those that lie inside the ``observation`` text (see :func:`content_token_range`)."""
        kwargs = {"tools": tools, "tokenize": False}
        rendered_before = self.tokenizer.apply_chat_template(before, add_generation_prompt=False, **kwargs)
        rendered_after = self.tokenizer.apply_chat_template(after, add_generation_prompt=True, **kwargs)
        end_of_reply = rendered_before.rfind(self.tokenizer.eos_token) + len(self.tokenizer.eos_token)
        if not rendered_after.startswith(rendered_before[:end_of_reply]):
            raise ValueError("the chat template does not render conversations as prefixes of each other")
        return content_token_range(self.tokenizer, rendered_after[end_of_reply:], observation)


def collate_episodes(episodes: Sequence[Episode], pad_token_id: int) -> dict[str, Any]:
    """Right-padded training tensors: ``input_ids``/``attention_mask`` ``[B, T]``, and ``action_mask``/
    ``old_logprobs`` ``[B, T-1]`` aligned with the *targets* ``input_ids[:, 1:]``; ``rewards``, ``group_ids``
    ``[B]``; ``allowed``: per row, target column -> the token ids a constrained sampler allowed (a list of
    dicts, for :func:`worldgym.agents.llm.scoring.score_tokens`).
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
        "allowed": [{index - 1: ids for index, ids in e.allowed_token_ids.items()} for e in episodes],
    }
