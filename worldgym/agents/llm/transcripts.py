"""An LLM agent's episodes as transcript records (:mod:`worldgym.transcripts`): the prompt, every reply with
its tool call as parsed, the env's answer, rewards, response types and success."""

from __future__ import annotations

from typing import Any

from transformers import PreTrainedTokenizerBase

from worldgym.agents.llm.rollout import Episode
from worldgym.spaces import ToolCall
from worldgym.wrappers.tool_call_text import parse_tool_call

__all__ = ["episode_record"]

_INFO_KEYS = ("response_type", "tool", "success", "errors", "imagined", "real_response_type")


def episode_record(episode: Episode, tokenizer: PreTrainedTokenizerBase, index: int) -> dict[str, Any]:
    """One transcript line: ``messages`` (the prompt as the model read it, then each reply and answer as chat
    messages; a reply's message holds its parsed ``tool_call``), the per-turn ``rewards`` and ``response_types``,
    and the episode's totals."""
    messages: list[dict[str, Any]] = [
        {"role": "prompt", "content": tokenizer.decode(episode.token_ids[:episode.prompt_length])}]
    for turn in episode.turns:
        call = parse_tool_call(turn.action)
        reply: dict[str, Any] = {"role": "assistant", "content": turn.action, "finish_reason": turn.finish_reason}
        reply["tool_call"] = ({"name": call.name, "arguments": dict(call.arguments)} if isinstance(call, ToolCall)
                              else {"error": call.message})
        messages.append(reply)
        answer = {"role": "tool", "content": turn.observation, "reward": turn.reward}
        answer |= {key: turn.info[key] for key in _INFO_KEYS if key in turn.info}
        messages.append(answer)
    return {
        "episode": index, "env_seed": episode.env_seed, "reward": episode.reward, "success": bool(episode.success),
        "terminated": episode.terminated, "truncated": episode.truncated, "num_turns": len(episode.turns),
        "response_types": [turn.info.get("response_type") for turn in episode.turns],
        "messages": messages,
    }
