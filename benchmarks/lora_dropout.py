"""What LoRA dropout costs a policy-gradient learner: the seconds of a learner pass with and without it, and how
far it moves the PPO ratio before any update.

The model gets an all-linear rank-16 LoRA, its adapters randomly initialised (``B`` too, so the adapters change
the logits as a trained one does). Then, in bf16 with the kernels the engine picks on this CPU:

- **time**: forward + backward of ``score_tokens`` over ``--length`` random tokens with PEFT's dropout on the
  adapters' inputs (``--dropout``) and without (its ``Identity``), alternating round by round (medians after a
  warm-up);
- **ratio**: the trainer scores the old logprobs in eval mode (no dropout) and trains in train mode, so with
  dropout the ratio ``exp(new - old)`` of the first minibatch is not 1 even though no weight has moved. Reported
  over the pass's trained tokens: the standard deviation of the log ratio and the share of tokens whose ratio
  leaves ``[1 - clip, 1 + clip]``, with dropout and without.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/lora_dropout.py            # SmolLM2-135M
    OMP_WAIT_POLICY=PASSIVE python benchmarks/lora_dropout.py --quick    # the tiny model, seconds

Writes ``lora_dropout.json`` (``lora_dropout_<model>.json`` for a named model) to ``benchmarks/results/``
(``--results-dir``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
from peft.tuners.lora import LoraLayer

from worldgym.agents.llm.engines.decode_attention import use_fast_decode_attention
from worldgym.agents.llm.engines.flash_attention import native_flash_attention_is_faster
from worldgym.agents.llm.scoring import score_tokens
from worldgym.precision import autocast, cast_for_training

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: find the benchmarks package
from benchmarks import llm_precision
from benchmarks.common import model_ready, results_dir, results_parser, write_json


def set_lora_dropout(model: torch.nn.Module, p: float) -> None:
    """Every LoRA layer's input dropout: ``nn.Dropout(p)``, or PEFT's ``Identity`` for ``p == 0``."""
    for module in model.modules():
        if isinstance(module, LoraLayer):
            for name in module.lora_dropout:
                module.lora_dropout[name] = torch.nn.Dropout(p) if p > 0 else torch.nn.Identity()


def randomise_adapters(model: torch.nn.Module, seed: int) -> None:
    """Give every LoRA ``B`` random values (PEFT starts it at 0, where the adapters change nothing)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.01)


def bf16_learner(model_name: str) -> torch.nn.Module:
    """The model with an all-linear rank-16 LoRA (:func:`llm_precision.load`), its adapters randomised, frozen
    weights in bf16 and the CPU's faster many-token attention, as a bf16 learner runs it."""
    model, _ = llm_precision.load(model_name)
    randomise_adapters(model, 0)
    cast_for_training(model, torch.bfloat16)
    if native_flash_attention_is_faster():
        use_fast_decode_attention(model, "native")
    return model


@torch.no_grad()
def trained_logprobs(model: torch.nn.Module, data: tuple[torch.Tensor, ...], train: bool) -> torch.Tensor:
    """The logprobs of the pass's trained tokens, the model in train (dropout on) or eval mode."""
    ids, attention, mask = data
    model.train(train)
    with autocast(torch.bfloat16, "cpu"):
        scored = score_tokens(model, ids, attention, mask)
    return scored.logprobs.float()[mask.bool()]


def ratio_noise(old: torch.Tensor, new: torch.Tensor, clip: float) -> dict[str, float]:
    """The log ratio's standard deviation and the share of tokens whose ratio leaves ``[1 - clip, 1 + clip]``."""
    log_ratio = new - old
    ratio = log_ratio.exp()
    return {"log_ratio_std": float(log_ratio.std()), "log_ratio_max": float(log_ratio.abs().max()),
            "outside_clip": float(((ratio < 1 - clip) | (ratio > 1 + clip)).float().mean())}


def measure(model_name: str, length: int, p: float, repeats: int, clip: float) -> dict[str, Any]:
    """Seconds per learner pass with and without dropout ``p``, and each one's ratio noise."""
    model = bf16_learner(model_name)
    data = llm_precision.batch(model.get_input_embeddings().weight.shape[0], 1, length, 0.25)
    variants = {"dropout": p, "no_dropout": 0.0}
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    for round_ in range(repeats + 1):
        for name, rate in variants.items():
            set_lora_dropout(model, rate)
            model.train()
            elapsed, _ = llm_precision.step(model, torch.bfloat16, *data)
            if round_:  # round 0 warms up
                seconds[name].append(elapsed)
    torch.manual_seed(0)
    figures: dict[str, Any] = {}
    for name, rate in variants.items():
        set_lora_dropout(model, rate)
        old = trained_logprobs(model, data, train=False)
        figures[name] = {"p": rate, "seconds": statistics.median(seconds[name]),
                         **ratio_noise(old, trained_logprobs(model, data, train=True), clip)}
    figures["speedup"] = figures["dropout"]["seconds"] / figures["no_dropout"]["seconds"]
    return figures


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], parents=[results_parser()])
    parser.add_argument("--model", default="smollm2-135m", help="'tiny' or a model name")
    parser.add_argument("--length", type=int, default=3072, help="tokens per learner pass")
    parser.add_argument("--dropout", type=float, default=0.05, help="the dropout compared with none")
    parser.add_argument("--clip", type=float, default=0.2, help="the PPO clip range the ratio is held to")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    if args.quick:
        args.model, args.length, args.repeats = "tiny", 64, 1
    return args


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    args = parse_args(argv)
    if not model_ready(args):
        return None
    results: dict[str, Any] = {
        "what": "a bf16 LoRA learner pass (forward + backward) with and without dropout on the adapters' inputs, "
                "and the PPO ratio's movement before any update (old logprobs in eval mode, new in train mode)",
        "quick": args.quick, "threads": args.threads, "load_average_before": os.getloadavg()[0],
        "settings": {k: getattr(args, k) for k in ("model", "length", "dropout", "clip", "repeats")},
    }
    results |= measure(args.model, args.length, args.dropout, args.repeats, args.clip)
    results["load_average_after"] = os.getloadavg()[0]
    on, off = results["dropout"], results["no_dropout"]
    print(f"learner pass, {args.length} tokens: dropout {args.dropout:g} {on['seconds']:.2f} s, none "
          f"{off['seconds']:.2f} s ({results['speedup']:.2f}x); log-ratio std before any update: "
          f"{on['log_ratio_std']:.4f} vs {off['log_ratio_std']:.4f}, outside the clip: "
          f"{on['outside_clip']:.2%} vs {off['outside_clip']:.2%}")
    name = "lora_dropout" + ("" if args.model == "tiny" else "_" + args.model.split("-")[0])
    write_json(results_dir(args) / f"{name}.json", results, indent=2)
    return results


if __name__ == "__main__":
    main()
