"""The world model's data and loss: predict the representative's reply to each phone call, token by token.

A phone-call example is one token sequence ``context + <|predict_csr|> <|csr|> reply <|/csr|>``. The context is
the rollout's own token ids up to the end of the ``make_phone_call`` reply (``Turn.action_span``: nothing the
model wrote is re-tokenised); the reply is the env's text, tokenised as the chat template would. The loss is
the cross-entropy of the reply tokens and the closing marker, averaged per call, then over calls.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch
from peft import PeftModel
from torch.utils.checkpoint import checkpoint
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from worldgym.agents.dual_lora.config import CSR_END, CSR_START, PREDICT_CSR
from worldgym.agents.grpo.echo import EchoTargets, echo_turns
from worldgym.agents.llm.adapters import recompute_under_active_adapters
from worldgym.agents.llm.rollout import Episode, Turn, collate_episodes
from worldgym.agents.llm.scoring import score_tokens
from worldgym.precision import model_autocast

__all__ = [
    "PackedCalls", "PhoneCallExample", "WorldModelScores", "pack_calls", "phone_call_examples", "phone_call_turns",
    "reply_metrics", "score_examples", "score_in_chunks", "score_observations", "score_pack", "score_packed",
    "wm_token_ids",
]

PHONE_TOOL = "make_phone_call"


@dataclass(frozen=True)
class PhoneCallExample:
    """``token_ids[target_start:]`` are the targets (the reply and ``<|/csr|>``); ``response_type`` is the env's
    label of the reply (auth request, routing, ...)."""

    token_ids: tuple[int, ...]
    target_start: int
    response_type: str

    @property
    def num_targets(self) -> int:
        return len(self.token_ids) - self.target_start


def wm_token_ids(tokenizer: PreTrainedTokenizerBase) -> tuple[int, int, int]:
    """The ids of ``<|predict_csr|>``, ``<|csr|>``, ``<|/csr|>``; each must be one atomic token."""
    ids = []
    for token in (PREDICT_CSR, CSR_START, CSR_END):
        encoded = tokenizer(token, add_special_tokens=False)["input_ids"]
        if len(encoded) != 1 or encoded[0] == tokenizer.unk_token_id:
            raise ValueError(
                f"the tokenizer has no atomic {token!r} token: build it with "
                f"train_chat_tokenizer(extra_special_tokens=WM_SPECIAL_TOKENS) (a warm start's "
                f"WarmStartConfig.extra_special_tokens) or load_chat_model(..., extra_special_tokens=...)"
            )
        ids.append(encoded[0])
    return ids[0], ids[1], ids[2]


def phone_call_turns(episode: Episode) -> list[Turn]:
    """The episode's ``make_phone_call`` turns with a reply to learn from (calls the env rejected as
    malformed are not phone calls: the env answered them, not a representative; imagined replies are the world
    model's own)."""
    return [turn for turn in episode.turns
            if turn.info.get("tool") == PHONE_TOOL and turn.action_span[1] > turn.action_span[0]
            and not turn.info.get("imagined", False)]


def phone_call_examples(
    episodes: Sequence[Episode],
    tokenizer: PreTrainedTokenizerBase,
    max_context_tokens: int | None = None,
) -> list[list[PhoneCallExample]]:
    """Per episode, one example per turn of :func:`phone_call_turns`."""
    predict, start, end = wm_token_ids(tokenizer)
    out = []
    for episode in episodes:
        examples = []
        for turn in phone_call_turns(episode):
            context = episode.token_ids[: turn.action_span[1]]
            if max_context_tokens is not None:
                context = context[-max_context_tokens:]
            reply = tokenizer(turn.observation, add_special_tokens=False)["input_ids"]
            ids = (*context, predict, start, *reply, end)
            examples.append(PhoneCallExample(ids, len(context) + 2, str(turn.info.get("response_type", "unknown"))))
        out.append(examples)
    return out


@dataclass
class WorldModelScores:
    """Per-example results of one teacher-forced forward: mean cross-entropy (differentiable), token accuracy,
    exact match (every target token argmax-right) and mean target-token probability."""

    loss: torch.Tensor  # [N]
    token_accuracy: torch.Tensor  # [N]
    exact_match: torch.Tensor  # [N] bool
    mean_probability: torch.Tensor  # [N]
    num_targets: torch.Tensor  # [N]

    @classmethod
    def concat(cls, parts: Sequence[WorldModelScores]) -> WorldModelScores:
        """The scores of several batches as one."""
        return cls(*(torch.cat([getattr(part, name) for part in parts]) for name in cls.__dataclass_fields__))


def score_examples(
    model: PreTrainedModel, examples: Sequence[PhoneCallExample], pad_token_id: int
) -> WorldModelScores:
    """Teacher-forced scores of ``examples`` under the model's active adapters (right-padded batch).

    The shared scorer (:func:`worldgym.agents.llm.scoring.score_tokens`) runs the LM head on the reply tokens
    only. Keeping every logit from the earliest reply on cost, for 8 SmolLM2 calls of ~3k tokens at d3,
    8 x ~2.5k positions x 49k vocabulary in fp32 (~4 GB, then as much again for the log-softmax and for the
    gradient): that run was OOM-killed at 16.8 GB. The replies' own logits are ~0.2 GB.
    """
    if not examples:
        raise ValueError("score_examples needs at least one example")
    device = next(model.parameters()).device
    width = max(len(e.token_ids) for e in examples)
    input_ids = torch.full((len(examples), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    target_mask = torch.zeros((len(examples), width - 1), dtype=torch.bool)
    for row, example in enumerate(examples):
        input_ids[row, : len(example.token_ids)] = torch.tensor(example.token_ids)
        attention_mask[row, : len(example.token_ids)] = 1
        target_mask[row, example.target_start - 1 : len(example.token_ids) - 1] = True
    input_ids, attention_mask, target_mask = input_ids.to(device), attention_mask.to(device), target_mask.to(device)
    scored = score_tokens(model, input_ids, attention_mask, target_mask)
    counts = target_mask.sum(1)
    loss = -scored.logprobs.sum(1) / counts  # zero off the targets
    with torch.no_grad():
        right_flat = (scored.logits.argmax(-1) == input_ids[:, 1:][target_mask]).float()
        right = torch.zeros_like(scored.logprobs).masked_scatter(target_mask, right_flat).sum(1)
        probability = (scored.logprobs.detach().exp() * target_mask).sum(1)
    return WorldModelScores(loss, right / counts, right == counts, probability / counts, counts)


def score_in_chunks(
    model: PreTrainedModel, examples: Sequence[PhoneCallExample], pad_token_id: int, chunk_size: int
) -> WorldModelScores:
    """:func:`score_examples` over chunks of ``chunk_size`` examples of similar length (little padding); the
    scores come back in the order of ``examples``.

    With gradients on, each chunk's forward is checkpointed (``torch.utils.checkpoint``): the graph keeps only
    the chunk's scores, and the backward runs the chunk's forward again, so the activations of one chunk at a
    time are held, not those of every chunk until the backward."""
    order = sorted(range(len(examples)), key=lambda i: len(examples[i].token_ids))
    chunks = [order[i : i + chunk_size] for i in range(0, len(order), chunk_size)]
    return _score_groups(model, chunks, lambda chunk: score_examples(model, [examples[i] for i in chunk],
                                                                     pad_token_id))


def _score_groups(model: PreTrainedModel, groups: Sequence[Sequence[int]],
                  score_group: Callable[[Any], WorldModelScores]) -> WorldModelScores:
    """The scores of examples scored a group at a time (``groups[g]``: example indices, every example in one
    group; ``score_group(groups[g])``: their scores in that order), back in the examples' order. With gradients
    on, each group's forward is checkpointed (``torch.utils.checkpoint``): the graph keeps only the group's
    scores, and the backward runs the group's forward again, so the activations of one group at a time are
    held, not those of every group until the backward."""
    def score(group: Sequence[int]) -> tuple[torch.Tensor, ...]:
        scores = score_group(group)
        return tuple(getattr(scores, field.name) for field in fields(scores))

    if torch.is_grad_enabled() and len(groups) > 1:
        context_fn = recompute_under_active_adapters(model)  # the backward runs after the adapters switch back
        parts = [checkpoint(score, group, use_reentrant=False, context_fn=context_fn) for group in groups]
    else:
        parts = [score(group) for group in groups]
    scores = WorldModelScores.concat([WorldModelScores(*part) for part in parts])
    order = [index for group in groups for index in group]
    inverse = torch.empty(len(order), dtype=torch.long)
    inverse[torch.tensor(order)] = torch.arange(len(order))
    return WorldModelScores(*(getattr(scores, name)[inverse.to(scores.loss.device)]
                              for name in WorldModelScores.__dataclass_fields__))


@dataclass(frozen=True)
class PackedCalls:
    """Phone-call examples whose contexts are prefixes of one another (the calls of one episode) as one sequence:
    the longest context once, then each call's markers, reply and closing marker (its *branch*) at the positions
    it has in its own example, seeing its own context and itself only.

    ``branches[k] = (start, length, context_length)`` places example ``members[k]``'s branch in ``token_ids``."""

    token_ids: tuple[int, ...]
    position_ids: tuple[int, ...]
    context_length: int
    branches: tuple[tuple[int, int, int], ...]
    members: tuple[int, ...]

    def attention_mask(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """The block mask ``[1, 1, L, L]`` (True = attend): causal over the context; each branch sees the first
        ``context_length`` tokens of the context and its own earlier tokens."""
        length, context = len(self.token_ids), self.context_length
        mask = torch.zeros(length, length, dtype=torch.bool, device=device)
        mask[:context, :context] = torch.ones(context, context, dtype=torch.bool, device=device).tril()
        for start, size, seen in self.branches:
            mask[start : start + size, :seen] = True
            mask[start : start + size, start : start + size] = torch.ones(size, size, dtype=torch.bool,
                                                                          device=device).tril()
        return mask[None, None]


def pack_calls(examples: Sequence[PhoneCallExample], share_contexts: bool = True) -> list[PackedCalls]:
    """Group ``examples`` into :class:`PackedCalls`: each joins a pack whose longest context starts with its own
    (longest contexts first), else starts one. Every token of a context is then run once per pack instead of
    once per call that sees it; each call's scores are those of its own sequence (the same attention, the same
    positions). ``share_contexts=False``: one pack per example (as many forwards as examples, which ranks that
    must run their forwards together, such as sharded ones, need)."""
    contexts = [example.token_ids[: example.target_start - 2] for example in examples]
    packs: list[list[int]] = []  # example indices, the longest context first
    for index in sorted(range(len(examples)), key=lambda i: -len(contexts[i])):
        own = contexts[index]
        home = next((pack for pack in packs if contexts[pack[0]][: len(own)] == own), None) if share_contexts else None
        if home is None:
            packs.append([index])
        else:
            home.append(index)
    out = []
    for pack in packs:
        longest = contexts[pack[0]]
        token_ids, position_ids, branches = list(longest), list(range(len(longest))), []
        for index in pack:
            seen = len(contexts[index])
            branch = examples[index].token_ids[seen:]
            branches.append((len(token_ids), len(branch), seen))
            token_ids += branch
            position_ids += range(seen, seen + len(branch))
        out.append(PackedCalls(tuple(token_ids), tuple(position_ids), len(longest), tuple(branches), tuple(pack)))
    return out


def score_pack(model: PreTrainedModel, pack: PackedCalls) -> WorldModelScores:
    """Teacher-forced scores of a pack's examples (in ``pack.members`` order) under the model's active adapters,
    from one forward of the packed sequence: the LM head runs on the reply tokens only (see
    :func:`score_examples`)."""
    base = model.get_base_model() if isinstance(model, PeftModel) else model
    device = next(model.parameters()).device
    input_ids = torch.tensor([pack.token_ids], device=device)
    predicting = torch.tensor([start + offset for start, size, _ in pack.branches for offset in range(1, size - 1)],
                              device=device)
    with model_autocast(model):
        hidden = base.get_decoder()(input_ids=input_ids, attention_mask=pack.attention_mask(device),
                                    position_ids=torch.tensor([pack.position_ids], device=device)
                                    ).last_hidden_state[0]
    logits = base.get_output_embeddings()(hidden[predicting]).float()
    targets = input_ids[0, predicting + 1]
    logprobs = torch.gather(logits, -1, targets[:, None])[:, 0] - torch.logsumexp(logits, -1)
    counts = torch.tensor([size - 2 for _, size, _ in pack.branches], device=device)
    example = torch.repeat_interleave(torch.arange(len(counts), device=device), counts)
    loss = -torch.zeros(len(counts), device=device).index_add(0, example, logprobs) / counts
    with torch.no_grad():
        right = torch.zeros(len(counts), device=device).index_add(0, example, (logits.argmax(-1) == targets).float())
        probability = torch.zeros(len(counts), device=device).index_add(0, example, logprobs.detach().exp())
    return WorldModelScores(loss, right / counts, right == counts, probability / counts, counts)


def score_packed(model: PreTrainedModel, examples: Sequence[PhoneCallExample],
                 share_contexts: bool = True) -> WorldModelScores:
    """:func:`score_examples` of ``examples`` (in their order) through :func:`pack_calls` (``share_contexts``):
    one forward per pack, each context token run once per pack. With gradients on, each pack's forward is
    checkpointed, as in :func:`score_in_chunks`."""
    if not examples:
        raise ValueError("score_packed needs at least one example")
    packs = {pack.members: pack for pack in pack_calls(examples, share_contexts)}
    return _score_groups(model, list(packs), lambda members: score_pack(model, packs[members]))


def reply_metrics(
    response_types: Sequence[str], scores: WorldModelScores, prefix: str = "eval/wm_"
) -> dict[str, float]:
    """Token accuracy, exact-match rate and perplexity (exp of the token-mean cross-entropy) of scored replies
    (reply ``i`` of type ``response_types[i]``), overall and by response type."""
    groups: dict[str, list[int]] = defaultdict(list)
    for index, response_type in enumerate(response_types):
        groups[""].append(index)
        groups[f"{response_type}/"].append(index)
    counts = scores.num_targets.float().cpu().numpy()
    token_nll = scores.loss.detach().float().cpu().numpy() * counts
    accurate = scores.token_accuracy.float().cpu().numpy() * counts
    exact = scores.exact_match.float().cpu().numpy()
    metrics = {}
    for group, rows in sorted(groups.items()):
        total = counts[rows].sum()
        metrics[f"{prefix}{group}token_accuracy"] = float(accurate[rows].sum() / total)
        metrics[f"{prefix}{group}exact_match"] = float(exact[rows].mean())
        metrics[f"{prefix}{group}perplexity"] = float(np.exp(token_nll[rows].sum() / total))
        metrics[f"{prefix}{group}calls"] = float(len(rows))
    return metrics


@torch.no_grad()
def score_observations(
    model: PreTrainedModel, episodes: Sequence[Episode], tools: Sequence[str], pad_token_id: int,
    chunk_size: int,
) -> tuple[list[str], WorldModelScores]:
    """Teacher-forced scores of the tool results the echo loss learns (:func:`~worldgym.agents.grpo.echo.
    echo_turns`), each in its episode's own token sequence, under the model's active adapters; and their
    response types. ``chunk_size`` episodes per forward."""
    response_types = [str(turn.info.get("response_type", "unknown"))
                      for episode in episodes for turn in echo_turns(episode, tools)]
    parts = []
    for start in range(0, len(episodes), chunk_size):
        chunk = episodes[start : start + chunk_size]
        batch = collate_episodes(chunk, pad_token_id)
        width = batch["input_ids"].shape[1]
        segments = EchoTargets.from_episodes(chunk, tools).segments(range(len(chunk)), width)
        if not bool((segments >= 0).any()):
            continue
        parts.append(_segment_scores(model, batch, segments))
    if not parts:
        return [], WorldModelScores(*(torch.zeros(0) for _ in fields(WorldModelScores)))
    return response_types, WorldModelScores.concat(parts)


def _segment_scores(model: PreTrainedModel, batch: dict, segments: torch.Tensor) -> WorldModelScores:
    """Per observation (``segments``: its number per target column, -1 elsewhere) of one collated batch."""
    device = next(model.parameters()).device
    on = (segments >= 0).to(device)
    scored = score_tokens(model, batch["input_ids"].to(device), batch["attention_mask"].to(device), on)
    targets = batch["input_ids"][:, 1:].to(device)[on]
    owner = segments.to(device)[on]
    count = int(owner.max()) + 1
    logprobs = scored.logprobs[on]
    right = (scored.logits.argmax(-1) == targets).float()

    def per_segment(values: torch.Tensor) -> torch.Tensor:
        return torch.zeros(count, device=device).index_add_(0, owner, values.float())

    counts = per_segment(torch.ones_like(logprobs))
    correct = per_segment(right)
    return WorldModelScores(-per_segment(logprobs) / counts, correct / counts, correct == counts,
                            per_segment(logprobs.exp()) / counts, counts.long())
