"""Imagined phone calls: a share of each step's episodes has ``make_phone_call`` answered by the world model.

In an imagined group the env still answers ``search_company`` and ``auth_info_form`` (deterministic lookups),
but every valid phone call is answered by a reply the world model writes: the ``world_model`` adapter behind
the ``<|predict_csr|> <|csr|>`` markers, or, under ``transfer="echo"``, the policy itself in the chat's own
tool turn. The reply's meaning comes from :func:`worldgym.envs.csr_phone.classify_reply` (or, with
``imagined_reply_reading="nearest"``, :func:`~worldgym.envs.csr_phone.nearest_reply_type`); an imagined episode
ends with reward 1 on a predicted ``task_complete``. Imagined replies are never training targets of the world
model (nor of the echo loss): they are its own output.

The replies come from an engine of their own, which keeps each imagined episode's KV from one call to the next
(``reuse_kv_cache`` with ``kv_cache_branches``: the next call reuses the conversation up to the last call and
prefills only what came after it, not the whole episode again) and merges the world model's LoRA layers for
generation under bf16 (``merge_lora``). A reply ends at its end marker or at any other special token
(:func:`reply_stops`).

To measure the imagined replies, a copy of the env taken at an episode's first phone call (the state a real
episode would be in after the same calls) plays every later call of the episode unseen, until its own episode
ends; the type of its reply is kept beside the imagined one as ``info["real_response_type"]``.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import torch
from peft import PeftModel
from transformers import PreTrainedTokenizerBase

from worldgym.agents.dual_lora.config import DualLoRAConfig
from worldgym.agents.dual_lora.world_model import wm_token_ids
from worldgym.agents.llm.adapters import using_adapters
from worldgym.agents.llm.engines import Generation, HFEngine, SamplingParams
from worldgym.agents.llm.rollout import Episode, StepResult, content_token_range
from worldgym.envs.csr_phone import classify_reply, nearest_reply_type
from worldgym.envs.csr_phone.phrases import TASK_COMPLETE
from worldgym.spaces import ToolCall, ToolCallSpace
from worldgym.wrappers.tool_call_text import parse_tool_call

__all__ = ["UNRECOGNISED", "PhoneCallImagination", "imagined_groups", "read_reply", "reply_opening", "reply_stops"]

PHONE_TOOL = "make_phone_call"
UNRECOGNISED = "unrecognised"  # response type of an imagined reply that follows no template
_PLACEHOLDER = "\x00reply\x00"


def imagined_groups(prompts_per_step: int, fraction: float) -> int:
    """How many of a step's ``prompts_per_step`` groups are imagined (``fraction`` of them, rounded)."""
    return round(prompts_per_step * fraction)


class PhoneCallImagination:
    """The rollout collector's step override for imagined groups (see the module docstring).

    Group ``g`` is imagined when ``g % prompts_per_step < imagined_groups(...)``: the first groups of each
    round of a step. Replies are sampled at ``config.temperature`` (seeded per call), at most
    ``config.imagined_reply_tokens`` tokens. ``reuse_kv_cache=False`` gives the engine no stored KV: every
    call prefills its episodes whole (the same replies up to float rounding, slower).
    """

    def __init__(self, model: PeftModel, tokenizer: PreTrainedTokenizerBase, config: DualLoRAConfig,
                 action_space: ToolCallSpace, dtype: torch.dtype | None = None, reuse_kv_cache: bool = True):
        if PHONE_TOOL not in action_space.tools:
            raise ValueError(f"imagined phone calls need an env with a {PHONE_TOOL!r} tool, got tools "
                             f"{list(action_space.tools)}")
        self.model, self.tokenizer, self.config, self.action_space = model, tokenizer, config, action_space
        self.count = imagined_groups(config.prompts_per_step, config.imagined_fraction)
        self.opening, _ = reply_opening(tokenizer, config)
        rows = self.count * config.group_size  # imagined episodes running at once (one round)
        self.engine = HFEngine(model, tokenizer.pad_token_id, reply_stops(tokenizer, config), dtype=dtype,
                               merge_lora=True, reuse_kv_cache=reuse_kv_cache, kv_cache_branches=True,
                               kv_cache_max_tokens=max(rows, 1) * config.max_episode_tokens)
        self._calls = 0
        # per imagined episode (by id, with a weak reference to tell it from a later one): see _shadow_step
        self._shadows: dict[int, tuple[weakref.ref[Episode], gym.Env | None]] = {}

    def selects(self, group_id: int) -> bool:
        """Whether the episodes of group ``group_id`` are imagined."""
        return group_id % self.config.prompts_per_step < self.count

    def answer(self, episodes: Sequence[Episode], actions: Sequence[str], envs: Sequence[gym.Env]
               ) -> list[StepResult | None]:
        """For each imagined episode's reply: the imagined step when it is a valid phone call, else None (the
        env answers it)."""
        calls = [index for index, (episode, text) in enumerate(zip(episodes, actions))
                 if episode.imagined and self._is_phone_call(text)]
        results: list[StepResult | None] = [None] * len(actions)
        truth = {index: self._shadow_step(episodes[index], actions[index], envs[index], index in calls)
                 for index in range(len(actions)) if episodes[index].imagined}
        if not calls:
            return results
        prompts = [[*episodes[index].token_ids, *self.opening] for index in calls]
        params = SamplingParams(temperature=self.config.temperature, max_new_tokens=self.config.imagined_reply_tokens,
                                seed=self.config.seed * 100_003 + self._calls)
        self._calls += 1
        for index, generation in zip(calls, self.replies(prompts, params)):
            text = self.tokenizer.decode(generation.token_ids, skip_special_tokens=True).strip()
            results[index] = _imagined_step(text, len(episodes[index].turns) + 1, truth.get(index),
                                            self.config.imagined_reply_reading)
        return results

    def replies(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        """The world model's reply to each prompt (a conversation up to a phone call, then the reply's
        opening), generated in eval mode with its adapter alone active."""
        was_training = self.model.training
        self.model.eval()
        try:
            with using_adapters(self.model, [self.config.world_model_adapter], self.config.adapter_names):
                return [generation for (generation,) in self.engine.generate(prompts, params)]
        finally:
            self.model.train(was_training)

    def _shadow_step(self, episode: Episode, action: str, env: gym.Env, phone_call: bool) -> str | None:
        """Step the episode's unseen copy of the env (made at its first phone call) with ``action``; the
        response type of its answer, None once its own episode has ended (or before the first call)."""
        key = id(episode)
        entry = self._shadows.get(key)
        if entry is None or entry[0]() is not episode:  # none yet, or an id reused by a new episode
            if not phone_call:
                return None
            if len(self._shadows) > 4096:  # copies of finished collections
                self._shadows = {k: v for k, v in self._shadows.items() if v[0]() is not None}
            world = env.unwrapped.world  # shared, read-only: not copied
            entry = self._shadows[key] = (weakref.ref(episode), copy.deepcopy(env, {id(world): world}))
        shadow = entry[1]
        if shadow is None:
            return None
        _, _, terminated, truncated, info = shadow.step(action)
        if terminated or truncated:
            self._shadows[key] = (entry[0], None)
        return info.get("response_type")

    def _is_phone_call(self, text: str) -> bool:
        call = parse_tool_call(text)
        return isinstance(call, ToolCall) and call.name == PHONE_TOOL and not self.action_space.validate(call)


def read_reply(text: str, reading: str = "exact") -> str:
    """An imagined reply's response type under ``reading`` (``DualLoRAConfig.imagined_reply_reading``),
    :data:`UNRECOGNISED` when it is read as none."""
    return (nearest_reply_type(text) if reading == "nearest" else classify_reply(text)) or UNRECOGNISED


def _imagined_step(text: str, turn: int, real_response_type: str | None, reading: str = "exact") -> StepResult:
    """The env step an imagined reply stands for: its type read by ``reading``, reward 1 and the end on
    completion."""
    response_type = read_reply(text, reading)
    complete = response_type == TASK_COMPLETE
    info: dict[str, Any] = {"tool": PHONE_TOOL, "response_type": response_type, "imagined": True,
                            "success": complete, "task_complete": complete, "turn": turn}
    if real_response_type is not None:
        info["real_response_type"] = real_response_type
    return text, float(complete), complete, False, info


def reply_opening(tokenizer: PreTrainedTokenizerBase, config: DualLoRAConfig) -> tuple[list[int], int]:
    """The tokens after a phone call that make the world model write the reply, and the token ending it: the
    markers ``<|predict_csr|> <|csr|>`` and ``<|/csr|>``, or under ``transfer="echo"`` the chat's tool-turn
    opening and eos."""
    if config.transfer == "echo":
        return _tool_turn_opening(tokenizer), tokenizer.eos_token_id
    predict, start, stop = wm_token_ids(tokenizer)
    return [predict, start], stop


def reply_stops(tokenizer: PreTrainedTokenizerBase, config: DualLoRAConfig) -> list[int]:
    """The tokens that end a written reply: its own end (:func:`reply_opening`'s) first, then every other special
    token but the opening markers. A reply is plain text, so a model that writes a special token (opens a chat
    turn, say, as an untrained world-model adapter does) has left the reply."""
    opening, stop = reply_opening(tokenizer, config)
    markers = set() if config.transfer == "echo" else set(opening)
    special = {i for i, token in tokenizer.added_tokens_decoder.items() if token.special}
    return [stop, *sorted((special | set(tokenizer.all_special_ids)) - markers - {stop})]


def _tool_turn_opening(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The template tokens that open a tool turn after an assistant's reply (what precedes a tool result's
    text in an episode's sequence)."""
    before = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "call"}]
    after = [*before, {"role": "tool", "content": _PLACEHOLDER}]
    rendered_before = tokenizer.apply_chat_template(before, tokenize=False, add_generation_prompt=False)
    rendered_after = tokenizer.apply_chat_template(after, tokenize=False, add_generation_prompt=True)
    end_of_reply = rendered_before.rfind(tokenizer.eos_token) + len(tokenizer.eos_token)
    ids, (start, _) = content_token_range(tokenizer, rendered_after[end_of_reply:], _PLACEHOLDER)
    if start == 0:
        raise ValueError("cannot find where the chat template puts a tool result: imagined replies under "
                         "transfer='echo' need a fast tokenizer whose template renders tool turns")
    return ids[:start]
