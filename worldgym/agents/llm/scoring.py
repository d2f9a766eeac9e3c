"""Per-token logprobs of a causal LM, computing the vocabulary projection only where tokens are trained."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from peft import PeftModel
from transformers import PreTrainedModel

__all__ = ["ScoredTokens", "score_tokens"]


@dataclass
class ScoredTokens:
    """``logprobs`` ``[B, T-1]`` of ``input_ids[:, 1:]`` (0 where ``mask`` is 0) and the masked positions'
    logits
    ``[N, V]`` (N = number of masked tokens), e.g. for the entropy."""

    logprobs: torch.Tensor
    logits: torch.Tensor


def score_tokens(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    mask: torch.Tensor,
    temperature: float = 1.0,
) -> ScoredTokens:
    """Run the decoder over the whole sequence but the LM head only on positions whose *next* token is masked
    in.

    Rollout batches are mostly prompt and env tokens; skipping their ``[T, V]`` logits saves the largest
    tensor of the step (for a 150k vocabulary it dominates memory). Works with PEFT-wrapped models (LoRA
    layers sit inside the decoder) and any transformers causal LM that exposes ``get_decoder()`` and
    ``get_output_embeddings()``.
    """
    base = model.get_base_model() if isinstance(model, PeftModel) else model
    hidden = base.get_decoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    selected = mask.bool()
    logits = base.get_output_embeddings()(hidden[:, :-1][selected]).float() / temperature
    targets = input_ids[:, 1:][selected]
    chosen = torch.gather(logits, -1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, -1)
    logprobs = torch.zeros(mask.shape, dtype=chosen.dtype, device=chosen.device).masked_scatter(
        selected, chosen
    )
    return ScoredTokens(logprobs, logits)
