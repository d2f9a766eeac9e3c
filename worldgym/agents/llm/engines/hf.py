"""``HFEngine``: batched sampling with transformers ``generate``, left padding, per-token logprobs.

Neighbouring prompts that open with the same tokens (a GRPO group: ``n`` samples of one prompt, or a group's
episodes after their first reply) share one prefill of that prefix: the engine runs it once, copies its KV
cache to every row and lets ``generate`` continue from there. With ``reuse_kv_cache=True`` the engine also keeps
each row's KV after a batch (:class:`~worldgym.agents.llm.engines.prefix_cache.PrefixKVCache`), so the next turn
of a multi-turn episode, whose prompt extends the previous prompt and reply, prefills only the new tokens.
With a :class:`~worldgym.agents.llm.cartridge.Cartridge`, every layout starts behind the cartridge's KV.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from peft import PeftModel
from transformers import Cache, DynamicCache, LogitsProcessorList, PreTrainedModel, StoppingCriteriaList

from worldgym.agents.llm.adapters import merged_trainable_tokens
from worldgym.agents.llm.cache_argument import cache_argument, returned_cache
from worldgym.agents.llm.cartridge import Cartridge
from worldgym.agents.llm.constrained import CopyArgumentsProcessor, CopyConstraint, mask_logits
from worldgym.agents.llm.engines.base import Generation, SamplingParams
from worldgym.agents.llm.engines.decode_attention import (
    DECODE_ATTENTION_KERNELS,
    decode_kernel_of,
    use_fast_decode_attention,
)
from worldgym.agents.llm.engines.growing_cache import growing_cache
from worldgym.agents.llm.engines.merged_lora import MergedLoRA
from worldgym.agents.llm.engines.prefix_cache import (
    PrefixKVCache,
    StoredOpening,
    batched_cache,
    row_kv,
    storable,
)
from worldgym.agents.llm.engines.retiring_rows import DecodedRows, RetireFinishedRows
from worldgym.agents.llm.engines.sampling import sampling_processors
from worldgym.precision import compute_dtype, model_autocast

__all__ = ["HFEngine", "PrefixGroups", "contiguous_head_input", "group_shared_prefixes"]

_Hit = StoredOpening | None  # a stored opening of a prompt, its KV and the entry it comes from


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

    A batch starts ``generate`` from one of three layouts: plain left padding; shared prefixes
    (:meth:`_prefill_shared`); or, with ``reuse_kv_cache``, stored KV (:meth:`_prefill_cached`), used as soon as
    any prompt of the batch opens with a stored sequence. After every batch the engine then stores each row's
    KV for its prompt and the reply tokens ``generate`` fed (all but the last sampled one), replacing the entry
    the row consumed. The stored KV is only valid for the weights it was computed with: :meth:`sync_weights`
    (called by the trainer after each update) clears it, and so does any in-place parameter change noticed
    before a ``generate`` call. Results equal those without reuse up to float rounding (another batch layout
    rounds differently, which can flip a near-tie between two tokens).

    With a ``cartridge``, every prompt is generated behind it, as if its ``num_tokens`` KV came from real tokens
    before the prompt: ``generate`` gets ``num_tokens`` extra leading columns (pad ids, attention mask 1) whose
    KV is the cartridge's, so the prompt's position ids start after it. The stored KV (``reuse_kv_cache``) is
    computed behind the cartridge and dropped when the cartridge changes (:meth:`set_cartridge`, or an in-place
    update of its tensors).

    Args:
        model: the causal LM.
        pad_token_id: id used for left padding.
        eos_token_ids: ids that end a completion (e.g. ``<|im_end|>``).
        batch_size: most sequences per ``generate`` call.
        min_shared_prefix: neighbouring prompts sharing at least this many opening tokens prefill them once
            (0 turns prefix sharing off).
        reuse_kv_cache: keep each row's KV across ``generate`` calls (multi-turn rollouts prefill only the new
            tokens).
        kv_cache_branches: with ``reuse_kv_cache``, a prompt also reuses the opening it shares with a stored
            sequence it branches off, not only a stored sequence that opens it whole
            (:class:`~worldgym.agents.llm.engines.prefix_cache.PrefixKVCache`'s ``branching``): for callers whose
            prompts leave earlier generations behind, such as a world model that writes a reply after each of an
            episode's calls, which the next prompt replaces with the real conversation.
        kv_cache_max_tokens: most tokens stored in total (least recently used entries are evicted); memory is
            this times the KV bytes of a token (see :mod:`~worldgym.agents.llm.engines.prefix_cache`). Set it
            to at least the episodes run at once times their length, or early rows get evicted.
        cartridge: a trainable KV prefix made for ``model`` to generate behind (None: plain prompts).
        retire_stopped_rows: end a ``generate`` call once a quarter of its rows have stopped and go on with the
            rest only (:mod:`~worldgym.agents.llm.engines.retiring_rows`): the same completions, fewer decoded
            positions when replies differ in length.
        dtype: the compute dtype (bfloat16: forward passes under autocast, so KV caches are bf16 too; logits
            and logprobs stay float32). None: the dtype of the model's frozen weights
            (:func:`worldgym.precision.compute_dtype`), e.g. bf16 for a LoRA model whose base is stored in bf16.
        decode_attention: under bf16 on CPU, the kernel of a decode step's attention
            (:mod:`~worldgym.agents.llm.engines.decode_attention`): ``"flash"`` (PyTorch's flash kernel in the
            faster grouped-query layout), ``"compiled"`` (a ``torch.compile``d float32 pass over the cache) or
            ``"native"`` (the project's C++ kernel, built once per machine; on a CPU with AVX512-BF16 and no
            AMX the model's many-token passes, prefill and training, also run its native flash attention) or
            ``"native-decode"`` (its decode kernel only); the native and compiled kernels fall back to the flash
            kernel, with one warning, where they cannot be built. None: the kernel ``model`` already decodes
            with (another engine on the same model chose it), else ``"flash"``. The kernel is the model's
            setting, so engines sharing a model share it.
        merge_lora: under bf16, generate with each LoRA layer's adapters merged into a copy of its base weight
            (:mod:`~worldgym.agents.llm.engines.merged_lora`: one matmul per layer instead of three, computed
            again only after the weights change; costs a second copy of the adapted layers' weights). Its
            rounding differs from PEFT's, as bf16 engines' does anyway (the learner scores episodes again).

    Raises:
        CartridgeError: the cartridge was made for another model.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        pad_token_id: int,
        eos_token_ids: Sequence[int],
        batch_size: int = 64,
        min_shared_prefix: int = 16,
        reuse_kv_cache: bool = False,
        kv_cache_branches: bool = False,
        kv_cache_max_tokens: int = 32768,
        cartridge: Cartridge | None = None,
        retire_stopped_rows: bool = True,
        dtype: torch.dtype | None = None,
        decode_attention: str | None = None,
        merge_lora: bool = False,
    ):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if decode_attention is not None and decode_attention not in DECODE_ATTENTION_KERNELS:
            raise ValueError(f"decode_attention must be one of {DECODE_ATTENTION_KERNELS}, got {decode_attention!r}")
        if min_shared_prefix < 0:
            raise ValueError(f"min_shared_prefix must be >= 0, got {min_shared_prefix}")
        if not eos_token_ids:
            raise ValueError("eos_token_ids must name at least one stop token")
        self.model = model
        self.pad_token_id = int(pad_token_id)
        self.eos_token_ids = [int(i) for i in eos_token_ids]
        self.batch_size = batch_size
        self.min_shared_prefix = min_shared_prefix
        self.retire_stopped_rows = retire_stopped_rows
        self.dtype = dtype
        if self._compute_dtype() == torch.bfloat16 and self.device.type == "cpu":
            # bf16 decode steps with the faster grouped-query layout (decode_attention.py; float32 keeps sdpa,
            # so its engine logprobs stay bit-equal to the learner's)
            use_fast_decode_attention(model, kernel=decode_attention or decode_kernel_of(model) or "flash")
        self.merged_lora = MergedLoRA(model, torch.bfloat16) if merge_lora else None
        self.kv_cache = PrefixKVCache(kv_cache_max_tokens, branching=kv_cache_branches) if reuse_kv_cache else None
        self._kv_weight_versions: tuple[int, ...] = ()
        self.cartridge: Cartridge | None = None
        self.set_cartridge(cartridge)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _compute_dtype(self) -> torch.dtype:
        return self.dtype or compute_dtype(self.model)

    def sync_weights(self) -> None:
        """Nothing to copy (generation uses the trained model object itself); drops the stored KV, which the
        old weights computed."""
        self.clear_kv_cache()

    def set_cartridge(self, cartridge: Cartridge | None) -> None:
        """Generate behind ``cartridge`` from now on (None: without one); drops the stored KV.

        Raises:
            CartridgeError: the cartridge was made for another model.
        """
        if cartridge is not None:
            cartridge.check_model(self.model)
        self.cartridge = cartridge
        self.clear_kv_cache()

    def clear_kv_cache(self) -> None:
        """Drop every stored KV entry; needed after changing what the model computes other than by in-place
        parameter updates (e.g. switching adapters, editing ``.data``)."""
        if self.kv_cache is not None:
            self.kv_cache.clear()

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        constraints: Sequence[CopyConstraint | None] | None = None,
    ) -> list[list[Generation]]:
        """``params.n`` completions of each prompt; reproducible from ``params.seed`` (the caller's RNG is
        untouched). ``constraints[i]`` (``None`` = free) narrows prompt ``i``'s copied tool arguments; the
        generations then record the allowed tokens and their logprobs are over those tokens only."""
        if any(len(prompt) == 0 for prompt in prompts):
            raise ValueError("every prompt needs at least one token")
        if constraints is not None and len(constraints) != len(prompts):
            raise ValueError(f"got {len(prompts)} prompts but {len(constraints)} constraints")
        self._drop_stale_kv_cache()
        row_constraints = list(constraints) if constraints is not None else [None] * len(prompts)
        jobs = [(index, list(prompt)) for index, prompt in enumerate(prompts) for _ in range(params.n)]
        results: list[list[Generation]] = [[] for _ in prompts]
        consumed: set[tuple[int, ...]] = set()  # stored entries used in this call, dropped at its end
        was_training = self.model.training
        self.model.eval()
        try:
            with (
                merged_trainable_tokens(self.model),
                self._merged_lora(),
                contiguous_head_input(self._base_model()),
                torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []),
                model_autocast(self.model, self.device, self._compute_dtype()),
            ):
                torch.manual_seed(params.seed)
                for start in range(0, len(jobs), self.batch_size):
                    chunk = jobs[start : start + self.batch_size]
                    chunk_constraints = [row_constraints[index] for index, _ in chunk]
                    for (index, _), generation in zip(
                        chunk, self._generate_batch([p for _, p in chunk], params, consumed, chunk_constraints)
                    ):
                        generation.prompt_index = index
                        results[index].append(generation)
        finally:
            self.model.train(was_training)
        if self.kv_cache is not None:  # after every chunk: the samples of one prompt may span chunks
            for key in consumed:
                self.kv_cache.discard(key)
        return results

    def _merged_lora(self) -> AbstractContextManager[Any]:
        """The LoRA layers merged for a block of generation where ``merge_lora`` asks and the engine computes in
        bf16 (else nothing changes)."""
        if self.merged_lora is None or self._compute_dtype() != torch.bfloat16:
            return nullcontext()
        return self.merged_lora.applied()

    def _drop_stale_kv_cache(self) -> None:
        """Clear the KV cache if a parameter changed in place since the last call (autograd's version counters
        see optimizer steps and ``load_state_dict``): a safety net behind :meth:`sync_weights`."""
        if self.kv_cache is None:
            return
        tensors = [*self.model.parameters(), *(self.cartridge._tensors() if self.cartridge is not None else ())]
        versions = tuple(tensor._version for tensor in tensors)
        if versions != self._kv_weight_versions:
            self.kv_cache.clear()
            self._kv_weight_versions = versions

    @torch.no_grad()
    def _generate_batch(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        consumed: set[tuple[int, ...]],
        constraints: list[CopyConstraint | None],
    ) -> list[Generation]:
        hits = self.kv_cache.lookup(prompts) if self.kv_cache is not None else [None] * len(prompts)
        consumed.update(hit.entry for hit in hits if hit is not None)
        input_ids, attention_mask, cache = self._layout(prompts, hits)
        width = input_ids.shape[1]
        processor = None
        if any(c is not None for c in constraints):
            processor = CopyArgumentsProcessor(constraints, prompt_width=width)
        # greedy decoding behind processors that draw the token when sampling (sampling.py: cheaper than
        # generate's torch.multinomial, the same distribution)
        processors = LogitsProcessorList([*([processor] if processor is not None else []),
                                          *sampling_processors(params)])
        # appended to in place, not by concatenation (kv_cache_growth.py: 1.40-1.65x faster decoding behind 1-3k
        # cached tokens)
        cache = growing_cache(cache, params.max_new_tokens + 1, self._base_model().config)
        decoded = DecodedRows(len(prompts))
        finished: dict[int, Generation] = {}
        sequences = input_ids
        while len(finished) < len(prompts):  # a generate call per retirement of stopped rows (retiring_rows.py)
            running = decoded.active
            output = self.model.generate(
                input_ids=sequences,
                attention_mask=torch.cat(
                    [attention_mask[running], attention_mask.new_ones(len(running), decoded.steps)], 1),
                **cache_argument(cache),
                max_new_tokens=params.max_new_tokens - decoded.steps,
                eos_token_id=self.eos_token_ids,
                pad_token_id=self.pad_token_id,
                stopping_criteria=StoppingCriteriaList(
                    [RetireFinishedRows(self.eos_token_ids, sequences.shape[1])] if self.retire_stopped_rows else []),
                return_dict_in_generate=True,
                output_logits=True,
                synced_gpus=False,  # this process generates alone (transformers syncs an FSDP model's ranks)
                do_sample=False,
                logits_processor=processors,
            )
            new_tokens = output.sequences[:, sequences.shape[1]:].cpu()
            decoded.add(new_tokens, _call_logprobs(output.logits, new_tokens, params.logprob_temperature,
                                                   processor, running, decoded.steps))
            sequences = output.sequences
            del output  # its logits (rows x steps x vocab floats) go before the next call
            leaving = (decoded.stopped(self.eos_token_ids) if decoded.steps < params.max_new_tokens
                       else list(range(len(running))))
            for b in leaving:
                finished[running[b]] = self._generation(decoded, running[b], processor)
            if self.kv_cache is not None:  # a sequence stored again is kept (a branch can repeat its entry)
                consumed -= self._store(self.kv_cache, [(b, prompts[running[b]], finished[running[b]],
                                                         attention_mask[running[b]]) for b in leaving],
                                        cache, width + decoded.steps - 1, skip=self._cartridge_tokens)
            if len(leaving) < len(running):  # the rows that stopped leave the batch
                stopped = set(leaving)
                keep = [b for b in range(len(running)) if b not in stopped]
                cache.batch_select_indices(torch.tensor(keep, device=self.device))
                sequences = sequences[keep]
                decoded.keep(keep)
                if processor is not None:
                    processor.keep(keep)
        return [finished[row] for row in range(len(prompts))]

    def _generation(self, decoded: DecodedRows, row: int, processor: CopyArgumentsProcessor | None) -> Generation:
        """Prompt row ``row``'s completion, its logprobs as the sampler drew them (over a constraint's allowed
        tokens where one applied)."""
        allowed = processor.allowed[row] if processor is not None else None
        return self._cut(decoded.tokens[row], decoded.logprobs[row], allowed)

    def _layout(
        self, prompts: list[list[int]], hits: list[_Hit]
    ) -> tuple[torch.Tensor, torch.Tensor, DynamicCache | None]:
        """Input ids, attention mask and cache ``generate`` starts from: stored KV if any prompt has some, else
        shared prefixes if they save work, else plain left padding (each behind the cartridge, if any)."""
        if any(hit is not None for hit in hits):
            return self._prefill_cached(prompts, hits)
        groups = group_shared_prefixes(prompts, self.min_shared_prefix) if self.min_shared_prefix else None
        if groups is not None and groups.saves_work(prompts):
            return self._prefill_shared(prompts, groups)
        if self.cartridge is not None:
            return self._behind_cartridge(*self._left_padded(prompts), None)
        return *self._left_padded(prompts), None

    @property
    def _cartridge_tokens(self) -> int:
        return 0 if self.cartridge is None else self.cartridge.num_tokens

    def _cartridge_cache(self, batch_size: int, then: DynamicCache | None = None) -> DynamicCache | None:
        """The cartridge's KV for ``batch_size`` rows, followed by ``then``'s (None without a cartridge)."""
        if self.cartridge is None:
            return then
        return self.cartridge.past_key_values(batch_size, self._base_model().dtype, self.device, then=then)

    def _behind_cartridge(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, cache: DynamicCache | None
    ) -> tuple[torch.Tensor, torch.Tensor, DynamicCache | None]:
        """Put the cartridge's columns in front of a layout: pad ids under attention mask 1, whose KV (the
        cartridge's) is prepended to ``cache`` (the KV of the layout's leading columns, if any)."""
        if self.cartridge is None:
            return input_ids, attention_mask, cache
        rows, tokens = len(input_ids), self.cartridge.num_tokens
        ids = torch.full((rows, tokens), self.pad_token_id, dtype=input_ids.dtype, device=input_ids.device)
        ones = attention_mask.new_ones(rows, tokens)
        return (torch.cat([ids, input_ids], 1), torch.cat([ones, attention_mask], 1),
                self._cartridge_cache(rows, then=cache))

    def _left_padded(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        return self._padded(rows, left=True)

    def _right_padded(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        return self._padded(rows, left=False)

    def _padded(self, rows: list[list[int]], left: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Input ids and attention mask of ``rows`` padded to the longest (``[len(rows), width]``)."""
        width = max(len(row) for row in rows)
        input_ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, row in enumerate(rows):
            if row:
                columns = slice(width - len(row), width) if left else slice(0, len(row))
                input_ids[r, columns] = torch.tensor(row)
                attention_mask[r, columns] = 1
        return input_ids.to(self.device), attention_mask.to(self.device)

    def _base_model(self) -> PreTrainedModel:
        return self.model.get_base_model() if isinstance(self.model, PeftModel) else self.model

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
        prefix_ids, prefix_mask = self._right_padded(prefixes)
        positions = (prefix_mask.cumsum(1) - 1).clamp(min=0)
        # the decoder alone: the prefix's logits are never used (a [G, W, V] tensor for a real vocabulary);
        # behind the cartridge, if any
        seen = prefix_mask.new_ones(len(prefixes), self._cartridge_tokens)
        cache = returned_cache(self._base_model().get_decoder()(
            input_ids=prefix_ids,
            attention_mask=torch.cat([seen, prefix_mask], 1),
            position_ids=self._cartridge_tokens + positions,
            use_cache=True,
            **cache_argument(self._cartridge_cache(len(prefixes))),
        ))
        row_group = torch.tensor(groups.row_group, device=self.device)
        cache.batch_select_indices(row_group)
        remainders = [prompt[groups.prefix_lengths[g] :] for prompt, g in zip(prompts, groups.row_group)]
        rest_ids, rest_mask = self._left_padded(remainders)
        input_ids = torch.cat([prefix_ids[row_group], rest_ids], 1)
        input_ids, attention_mask, _ = self._behind_cartridge(
            input_ids, torch.cat([prefix_mask[row_group], rest_mask], 1), None
        )
        return input_ids, attention_mask, cache  # the cache already starts with the cartridge

    def _prefill_cached(
        self, prompts: list[list[int]], hits: list[_Hit]
    ) -> tuple[torch.Tensor, torch.Tensor, DynamicCache]:
        """The layout ``generate`` continues from when some prompts open with stored sequences:

            columns [0, P)              columns [P, W)
            stored opening | padding    padding | uncached remainder     (a row with a stored opening)
            padding (all P columns)     padding | whole prompt           (a row without one)

        The cache holds the stored KV in columns ``[0, P)`` (zeros under the padding, which the attention mask
        hides), so ``generate`` prefills only the remainders. It derives position ids from the attention mask,
        so the padding between the parts does not shift any token's position (as in :meth:`_prefill_shared`).
        """
        reused = [0 if hit is None else len(hit.tokens) for hit in hits]
        prefix_ids, prefix_mask = self._right_padded([prompt[:n] for prompt, n in zip(prompts, reused)])
        cache = batched_cache(
            [None if hit is None else hit.kv for hit in hits], max(reused), self._base_model().config
        )
        rest_ids, rest_mask = self._left_padded([prompt[n:] for prompt, n in zip(prompts, reused)])
        return self._behind_cartridge(
            torch.cat([prefix_ids, rest_ids], 1), torch.cat([prefix_mask, rest_mask], 1), cache
        )

    @staticmethod
    def _store(
        store: PrefixKVCache,
        rows: list[tuple[int, list[int], Generation, torch.Tensor]],
        cache: Cache | None,
        length: int,
        skip: int = 0,
    ) -> set[tuple[int, ...]]:
        """Store the KV of each ``(batch row, prompt, generation, prompt attention mask)`` of ``rows``, of its
        prompt and fed reply tokens (all but the last sampled one), cut out of ``generate``'s cache, ``length``
        positions long: the columns the attention mask marks real after the first ``skip`` (a cartridge's),
        then the row's first ``len(reply) - 1`` generated columns (later ones hold pad tokens fed after its
        eos). Returns the stored sequences."""
        if not rows or not storable(cache, length):  # e.g. sliding-window layers: nothing to store
            return set()
        stored = set()
        for batch_row, prompt, generation, mask in rows:
            fed = generation.token_ids[:-1]
            width = len(mask)
            generated_columns = torch.arange(width, width + len(fed), device=mask.device)
            columns = torch.cat([mask[skip:].nonzero().squeeze(1) + skip, generated_columns])
            key = (*prompt, *fed)
            store.put(key, row_kv(cache, batch_row, columns))
            stored.add(key)
        return stored

    def _cut(
        self, tokens: list[int], logprobs: list[float], allowed: list[list[int] | None] | None
    ) -> Generation:
        """Trim after the first stop token (kept: the model generated it) and drop the padding that
        follows."""
        end, reason = len(tokens), "length"
        for position, token in enumerate(tokens):
            if token in self.eos_token_ids:
                end, reason = position + 1, "stop"
                break
        return Generation(tokens[:end], logprobs[:end], reason,
                          allowed_token_ids=None if allowed is None else allowed[:end])


@contextmanager
def contiguous_head_input(model: PreTrainedModel) -> Iterator[None]:
    """Within the block, ``model``'s output projection (the LM head) gets a contiguous input.

    ``generate`` computes the logits of a prefill's last position only, a strided ``hidden[:, -1:, :]`` view;
    with a frozen head weight ``F.linear`` then takes ``matmul``'s batched path, which copies the weight once per
    row (16 copies of SmolLM2's 57 MB bf16 head at a 16-row prefill), at every turn's prefill."""
    head = model.get_output_embeddings()
    if head is None:
        yield
        return
    handle = head.register_forward_pre_hook(
        lambda module, args: (args[0].contiguous(), *args[1:]) if args and not args[0].is_contiguous() else None)
    try:
        yield
    finally:
        handle.remove()


def _call_logprobs(logits: Sequence[torch.Tensor], tokens: torch.Tensor, temperature: float,
                   processor: CopyArgumentsProcessor | None, rows: Sequence[int], first_step: int) -> torch.Tensor:
    """The ``[active, steps]`` logprobs of one ``generate`` call's sampled ``tokens``, from its per-step logits
    ``[active, vocab]`` divided by ``temperature``; batch row ``b`` is prompt row ``rows[b]``, whose steps start at
    ``first_step`` in ``processor``'s record of allowed tokens. One step at a time: no ``[active, steps, vocab]``
    copy of the logits is made."""
    logprobs = torch.empty(tokens.shape)
    for step, step_logits in enumerate(logits):
        allowed = [[processor.allowed[row][first_step + step]] if processor is not None else None for row in rows]
        logprobs[:, step] = _sampled_logprobs(step_logits.float().cpu()[:, None] / temperature,
                                              tokens[:, step : step + 1], allowed)[:, 0]
    return logprobs


def _sampled_logprobs(
    logits: torch.Tensor, tokens: torch.Tensor, allowed: Sequence[list[list[int] | None] | None]
) -> torch.Tensor:
    """``log_softmax`` of ``logits`` ``[B, S, V]`` at the sampled ``tokens`` ``[B, S]``; where a constraint
    narrowed a step (``allowed[row][step]``), over the allowed tokens only, as the sampler drew it."""
    places = [(row, step) for row, steps in enumerate(allowed) if steps for step, ids in enumerate(steps) if ids]
    if places:
        rows, steps = torch.tensor(places).T
        logits = logits.index_put(
            (rows, steps), mask_logits(logits[rows, steps], [allowed[r][s] for r, s in places])
        )
    return torch.gather(logits.log_softmax(-1), -1, tokens.unsqueeze(-1)).squeeze(-1)
