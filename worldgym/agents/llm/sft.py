"""Supervised warm start: record an expert's episodes as chats and fine-tune on the assistant tokens only."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from worldgym.agents.llm.adapters import disable_activation_checkpointing, enable_activation_checkpointing
from worldgym.agents.llm.scoring import score_tokens
from worldgym.config import check_field, check_positive_int, check_range
from worldgym.env_training import Untrained  # an env's expert marks its untrained actions with it
from worldgym.precision import Precision, autocast, cast_for_training, check_precision, resolve_dtype

__all__ = ["Chat", "ExpertPolicy", "SFTConfig", "Untrained", "collect_expert_chats", "sft_train"]

# An expert sees the env (to read privileged state such as the answer), the observation and the info dict.
ExpertPolicy = Callable[[gym.Env, str, dict[str, Any]], str]


@dataclass
class Chat:
    """One conversation (OpenAI-style messages) and the tools its template shows; ``final_observation``: what
    the env answered the last message with (the episode's end, which no later turn shows)."""

    messages: list[dict[str, str]]
    tools: list[dict] | None = None
    reward: float = 0.0
    final_observation: str = ""


@dataclass
class SFTConfig:
    """Supervised fine-tuning settings.

    Args:
        epochs: passes over the chats.
        batch_size: chats per optimizer step.
        learning_rate: AdamW learning rate.
        max_length: chats are cut to this many tokens.
        grad_clip: gradient-norm clip.
        bucket_by_length: batch chats of similar length (much less padding for long, varied multi-turn chats;
            batches are less diverse, which hurt a tiny model on short single-turn data).
        seed: shuffling seed.
        progress: show a progress bar.
        activation_checkpointing: recompute each layer's activations in the backward pass instead of keeping
            them (for long chats on a real model: SmolLM2's attention weights of 4 chats x ~2k tokens x 30 layers
            took ~17 GB; same loss, ~30% more compute); switched off again when training ends.
        shared_prefix_tokens: when > 0, chats that open with the same ``shared_prefix_tokens`` tokens or more
            (questions about one patient's documents) are batched together, and each batch's common opening
            runs once, forward and backward (:func:`score_tokens` with ``group_ids``: the same loss up to float
            rounding, and the long opening's cost paid once per batch instead of once per chat). Batches are
            drawn within such families, shuffled every epoch. Not with ``bucket_by_length`` or
            ``activation_checkpointing`` (the shared pass needs the KV cache, which checkpointing drops).
        dtype: numeric precision ("float32", "bfloat16", "auto"; :mod:`worldgym.precision`): under bf16 the
            model's frozen weights are stored in bf16 (in place), trainable ones stay float32, and the forward
            runs under autocast; the loss is float32.
    """

    epochs: int = 3
    batch_size: int = 16
    learning_rate: float = 1e-3
    max_length: int = 4096
    grad_clip: float = 1.0
    bucket_by_length: bool = False
    seed: int = 0
    progress: bool = True
    activation_checkpointing: bool = False
    shared_prefix_tokens: int = 0
    dtype: Precision = "float32"

    def __post_init__(self) -> None:
        check_precision("dtype", self.dtype)
        for name in ("epochs", "batch_size", "max_length"):
            check_positive_int(name, getattr(self, name))
        check_range("learning_rate", self.learning_rate, 0, None, low_open=True)
        check_range("shared_prefix_tokens", self.shared_prefix_tokens, 0, None)
        check_field(not self.shared_prefix_tokens or not (self.bucket_by_length or self.activation_checkpointing),
                    "shared_prefix_tokens", self.shared_prefix_tokens,
                    "batches come from families of chats that share an opening: set bucket_by_length and "
                    "activation_checkpointing to False (checkpointing drops the KV cache the shared pass needs)")


def collect_expert_chats(
    make_env: Callable[[], gym.Env],
    policy: ExpertPolicy,
    env_seeds: Sequence[int],
    max_turns: int = 16,
    system_prompt: str | None = None,
) -> list[Chat]:
    """Run ``policy`` once per seed and record each episode as a chat (tool results as ``tool`` turns, the last
    one as ``Chat.final_observation``; an :class:`Untrained` action's message is marked ``"train": False``)."""
    env = make_env()
    chats = []
    for seed in env_seeds:
        observation, info = env.reset(seed=int(seed))
        tools = info.get("tools") or None
        system = info.get("system_prompt", system_prompt)
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": str(observation)}
        ]
        total = 0.0
        for _ in range(max_turns):
            action = policy(env, observation, info)
            observation, reward, terminated, truncated, info = env.step(str(action))
            total += float(reward)
            messages.append({"role": "assistant", "content": str(action)}
                            | ({"train": False} if isinstance(action, Untrained) else {}))
            if terminated or truncated:
                break
            messages.append({"role": "tool" if tools else "user", "content": str(observation)})
        chats.append(Chat(messages, tools, total, str(observation)))
    env.close()
    return chats


def sft_train(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    chats: Sequence[Chat],
    config: SFTConfig | None = None,
) -> list[float]:
    """Fine-tune ``model`` in place on the assistant tokens of ``chats`` (template ``{% generation %}``
    masks);
    returns the loss of every optimizer step."""
    config = config or SFTConfig()
    examples = [_encode(tokenizer, chat, config.max_length) for chat in chats]
    families = _prefix_families([ids for ids, _ in examples], config.shared_prefix_tokens)
    device = next(model.parameters()).device
    dtype = resolve_dtype(config.dtype, device)
    cast_for_training(model, dtype)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate)
    generator = torch.Generator().manual_seed(config.seed)
    groups = families or [examples]  # a family's batches never mix in another's chats
    steps = config.epochs * sum(-(-len(group) // config.batch_size) for group in groups)
    losses: list[float] = []
    model.train()
    if config.activation_checkpointing:
        enable_activation_checkpointing(model)
    try:
        with tqdm(total=steps, desc="sft", disable=not config.progress) as bar:
            for _ in range(config.epochs):
                for batch in _batches(examples, families, config, generator):
                    input_ids, attention, labels = _pad([examples[i] for i in batch], tokenizer.pad_token_id)
                    group_ids = torch.zeros(len(batch), dtype=torch.long) if families else None
                    with autocast(dtype, device):
                        loss = assistant_token_loss(model, input_ids.to(device), attention.to(device),
                                                    labels.to(device), group_ids)
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(params, config.grad_clip)
                    optimizer.step()
                    losses.append(loss.item())
                    bar.update(1)
                    bar.set_postfix(loss=f"{losses[-1]:.3f}")
    finally:
        if config.activation_checkpointing:
            disable_activation_checkpointing(model)
    return losses


def assistant_token_loss(
    model: PreTrainedModel, input_ids: torch.Tensor, attention: torch.Tensor, labels: torch.Tensor,
    group_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mean cross-entropy of the labelled (assistant) tokens, the LM head run only where a label follows: the
    ``[B, T, V]`` logits of a whole batch of long chats (4 x 4096 x 49k floats for SmolLM2, plus their gradient)
    took SFT to ~20 GB and an OOM kill. ``group_ids``: rows of a group run their common opening once
    (:func:`score_tokens`)."""
    targets = labels[:, 1:] != -100
    scored = score_tokens(model, input_ids, attention, targets.long(), group_ids=group_ids)
    return -scored.logprobs.sum() / targets.sum()


def _batches(examples: list[tuple[list[int], list[int]]], families: list[list[int]], config: SFTConfig,
             generator: torch.Generator) -> list[list[int]]:
    """One epoch's batches of example indices."""
    if families:
        return _family_batches(families, config.batch_size, generator)
    if config.bucket_by_length:
        return _length_bucketed_batches([len(ids) for ids, _ in examples], config.batch_size, generator)
    order = torch.randperm(len(examples), generator=generator).tolist()
    return [order[i : i + config.batch_size] for i in range(0, len(order), config.batch_size)]


def _prefix_families(sequences: list[list[int]], min_shared: int) -> list[list[int]]:
    """Indices of ``sequences`` grouped so that sequences opening with the same ``min_shared`` tokens or more
    share a family (sorted, then cut where neighbours share fewer); ``[]`` when ``min_shared`` is 0.

    >>> _prefix_families([[1, 2, 3], [4, 5], [1, 2, 9], [1, 7]], 2)
    [[0, 2], [3], [1]]
    """
    if not min_shared:
        return []
    order = sorted(range(len(sequences)), key=sequences.__getitem__)
    families: list[list[int]] = []
    for previous, index in zip([None, *order], order):
        if previous is None or sequences[previous][:min_shared] != sequences[index][:min_shared]:
            families.append([])
        families[-1].append(index)
    return families


def _family_batches(families: list[list[int]], batch_size: int, generator: torch.Generator) -> list[list[int]]:
    """Batches of at most ``batch_size`` indices, each from one family (shuffled within it), in random order."""
    batches = []
    for family in families:
        shuffled = [family[i] for i in torch.randperm(len(family), generator=generator).tolist()]
        batches += [shuffled[i : i + batch_size] for i in range(0, len(shuffled), batch_size)]
    return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]


def _length_bucketed_batches(
    lengths: list[int], batch_size: int, generator: torch.Generator
) -> list[list[int]]:
    """Shuffled batches of similar-length examples (sorted within windows of 8 batches): little padding."""
    order = torch.randperm(len(lengths), generator=generator).tolist()
    window = 8 * batch_size
    batches = []
    for start in range(0, len(order), window):
        chunk = sorted(order[start : start + window], key=lengths.__getitem__)
        batches += [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
    return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]


def _encode(tokenizer: PreTrainedTokenizerBase, chat: Chat, max_length: int) -> tuple[list[int], list[int]]:
    encoded = tokenizer.apply_chat_template(
        chat.messages, tools=chat.tools, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    ids, mask = list(encoded["input_ids"]), list(encoded["assistant_masks"])
    if not any(mask):
        raise ValueError("a chat has no assistant tokens; the chat template needs {% generation %} blocks")
    _mask_untrained_messages(mask, [m for m in chat.messages if m["role"] == "assistant"])
    if not any(mask[:max_length]):  # every label would be ignored: the loss would be NaN
        raise ValueError(
            f"a chat of {len(ids)} tokens has no assistant token within the first max_length={max_length}; "
            "raise SFTConfig.max_length"
        )
    return ids[:max_length], mask[:max_length]


def _mask_untrained_messages(mask: list[int], assistant_messages: list[dict[str, Any]]) -> None:
    """Zero, in place, the assistant-mask run of every assistant message marked ``"train": False`` (the runs of
    ones are the assistant messages, in order)."""
    if all(message.get("train", True) for message in assistant_messages):
        return
    starts = [i for i, bit in enumerate(mask) if bit and (i == 0 or not mask[i - 1])]
    if len(starts) != len(assistant_messages):
        raise ValueError(f"the chat template marks {len(starts)} assistant spans for {len(assistant_messages)} "
                         "assistant messages, so untrained messages cannot be told apart")
    for start, message in zip(starts, assistant_messages):
        if not message.get("train", True):
            end = start
            while end < len(mask) and mask[end]:
                mask[end] = 0
                end += 1


def _pad(examples: list[tuple[list[int], list[int]]], pad_id: int) -> tuple[torch.Tensor, ...]:
    width = max(len(ids) for ids, _ in examples)
    input_ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(examples), width), dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    for row, (ids, mask) in enumerate(examples):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        attention[row, : len(ids)] = 1
        labels[row, : len(ids)] = torch.tensor([t if m else -100 for t, m in zip(ids, mask)])
    return input_ids, attention, labels
