"""CSRPhone-v1's training presets, per model: the warm start, the DAPO settings and the rollout engine.

Plain settings (:func:`worldgym.env_training.register_presets`): ``"warm_start"`` holds ``WarmStartConfig``
fields, ``"trainer"`` ``GRPOConfig`` fields (the difficulty is set per run), ``"engine"`` ``HFEngine`` options.
Shared by ``examples/train_grpo.py``, ``examples/train_dual_lora.py`` and the CSR benchmarks, so that the
examples run what the benchmarks measured.

- warm start: SFT on the scripted expert's chats at difficulties 1-3 (train split). Its vocabulary reserves the
  dual-LoRA world model's markers (:data:`WORLD_MODEL_MARKERS`), so the dual-LoRA agent builds on the very warm
  start the CSR policy's DAPO starts from (one SFT per model, not two).
- trainer: DAPO (clip 0.2/0.28, token-mean, dynamic sampling) on the 0/1 reward, training on the train split,
  validating on the validation split, the env's 16-call limit. ``max_new_tokens``: the scripted expert's longest
  call is 66 / 87 / 126 / 142 / 161 tokens at d1-d5 with SmolLM2's tokenizer (64 / 83 / 122 / 132 / 151 with
  the tiny one; 40 expert episodes per difficulty): from d3 on, a call with 2-3 auth values is longer than 96
  tokens, and a cap of 96 cut it into invalid JSON every time. ``max_episode_tokens``: per episode, in training
  and in every validation (a failing d3-d5 episode of SmolLM2 runs 16 calls, ~3,500 tokens and more).
- engine: ``batch_size`` episodes generated together, each episode's KV cache kept across turns in a store of
  ``kv_cache_max_tokens`` tokens (room for every running episode's conversation, or early rows are evicted and
  re-prefilled).
"""

from __future__ import annotations

from typing import Any

__all__ = ["CPU_MMAP_THRESHOLD", "PRESETS", "WORLD_MODEL_MARKERS"]

# The dual-LoRA world model's markers (``worldgym.agents.llm.tokenizer.WORLD_MODEL_TOKENS``): it reads
# ``<|predict_csr|>`` and writes ``<|csr|> reply <|/csr|>``.
WORLD_MODEL_MARKERS = ("<|predict_csr|>", "<|csr|>", "<|/csr|>")
# 1 MiB (``worldgym.agents.llm.allocator.DEFAULT_MMAP_THRESHOLD``), for a config that maps large blocks
# (``cpu_mmap_threshold``): freed multi-MB tensors stayed in malloc's heap, and a dual-LoRA update was OOM-killed
# at 17 GB. The SmolLM2 preset now releases the heap's free pages instead (``cpu_release_heap``): mapping every
# large tensor afresh made bf16 learner passes 1.43x slower (benchmarks/cpu_allocator_memory.py --workload learner)
CPU_MMAP_THRESHOLD = 1 << 20

_DAPO: dict[str, Any] = {
    "env_id": "CSRPhone-v1",
    "env_kwargs": {"split": "train"},
    "eval_env_kwargs": {"split": "validation"},
    "max_turns": 16,
    "max_new_tokens": 192,
    "max_episode_tokens": 8192,
    "group_size": 8,
    "microbatch_size": 0,
    "activation_checkpointing": False,
    "cpu_mmap_threshold": None,
    "cpu_release_heap": False,
    "dtype": "float32",
    "loss_aggregation": "token_mean",
    "eps_low": 0.2,
    "eps_high": 0.28,
    "dynamic_sampling": True,
    "max_resample_rounds": 1,
}
_WARM_START: dict[str, Any] = {"env_id": "CSRPhone-v1", "difficulties": (1, 2, 3),
                               "extra_special_tokens": WORLD_MODEL_MARKERS}
_ENGINE: dict[str, Any] = {"reuse_kv_cache": True, "kv_cache_max_tokens": 131072}

PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    # a 0.8M-parameter Qwen3 from config, trained in full with a tokenizer trained on the expert chats (one
    # token per digit); it does not learn to copy unseen values, so its arguments are constrained
    "tiny": {
        "warm_start": {**_WARM_START, "model": "tiny", "episodes_per_difficulty": 512, "epochs": 4, "batch_size": 8,
                       "learning_rate": 3e-3},
        "trainer": {**_DAPO, "decoding": "constrained", "prompts_per_step": 8, "learning_rate": 3e-4,
                    "minibatch_size": 64},
        "engine": {**_ENGINE, "batch_size": 64},
    },
    # SmolLM2-135M-Instruct with a LoRA adapter (r16, all linear layers, plus the added tool tokens' rows)
    "smollm2-135m": {
        "warm_start": {**_WARM_START, "model": "smollm2-135m"},
        "trainer": {
            **_DAPO, "decoding": "free", "prompts_per_step": 4, "learning_rate": 2e-5, "minibatch_size": 4,
            # a d3 update on 4 episodes of up to 8,192 tokens took 24 GB and was OOM-killed; one episode per
            # pass with recomputed activations peaks ~7 GB above the model (measured on 1 x 8,000 tokens)
            "microbatch_size": 1, "activation_checkpointing": True,
            # freed activations go back to the system after every microbatch and rollout batch, while malloc
            # keeps serving large tensors from its heap (mapping each afresh cost the learner 1.43x)
            "cpu_release_heap": True,
            # the fast precision of this machine: bf16 rollouts and updates where the CPU has native bf16 (on an
            # AMX CPU d3 rollouts ran 1.51x faster, the same greedy success: csr_rollout_speed.py --compare
            # dtype; llm_precision.py), float32 where bf16 would be emulated (tens of times slower)
            "dtype": "auto",
        },
        # under bf16: decode steps with the project's C++ decode attention (decode steps 2.4x faster than with
        # the flash kernel on an AVX512-BF16 CPU: benchmarks/decode_attention.py), and the LoRA layers merged
        # for generation (csr_rollout_speed.py --compare merge); float32 rollouts keep sdpa and PEFT's layers
        "engine": {**_ENGINE, "batch_size": 32, "decode_attention": "native", "merge_lora": True},
    },
}
