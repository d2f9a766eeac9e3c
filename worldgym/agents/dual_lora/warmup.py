"""Warm the world model up before the first step: its adapter alone learns the phone calls of recorded chats.

A world model that imagines phone calls from step 0 has never written a reply: its first imagined calls are
noise, and an imagined group whose episodes all fail teaches the policy nothing. The chats the policy's warm start
imitated (the env's expert, :func:`~worldgym.agents.llm.warm_start.expert_chats`) hold real calls and the
representative's real replies, and cost no new task: :func:`chat_phone_calls` turns them into the world model's
examples, laid out as a rollout's (the conversation up to the call's end-of-turn token, then
``<|predict_csr|> <|csr|> reply <|/csr|>``), and :func:`warm_up_world_model` trains the adapter on them alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch
from peft import PeftModel
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase

from worldgym.agents.dual_lora.world_model import PHONE_TOOL, PhoneCallExample, score_packed, wm_token_ids
from worldgym.agents.llm.adapters import using_adapters
from worldgym.agents.llm.sft import Chat
from worldgym.envs.csr_phone import classify_reply
from worldgym.spaces import ToolCall
from worldgym.wrappers.tool_call_text import parse_tool_call

__all__ = ["chat_batches", "chat_phone_calls", "warm_up_world_model", "world_model_update"]

UNCLASSIFIED = "unknown"


def chat_phone_calls(chats: Sequence[Chat], tokenizer: PreTrainedTokenizerBase,
                     max_context_tokens: int | None = None) -> list[list[PhoneCallExample]]:
    """Per chat, one example per assistant ``make_phone_call`` message with a reply (the next message, or the
    chat's ``final_observation`` after its last message). The context is the chat rendered by the tokenizer's
    template up to that message's end-of-turn token, tokenised once per chat, so the calls of one chat share
    their contexts' tokens as a rollout's do (:func:`~worldgym.agents.dual_lora.world_model.pack_calls`)."""
    predict, start, end = wm_token_ids(tokenizer)
    out = []
    for chat in chats:
        rendered = tokenizer.apply_chat_template(chat.messages, tools=chat.tools, tokenize=False,
                                                 add_generation_prompt=False)
        encoded = tokenizer(rendered, add_special_tokens=False, return_offsets_mapping=True)
        ends = [offset[1] for offset in encoded["offset_mapping"]]
        examples = []
        for index, message in enumerate(chat.messages):
            reply = _reply_to(chat, index)
            if message["role"] != "assistant" or not reply or not _is_phone_call(message["content"]):
                continue
            before = tokenizer.apply_chat_template(chat.messages[: index + 1], tools=chat.tools, tokenize=False,
                                                   add_generation_prompt=False)
            end_of_turn = before.rfind(tokenizer.eos_token) + len(tokenizer.eos_token)
            context = encoded["input_ids"][: int(np.searchsorted(ends, end_of_turn, side="right"))]
            if max_context_tokens is not None:
                context = context[-max_context_tokens:]
            reply_ids = tokenizer(reply, add_special_tokens=False)["input_ids"]
            examples.append(PhoneCallExample((*context, predict, start, *reply_ids, end), len(context) + 2,
                                             classify_reply(reply) or UNCLASSIFIED))
        out.append(examples)
    return out


def chat_batches(examples: Sequence[Sequence[PhoneCallExample]], chats_per_update: int, seed: int
                 ) -> Iterator[list[PhoneCallExample]]:
    """Endless batches of the calls of ``chats_per_update`` chats of ``examples`` each (chats without a call
    skipped), shuffled by ``seed``, every chat once per pass."""
    chats = [calls for calls in examples if calls]
    if not chats:
        raise ValueError("warming the world model up needs at least one chat with a phone call")
    rng = np.random.default_rng(seed)
    order: list[int] = []
    while True:
        while len(order) < chats_per_update:
            order += rng.permutation(len(chats)).tolist()
        yield [call for index in order[:chats_per_update] for call in chats[index]]
        del order[:chats_per_update]


def world_model_update(model: PeftModel, adapter: str, adapter_names: Sequence[str],
                       batch: Sequence[PhoneCallExample], optimizer: torch.optim.Optimizer,
                       clip: Callable[[], object]) -> float:
    """One optimizer step on the world model's mean loss over ``batch`` alone (``adapter`` active, the other
    ``adapter_names`` off; ``clip`` clips the gradient before the step); returns the loss."""
    model.train()
    with using_adapters(model, [adapter], adapter_names):
        loss = score_packed(model, batch).loss.mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    clip()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


def warm_up_world_model(
    model: PeftModel,
    adapter: str,
    adapter_names: Sequence[str],
    examples: Sequence[Sequence[PhoneCallExample]],
    optimizer: torch.optim.Optimizer,
    clip: Callable[[], object],
    updates: int,
    chats_per_update: int,
    seed: int,
    progress: bool = False,
) -> list[float]:
    """``updates`` :func:`world_model_update` steps over :func:`chat_batches` of ``examples``; each update's
    loss. ``seed`` orders the chats and draws the dropout masks (the caller's torch RNG is left as it was).
    ``progress`` shows a bar with the last loss (a SmolLM2 warm-up of 64 updates takes most of an hour on a CPU
    core)."""
    batches = chat_batches(examples, chats_per_update, seed)
    losses: list[float] = []
    devices = [model.device] if model.device.type == "cuda" else []
    with (torch.random.fork_rng(devices=devices),
          tqdm(total=updates, desc="world-model warm-up", unit="update", disable=not progress) as bar):
        torch.manual_seed(seed)
        for _ in range(updates):
            losses.append(world_model_update(model, adapter, adapter_names, next(batches), optimizer, clip))
            bar.set_postfix(loss=f"{losses[-1]:.3f}", refresh=False)
            bar.update()
    return losses


def _reply_to(chat: Chat, index: int) -> str:
    """What the env answered message ``index`` with ("" when nothing did)."""
    if index + 1 < len(chat.messages):
        following = chat.messages[index + 1]
        return following["content"] if following["role"] in ("tool", "user") else ""
    return chat.final_observation


def _is_phone_call(text: str) -> bool:
    call = parse_tool_call(text)
    return isinstance(call, ToolCall) and call.name == PHONE_TOOL
