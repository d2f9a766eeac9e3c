"""``HFEngine``: batched sampling with transformers ``generate``, left padding, per-token logprobs."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from worldgym.agents.llm.engines.base import Generation, SamplingParams

__all__ = ["HFEngine"]


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
    """

    def __init__(
        self, model: PreTrainedModel, pad_token_id: int, eos_token_ids: Sequence[int], batch_size: int = 64
    ):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if not eos_token_ids:
            raise ValueError("eos_token_ids must name at least one stop token")
        self.model = model
        self.pad_token_id = int(pad_token_id)
        self.eos_token_ids = [int(i) for i in eos_token_ids]
        self.batch_size = batch_size

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
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            input_ids[row, width - len(prompt) :] = torch.tensor(prompt)
            attention_mask[row, width - len(prompt) :] = 1
        sampling = (
            {"do_sample": True, "temperature": params.temperature, "top_p": params.top_p, "top_k": 0}
            if params.temperature > 0
            else {"do_sample": False}
        )
        output = self.model.generate(
            input_ids=input_ids.to(self.device),
            attention_mask=attention_mask.to(self.device),
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

    def _cut(self, tokens: list[int], logprobs: list[float]) -> Generation:
        """Trim after the first stop token (kept: the model generated it) and drop the padding that
        follows."""
        for position, token in enumerate(tokens):
            if token in self.eos_token_ids:
                return Generation(tokens[: position + 1], logprobs[: position + 1], "stop")
        return Generation(tokens, logprobs, "length")
