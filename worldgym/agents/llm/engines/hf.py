"""``HFEngine``: batched sampling with transformers ``generate``, left padding, per-token logprobs.

Neighbouring prompts that open with the same tokens (a GRPO group: ``n`` samples of one prompt, or a group's
episodes after their first reply) share one prefill of that prefix: the engine runs it once, copies its KV
cache to every row and lets ``generate`` continue from there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from peft import PeftModel
from transformers import DynamicCache, PreTrainedModel

from worldgym.agents.llm.engines.base import Generation, SamplingParams

__all__ = ["HFEngine", "PrefixGroups", "group_shared_prefixes"]


@dataclass
class PrefixGroups:
    """Runs of neighbouring prompts that share an opening: ``row_group[r]`` is row ``r``'s group, whose
    first row is ``first_rows[g]`` and whose shared opening is ``prefix_lengths[g]`` tokens long."""

    row_group: list[int]
    first_rows: list[int]
    prefix_lengths: list[int]

    def saves_work(self, prompts: Sequence[Sequence[int]]) -> bool:
        """Whether prefilling the prefixes once and then the padded remainders processes fewer token positions
        than prefilling the padded prompts (every prefix must be non-empty: an all-padding row is unsafe)."""
        if len(self.first_rows) == len(prompts) or min(self.prefix_lengths) < 1:
            return False
        rest = max(len(prompt) - self.prefix_lengths[g] for prompt, g in zip(prompts, self.row_group))
        shared = len(self.first_rows) * max(self.prefix_lengths) + len(prompts) * rest
        return shared < len(prompts) * max(len(prompt) for prompt in prompts)


def _common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def group_shared_prefixes(prompts: Sequence[Sequence[int]], min_shared: int) -> PrefixGroups:
    """Split the prompts into runs of neighbours that prefill a common opening once, choosing the runs that
    skip the most prefill tokens (dynamic programming over run boundaries). A run's opening is at least
    ``min_shared`` tokens (else its rows stand alone) and leaves each prompt at least one token of its own
    (``generate`` needs one uncached input token).

    >>> groups = group_shared_prefixes([[1, 2, 3, 4], [1, 2, 3, 5, 6], [1, 2, 3, 4], [9, 9]], min_shared=2)
    >>> groups.row_group, groups.first_rows, groups.prefix_lengths
    ([0, 0, 0, 1], [0, 3], [3, 1])
    """
    n = len(prompts)
    neighbour_lcp = [_common_prefix_length(prompts[i], prompts[i + 1]) for i in range(n - 1)]
    best = [0] * (n + 1)  # best[j]: most prefill tokens skipped by grouping rows [0, j)
    start_of = [0] * (n + 1)
    for end in range(1, n + 1):
        best[end], start_of[end] = best[end - 1], end - 1  # row end-1 alone
        shared = len(prompts[end - 1]) - 1
        for begin in range(end - 2, -1, -1):  # run [begin, end)
            shared = min(shared, neighbour_lcp[begin], len(prompts[begin]) - 1)
            if shared < min_shared:
                break
            if best[begin] + (end - begin - 1) * shared > best[end]:
                best[end], start_of[end] = best[begin] + (end - begin - 1) * shared, begin
    runs = []
    end = n
    while end > 0:
        runs.append((start_of[end], end))
        end = start_of[end]
    row_group: list[int] = []
    first_rows: list[int] = []
    prefix_lengths: list[int] = []
    for g, (begin, end) in enumerate(reversed(runs)):
        shared = min(len(prompts[r]) - 1 for r in range(begin, end))
        shared = min([shared, *neighbour_lcp[begin : end - 1]])
        row_group += [g] * (end - begin)
        first_rows.append(begin)
        prefix_lengths.append(shared)
    return PrefixGroups(row_group, first_rows, prefix_lengths)


class HFEngine:
    """Samples from a (PEFT or plain) transformers causal LM that the trainer updates in place.

    Prompts are left-padded into batches of at most ``batch_size`` sequences. Logprobs are
    ``log_softmax(logits / temperature)`` of the sampled tokens, before top-p truncation, i.e. the same
    quantity the trainer's forward pass computes, so they serve as the old policy's logprobs. Because the
    engine holds the trainer's own model object, :meth:`sync_weights` has nothing to copy.

    Args:
        model: the causal LM.
        pad_token_id: id used for left padding.
        eos_token_ids: ids that end a completion (e.g. ``<|im_end|>``).
        batch_size: most sequences per ``generate`` call.
        min_shared_prefix: neighbouring prompts sharing at least this many opening tokens prefill them once
            (0 turns prefix sharing off).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        pad_token_id: int,
        eos_token_ids: Sequence[int],
        batch_size: int = 64,
        min_shared_prefix: int = 16,
    ):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if min_shared_prefix < 0:
            raise ValueError(f"min_shared_prefix must be >= 0, got {min_shared_prefix}")
        if not eos_token_ids:
            raise ValueError("eos_token_ids must name at least one stop token")
        self.model = model
        self.pad_token_id = int(pad_token_id)
        self.eos_token_ids = [int(i) for i in eos_token_ids]
        self.batch_size = batch_size
        self.min_shared_prefix = min_shared_prefix

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def sync_weights(self) -> None:
        """Nothing to do: generation uses the trained model object itself."""

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Generation]]:
        """``params.n`` completions of each prompt; reproducible from ``params.seed`` (the caller's RNG is
        untouched)."""
        if any(len(prompt) == 0 for prompt in prompts):
            raise ValueError("every prompt needs at least one token")
        jobs = [(index, list(prompt)) for index, prompt in enumerate(prompts) for _ in range(params.n)]
        results: list[list[Generation]] = [[] for _ in prompts]
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
                torch.manual_seed(params.seed)
                for start in range(0, len(jobs), self.batch_size):
                    chunk = jobs[start : start + self.batch_size]
                    for (index, _), generation in zip(
                        chunk, self._generate_batch([p for _, p in chunk], params)
                    ):
                        generation.prompt_index = index
                        results[index].append(generation)
        finally:
            self.model.train(was_training)
        return results

    @torch.no_grad()
    def _generate_batch(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        groups = group_shared_prefixes(prompts, self.min_shared_prefix) if self.min_shared_prefix else None
        if groups is None or not groups.saves_work(prompts):
            input_ids, attention_mask = self._left_padded(prompts)
            cache = None
        else:
            input_ids, attention_mask, cache = self._prefill_shared(prompts, groups)
        sampling = (
            {"do_sample": True, "temperature": params.temperature, "top_p": params.top_p, "top_k": 0}
            if params.temperature > 0
            else {"do_sample": False}
        )
        width = input_ids.shape[1]
        output = self.model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            past_key_values=cache,
            max_new_tokens=params.max_new_tokens,
            eos_token_id=self.eos_token_ids,
            pad_token_id=self.pad_token_id,
            return_dict_in_generate=True,
            output_logits=True,
            **sampling,
        )
        new_tokens = output.sequences[:, width:].cpu()
        logits = torch.stack(output.logits, dim=1).float().cpu() / params.logprob_temperature
        logprobs = torch.gather(logits.log_softmax(-1), -1, new_tokens.unsqueeze(-1)).squeeze(-1)
        return [
            self._cut(tokens.tolist(), row_logprobs.tolist())
            for tokens, row_logprobs in zip(new_tokens, logprobs)
        ]

    def _left_padded(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(row) for row in rows)
        input_ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, row in enumerate(rows):
            if row:
                input_ids[r, width - len(row) :] = torch.tensor(row)
                attention_mask[r, width - len(row) :] = 1
        return input_ids.to(self.device), attention_mask.to(self.device)

    def _prefill_shared(
        self, prompts: list[list[int]], groups: PrefixGroups
    ) -> tuple[torch.Tensor, torch.Tensor, DynamicCache]:
        """Prefill each group's prefix once; returns the layout ``generate`` continues from: columns
        ``[0, P)`` hold the (right-padded) prefixes already in the cache, the rest each row's left-padded
        remainder. ``generate`` derives position ids from the attention mask, so the padding between the two
        parts does not shift any token's position."""
        prefixes = [
            prompts[first][:length] for first, length in zip(groups.first_rows, groups.prefix_lengths)
        ]
        width = max(groups.prefix_lengths)
        prefix_ids = torch.full((len(prefixes), width), self.pad_token_id, dtype=torch.long)
        prefix_mask = torch.zeros((len(prefixes), width), dtype=torch.long)
        for g, prefix in enumerate(prefixes):
            prefix_ids[g, : len(prefix)], prefix_mask[g, : len(prefix)] = torch.tensor(prefix), 1
        prefix_ids, prefix_mask = prefix_ids.to(self.device), prefix_mask.to(self.device)
        positions = (prefix_mask.cumsum(1) - 1).clamp(min=0)
        # the decoder alone: the prefix's logits are never used (a [G, W, V] tensor for a real vocabulary)
        base = self.model.get_base_model() if isinstance(self.model, PeftModel) else self.model
        cache = base.get_decoder()(
            input_ids=prefix_ids, attention_mask=prefix_mask, position_ids=positions, use_cache=True
        ).past_key_values
        row_group = torch.tensor(groups.row_group, device=self.device)
        cache.batch_select_indices(row_group)
        remainders = [prompt[groups.prefix_lengths[g] :] for prompt, g in zip(prompts, groups.row_group)]
        rest_ids, rest_mask = self._left_padded(remainders)
        input_ids = torch.cat([prefix_ids[row_group], rest_ids], 1)
        return input_ids, torch.cat([prefix_mask[row_group], rest_mask], 1), cache

    def _cut(self, tokens: list[int], logprobs: list[float]) -> Generation:
        """Trim after the first stop token (kept: the model generated it) and drop the padding that
        follows."""
        for position, token in enumerate(tokens):
            if token in self.eos_token_ids:
                return Generation(tokens[: position + 1], logprobs[: position + 1], "stop")
        return Generation(tokens, logprobs, "length")
