"""Many-token attention in bf16 on CPU: PyTorch's ``sdpa`` against the native flash attention, per layer and in a
whole learner pass.

Per layer, at SmolLM2-135M's head shape (9 heads over 3 KV heads of 64 dims), one thread, the variants
alternating round by round (medians after a warm-up):

- ``training``: causal self-attention over ``length`` tokens, forward and backward, as the learner runs it
  (``sdpa`` with ``enable_gqa``, transformers' choice when there is no mask);
- ``prefill``: ``rows`` rows of ``new`` tokens behind ``cached`` positions under a left-padding causal mask, as the
  engine prefills a turn (transformers' ``sdpa_attention_forward``, which repeats the KV heads there).

Then a learner pass (``score_tokens`` forward + backward of the model with an all-linear rank-16 LoRA) over
``--learner-length`` random tokens with each kernel, and the relative error of each bf16 gradient against the
float32 pass's (the same weights).

    OMP_WAIT_POLICY=PASSIVE python benchmarks/flash_attention.py           # SmolLM2-135M
    OMP_WAIT_POLICY=PASSIVE python benchmarks/flash_attention.py --quick   # tiny shapes and model, seconds

Writes ``flash_attention.json`` to ``benchmarks/results/`` (``--results-dir``); skips (says so) where the native
kernel cannot be built.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from worldgym.agents.llm.engines.decode_attention import use_fast_decode_attention
from worldgym.agents.llm.engines.flash_attention import flash_attention, native_flash_attention_is_faster
from worldgym.agents.llm.engines.native_kernel import native_kernel
from worldgym.precision import cast_for_training

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: find the benchmarks package
from benchmarks import llm_precision
from benchmarks.common import model_ready, results_dir, results_parser, write_json

HEADS, KV_HEADS, DIM = 9, 3, 64  # SmolLM2-135M


def median_ms(variants: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """Each variant's median wall time in ms over ``repeats`` rounds (variants alternating) after a warm-up."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    for round_ in range(repeats + 1):
        for name, run in variants.items():
            start = time.perf_counter()
            run()
            if round_:
                times[name].append(1000 * (time.perf_counter() - start))
    return {name: statistics.median(values) for name, values in times.items()}


def _module() -> torch.nn.Module:
    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal = HEADS // KV_HEADS, True
    return module


def training_layer(length: int, repeats: int) -> dict[str, dict[str, float]]:
    """Forward and backward ms of one layer's causal attention over ``length`` tokens, per kernel."""
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(1, length, HEADS, DIM, generator=generator).bfloat16().transpose(1, 2).requires_grad_()
    key, value = (torch.randn(1, length, KV_HEADS, DIM, generator=generator).bfloat16().transpose(1, 2)
                  .requires_grad_() for _ in range(2))
    grad = torch.randn(1, length, HEADS, DIM, generator=generator).bfloat16()
    kernels = {
        "sdpa": lambda: F.scaled_dot_product_attention(query, key, value, is_causal=True,
                                                       enable_gqa=True).transpose(1, 2),
        "native": lambda: flash_attention(query, key, value, causal=True),
    }
    figures: dict[str, dict[str, list[float]]] = {name: {"forward_ms": [], "backward_ms": []} for name in kernels}
    for round_ in range(repeats + 1):
        for name, kernel in kernels.items():
            start = time.perf_counter()
            output = kernel()
            middle = time.perf_counter()
            output.backward(grad)
            end = time.perf_counter()
            for tensor in (query, key, value):
                tensor.grad = None
            if round_:
                figures[name]["forward_ms"].append(1000 * (middle - start))
                figures[name]["backward_ms"].append(1000 * (end - middle))
    return {name: {part: statistics.median(values) for part, values in row.items()} for name, row in figures.items()}


def prefill_layer(rows: int, new: int, cached: int, repeats: int) -> dict[str, float]:
    """Forward ms of one layer's attention for a padded prefill of ``new`` tokens behind ``cached`` positions."""
    generator = torch.Generator().manual_seed(1)
    keys = cached + new
    query = torch.randn(rows, new, HEADS, DIM, generator=generator).bfloat16().transpose(1, 2)
    key, value = (torch.randn(rows, keys, KV_HEADS, DIM, generator=generator).bfloat16().transpose(1, 2)
                  for _ in range(2))
    mask = torch.ones(new, keys, dtype=torch.bool).tril(cached).expand(rows, 1, new, keys).clone()
    for row in range(rows):  # ragged left padding, as rows of different lengths get
        mask[row, :, :, : (row * cached) // (2 * rows)] = False
    module, scale = _module(), DIM ** -0.5
    with torch.no_grad():
        return median_ms({
            "sdpa": lambda: sdpa_attention_forward(module, query, key, value, mask, scaling=scale),
            "native": lambda: flash_attention(query, key, value, mask, scaling=scale),
        }, repeats)


def learner_pass(model_name: str, length: int, repeats: int) -> dict[str, Any]:
    """Seconds of a LoRA learner pass with each kernel and each bf16 gradient's relative error to float32's."""
    model, _ = llm_precision.load(model_name)
    model.train()
    data = llm_precision.batch(model.get_input_embeddings().weight.shape[0], 1, length, 0.25)

    def gradient() -> torch.Tensor:
        return torch.cat([p.grad.float().flatten() for p in model.parameters() if p.grad is not None])

    cast_for_training(model, torch.float32)
    llm_precision.step(model, torch.float32, *data)
    exact = gradient()
    cast_for_training(model, torch.bfloat16)
    figures: dict[str, Any] = {}
    seconds: dict[str, list[float]] = {"sdpa": [], "native": []}
    for round_ in range(repeats + 1):
        for name, times in seconds.items():
            use_fast_decode_attention(model, "flash" if name == "sdpa" else "native")
            elapsed, loss = llm_precision.step(model, torch.bfloat16, *data)
            if round_:
                times.append(elapsed)
            else:
                error = float((gradient() - exact).norm() / exact.norm())
                figures[name] = {"loss": loss, "gradient_error": error}
    for name, values in seconds.items():
        figures[name] |= {"seconds": statistics.median(values), "tokens_per_s": length / statistics.median(values)}
    return figures


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], parents=[results_parser()])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 3072], help="training pass lengths")
    parser.add_argument("--prefill", type=int, nargs=3, default=[16, 128, 3000], metavar=("ROWS", "NEW", "CACHED"))
    parser.add_argument("--model", default="smollm2-135m", help="the learner pass's model ('tiny' or a name)")
    parser.add_argument("--learner-length", type=int, default=3072)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    if args.quick:
        args.lengths, args.prefill, args.model, args.learner_length, args.repeats = [96], [2, 8, 40], "tiny", 64, 1
    return args


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    args = parse_args(argv)
    if native_kernel("flash_attention") is None:
        print("the native flash attention could not be built here: nothing to compare")
        return None
    if not model_ready(args):
        return None
    results: dict[str, Any] = {
        "what": "bf16 many-token attention: sdpa vs the native flash attention (ms per layer; learner pass s)",
        "quick": args.quick, "threads": args.threads, "load_average_before": os.getloadavg()[0],
        "native_is_used_here": native_flash_attention_is_faster(),
        "training": {}, "settings": {k: getattr(args, k) for k in ("lengths", "prefill", "model", "learner_length",
                                                                   "repeats")},
    }
    for length in args.lengths:
        row = training_layer(length, args.repeats)
        results["training"][str(length)] = row
        total = {name: figures["forward_ms"] + figures["backward_ms"] for name, figures in row.items()}
        print(f"training, {length} tokens: " + ", ".join(
            f"{name} {figures['forward_ms']:.1f} + {figures['backward_ms']:.1f} ms" for name, figures in row.items())
              + f" ({total['sdpa'] / total['native']:.2f}x)")
    prefill = prefill_layer(*args.prefill, args.repeats)
    results["prefill"] = prefill
    print(f"prefill {args.prefill}: sdpa {prefill['sdpa']:.1f} ms, native {prefill['native']:.1f} ms "
          f"({prefill['sdpa'] / prefill['native']:.2f}x)")
    learner = learner_pass(args.model, args.learner_length, args.repeats)
    results["learner"] = learner
    print(f"learner pass, {args.learner_length} tokens: sdpa {learner['sdpa']['seconds']:.2f} s, native "
          f"{learner['native']['seconds']:.2f} s ({learner['sdpa']['seconds'] / learner['native']['seconds']:.2f}x); "
          f"gradient error to float32: sdpa {learner['sdpa']['gradient_error']:.4f}, "
          f"native {learner['native']['gradient_error']:.4f}")
    results["load_average_after"] = os.getloadavg()[0]
    name = "flash_attention" + ("" if args.model == "tiny" else "_" + args.model.split("-")[0])
    write_json(results_dir(args) / f"{name}.json", results, indent=2)
    return results


if __name__ == "__main__":
    main()
