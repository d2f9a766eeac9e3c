"""Per-token logprobs of a causal LM, computing the vocabulary projection only where tokens are trained.

Two ways to run the decoder, with the same results: over every row's whole sequence, or (given group ids)
once over each group's shared prompt and then over each row's own continuation on a copy of that prompt's
KV cache. GRPO groups share their prompt, so the second way does the prompt's work once per group instead
of once per sample, in the backward pass too: gradients from every row reach the shared prompt through the
cache.

Either way can run behind a :class:`~worldgym.agents.llm.cartridge.Cartridge` (a trainable KV prefix): every
row then attends to the cartridge first, its tokens are numbered after it, and gradients reach the cartridge's
trainable tokens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from peft import PeftModel
from transformers import DynamicCache, PreTrainedModel

from worldgym.agents.llm.cache_argument import cache_argument, returned_cache
from worldgym.agents.llm.cartridge import Cartridge
from worldgym.agents.llm.constrained import mask_logits
from worldgym.errors import CartridgeError
from worldgym.precision import model_autocast

__all__ = ["ScoredTokens", "SharedPrefix", "score_tokens", "shared_prefix"]


@dataclass
class ScoredTokens:
    """``logprobs`` ``[B, T-1]`` of ``input_ids[:, 1:]`` (0 where ``mask`` is 0) and the masked positions'
    logits ``[N, V]`` (N = number of masked tokens, row-major order), e.g. for the entropy."""

    logprobs: torch.Tensor
    logits: torch.Tensor


@dataclass
class SharedPrefix:
    """How a batch splits into per-group prompts and per-row continuations.

    ``row_group[r]`` indexes the group of row ``r`` in ``0..G-1``; ``prefix_length[g]`` tokens open every
    row of group ``g`` and precede its first trained token; ``saved_tokens`` is how many token positions the
    decoder skips compared with running every row in full; ``padded_tokens`` is the size of the two padded
    passes (``G x`` longest prefix ``+ R x`` longest continuation), to compare with the plain ``R x T``.
    """

    row_group: torch.Tensor
    prefix_length: torch.Tensor
    saved_tokens: int
    padded_tokens: int


def shared_prefix(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, mask: torch.Tensor, group_ids: torch.Tensor
) -> SharedPrefix:
    """For each group: the longest run of tokens that every row starts with and that ends before the
    group's first trained position (``mask[:, j]`` covers token ``j + 1``, predicted at position ``j``).

    >>> ids = torch.tensor([[5, 6, 7, 8], [5, 6, 9, 0], [5, 2, 3, 4]])
    >>> attention = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 1]])
    >>> trained = torch.tensor([[0, 1, 1], [0, 1, 0], [1, 1, 1]])
    >>> split = shared_prefix(ids, attention, trained, torch.tensor([3, 3, 8]))
    >>> split.row_group.tolist(), split.prefix_length.tolist(), split.saved_tokens
    ([0, 0, 1], [1, 0], 1)
    """
    # bookkeeping on the CPU: a handful of integers per row, whatever device the batch is on
    input_ids, attention_mask, mask = input_ids.cpu(), attention_mask.cpu(), mask.cpu()
    groups, row_group = torch.unique(group_ids.cpu(), return_inverse=True)
    lengths = attention_mask.sum(1)
    first_trained = torch.where(mask.bool().any(1), mask.float().argmax(1), lengths - 1)
    prefix_length = torch.zeros(len(groups), dtype=torch.long)
    for g in range(len(groups)):
        rows = (row_group == g).nonzero().squeeze(1)
        limit = int(torch.minimum(first_trained[rows].min(), lengths[rows].min()))
        block = input_ids[rows, :limit]
        differs = (block != block[:1]).any(0).nonzero()
        prefix_length[g] = int(differs[0]) if len(differs) else limit
    group_sizes = torch.bincount(row_group, minlength=len(groups))
    saved = int(((group_sizes - 1) * prefix_length).sum())
    longest_rest = int((lengths.cpu() - prefix_length[row_group]).max())
    padded = len(groups) * int(prefix_length.max()) + len(row_group) * longest_rest
    return SharedPrefix(row_group, prefix_length, saved, padded)


def score_tokens(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    mask: torch.Tensor,
    temperature: float = 1.0,
    group_ids: torch.Tensor | None = None,
    allowed: Sequence[Mapping[int, Sequence[int]]] | None = None,
    cartridge: Cartridge | None = None,
) -> ScoredTokens:
    """Run the decoder over the right-padded batch but the LM head only on positions whose *next* token is
    masked in.

    Rollout batches are mostly prompt and env tokens; skipping their ``[T, V]`` logits saves the largest
    tensor of the step (for a 150k vocabulary it dominates memory). With ``group_ids`` ``[B]``, rows of a
    group share their common prompt's forward (and backward) pass; the result is the same up to float
    rounding; it is used only where its two padded passes are smaller than the plain one, and not under
    activation checkpointing. Works with PEFT-wrapped models (LoRA layers sit inside the decoder) and
    transformers causal LMs that expose ``get_decoder()`` and ``get_output_embeddings()`` and take
    ``position_ids`` and a ``DynamicCache``; not for sliding-window attention (the padding between prompt and
    continuation would count toward the window): pass no ``group_ids`` there.

    ``allowed[r]`` maps a target column ``j`` of row ``r`` (token ``input_ids[r, j + 1]``) to the token ids a
    constrained sampler allowed there; those positions are scored over the allowed tokens only, as the
    engine sampled them (:func:`worldgym.agents.llm.constrained.mask_logits`).

    With a ``cartridge`` (made for ``model``), every row is scored behind it: it sees the cartridge's
    ``num_tokens`` KV first and its own tokens take positions from ``num_tokens`` on, whatever its padding
    (left or right; ``group_ids`` still need right padding). Gradients reach the cartridge's trainable tokens.

    Raises:
        CartridgeError: the cartridge was made for another model, or activation checkpointing is on in training
            mode (transformers then drops the KV cache, and with it the cartridge).
    """
    base = model.get_base_model() if isinstance(model, PeftModel) else model
    decoder = base.get_decoder()
    selected = mask.bool()
    # activation checkpointing (transformers drops the KV cache in training mode) rules the shared pass out
    checkpointing = base.training and getattr(base, "is_activation_checkpointing", False)
    if cartridge is not None:
        cartridge.check_model(model)
        if checkpointing:
            raise CartridgeError(
                "activation checkpointing drops the KV cache in training mode, and with it the cartridge: call "
                "worldgym.agents.llm.adapters.disable_activation_checkpointing(model) (or model.eval()) to score "
                "with a cartridge"
            )
    with model_autocast(model):  # a model whose frozen weights are bf16 computes in bf16
        hidden, targets = _hidden_and_targets(decoder, input_ids, attention_mask, mask, group_ids, cartridge,
                                              checkpointing)
    logits = base.get_output_embeddings()(hidden).float() / temperature
    if allowed is not None and any(allowed):
        logits = _constrain(logits, selected, allowed)
    chosen = torch.gather(logits, -1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, -1)
    logprobs = torch.zeros(mask.shape, dtype=chosen.dtype, device=chosen.device).masked_scatter(
        selected, chosen
    )
    return ScoredTokens(logprobs, logits)


def _hidden_and_targets(
    decoder: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    mask: torch.Tensor,
    group_ids: torch.Tensor | None,
    cartridge: Cartridge | None,
    checkpointing: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The decoder's hidden states at the trained positions ``[N, H]`` and their targets ``[N]``: through the
    shared-prefix pass where it is valid and cheaper, else over every row in full."""
    split = None
    if group_ids is not None and not checkpointing:
        split = shared_prefix(input_ids, attention_mask, mask, group_ids)
    if (
        split is not None
        and int(split.prefix_length.min()) > 0  # a row with no prefix would attend to padding only
        and split.padded_tokens < input_ids.numel()  # cheaper than the plain pass, padding included
    ):
        return _decode_with_shared_prefix(decoder, input_ids, attention_mask, mask, split, cartridge)
    hidden = _decode(decoder, input_ids, attention_mask, cartridge)
    selected = mask.bool()
    return hidden[:, :-1][selected], input_ids[:, 1:][selected]


def _constrain(
    logits: torch.Tensor, selected: torch.Tensor, allowed: Sequence[Mapping[int, Sequence[int]]]
) -> torch.Tensor:
    """Mask the rows of ``logits`` (one per selected position, row-major) that a constraint narrowed."""
    flat_index = selected.flatten().long().cumsum(0) - 1  # position (row, col) -> its row in ``logits``
    width = selected.shape[1]
    rows, ids = [], []
    for row, columns in enumerate(allowed):
        for column, token_ids in columns.items():
            if not selected[row, column]:
                raise ValueError(f"row {row}, column {column} has a constraint but is not a trained token")
            rows.append(int(flat_index[row * width + column]))
            ids.append(token_ids)
    if not rows:
        return logits
    index = torch.tensor(rows, device=logits.device)
    return logits.index_put((index,), mask_logits(logits[index], ids))


def _decode(
    decoder: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, cartridge: Cartridge | None
) -> torch.Tensor:
    """The decoder's last hidden states ``[B, T, H]``, behind the cartridge if one is given."""
    if cartridge is None:
        return decoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    full_mask, positions = cartridge.positions(attention_mask)
    return decoder(
        input_ids=input_ids,
        attention_mask=full_mask,
        position_ids=positions,
        use_cache=True,
        **cache_argument(_cartridge_cache(decoder, cartridge, len(input_ids))),
    ).last_hidden_state


def _cartridge_cache(decoder: torch.nn.Module, cartridge: Cartridge, batch_size: int) -> DynamicCache:
    weight = next(decoder.parameters())
    return cartridge.past_key_values(batch_size, dtype=weight.dtype, device=weight.device)


def _decode_with_shared_prefix(
    decoder: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    mask: torch.Tensor,
    split: SharedPrefix,
    cartridge: Cartridge | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Hidden states at the trained positions ``[N, H]`` and their target tokens ``[N]``, in the row-major
    order of ``mask``, computing each group's prefix once.

    Prefixes are right-padded to a common width ``P``; every row's continuation follows at cache positions
    ``P..``, with explicit position ids so each token keeps the position it has in its own sequence. A
    cartridge of ``C`` tokens comes before both: the prefix pass starts from its KV, and every position id
    grows by ``C``.
    """
    device = input_ids.device
    offset = 0 if cartridge is None else cartridge.num_tokens
    seen = torch.ones(len(split.prefix_length), offset, dtype=torch.long, device=device)  # the cartridge
    row_group = split.row_group.to(device)
    prefix_length = split.prefix_length.to(device)
    width = int(prefix_length.max())
    steps = torch.arange(width, device=device)
    prefix_mask = (steps < prefix_length[:, None]).long()
    # any one row of each group: they all agree on the prefix
    some_row = torch.zeros(len(prefix_length), dtype=torch.long, device=device).scatter_(
        0, row_group, torch.arange(len(row_group), device=device)
    )
    prefix_ids = input_ids[some_row, :width] * prefix_mask
    prefix = decoder(
        input_ids=prefix_ids,
        attention_mask=torch.cat([seen, prefix_mask], 1),
        position_ids=offset + steps.expand(len(prefix_length), -1),
        use_cache=True,
        **cache_argument(None if cartridge is None else _cartridge_cache(decoder, cartridge, len(prefix_length))),
    )
    cache = returned_cache(prefix)
    cache.batch_select_indices(row_group)  # one copy of its group's prefix per row (gradients flow back)

    start = prefix_length[row_group]  # [R] first position of each row's own continuation
    lengths = attention_mask.sum(1)
    span = int((lengths - start).max())
    offsets = torch.arange(span, device=device)
    positions = start[:, None] + offsets  # [R, S] positions in the row's own sequence
    in_row = positions < lengths[:, None]
    last = input_ids.shape[1] - 1
    suffix_ids = input_ids.gather(1, positions.clamp(max=last)) * in_row
    hidden = decoder(
        input_ids=suffix_ids,
        attention_mask=torch.cat([seen[row_group], prefix_mask[row_group], in_row.long()], 1),
        position_ids=offset + positions,
        use_cache=True,
        **cache_argument(cache),
    ).last_hidden_state
    trained = in_row & (positions < last) & mask.bool().gather(1, positions.clamp(max=last - 1))
    targets = input_ids.gather(1, (positions + 1).clamp(max=last))
    return hidden[trained], targets[trained]
