"""float32 vs bfloat16 for the LLM stack's learner: LoRA forward + backward of a causal LM, side by side.

The model is loaded once; the float32 figure is measured first, then its frozen weights are cast to bf16 in
place (:func:`worldgym.precision.cast_for_training`; LoRA stays float32) and the same batches are timed under
autocast, as ``GRPOTrainer``/``sft_train`` run them with ``dtype="bfloat16"``. Each figure is the median of
``--repeats`` timed passes after a warm-up; ``loss_gap`` is the relative difference of the two precisions'
losses on the same batch.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/llm_precision.py --model smollm2-135m --threads 1
    OMP_WAIT_POLICY=PASSIVE python benchmarks/llm_precision.py --quick      # tiny model, seconds

Writes ``llm_precision.json`` (``llm_precision_<model>.json`` for a model other than tiny) to
``benchmarks/results/`` (``--results-dir``). The default shape, 2 sequences of 3,072 tokens with the last
quarter trained, is a CSR difficulty-3 episode's (~3,000 tokens, the model's replies a minority of them).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, get_peft_model
from transformers import PreTrainedModel

from worldgym.agents.llm.scoring import score_tokens
from worldgym.precision import autocast, cast_for_training, cpu_supports_bf16

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: find the benchmarks package
from benchmarks.common import results_dir, results_parser, write_json


def load(name: str) -> tuple[PreTrainedModel, list[str]]:
    """The float32 model with an all-linear LoRA adapter (rank 16) and its vocabulary size."""
    if name == "tiny":
        from worldgym.agents.llm.models import model_from_config, tiny_model_config

        model = model_from_config(tiny_model_config(2000, "small", pad_token_id=0))
        targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    else:
        from worldgym.agents.llm.pretrained import load_chat_model

        chat = load_chat_model(name)
        model, targets = chat.model, list(chat.lora_target_modules)
    lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=targets, task_type="CAUSAL_LM")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return get_peft_model(model, lora), targets


def batch(vocab: int, rows: int, length: int, trained: float) -> tuple[torch.Tensor, ...]:
    """Random token ids ``[rows, length]`` (seeded), full attention, the last ``trained`` share as targets."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (rows, length), generator=generator)
    mask = torch.zeros(rows, length - 1)
    mask[:, int((length - 1) * (1 - trained)):] = 1
    return ids, torch.ones_like(ids), mask


def step(model: PreTrainedModel, dtype: torch.dtype, ids: torch.Tensor, attention: torch.Tensor,
         mask: torch.Tensor) -> tuple[float, float]:
    """One forward + backward of the trained tokens' mean negative logprob; (seconds, loss)."""
    model.zero_grad(set_to_none=True)
    start = time.perf_counter()
    with autocast(dtype, "cpu"):
        scored = score_tokens(model, ids, attention, mask)
    loss = -(scored.logprobs.sum() / mask.sum())
    loss.backward()
    return time.perf_counter() - start, loss.item()


def measure(model: PreTrainedModel, dtype: torch.dtype, data: tuple[torch.Tensor, ...], repeats: int
            ) -> dict[str, float]:
    step(model, dtype, *data)  # warm-up
    timed = [step(model, dtype, *data) for _ in range(repeats)]
    seconds = statistics.median(t for t, _ in timed)
    tokens = data[0].numel()
    return {"seconds": seconds, "tokens_per_s": tokens / seconds, "loss": timed[0][1],
            "all_seconds": [t for t, _ in timed]}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], parents=[results_parser()])
    parser.add_argument("--model", default="smollm2-135m", help="'tiny' or a name for load_chat_model")
    parser.add_argument("--rows", type=int, default=2)
    parser.add_argument("--length", type=int, default=3072)
    parser.add_argument("--trained", type=float, default=0.25, help="share of positions with a target")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args(argv)
    if args.quick:
        args.model, args.rows, args.length, args.repeats = "tiny", 2, 128, 1
    return args


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    args = parse_args(argv)
    if args.model != "tiny":
        from worldgym.agents.llm.pretrained import named_model_available

        if not named_model_available(args.model):
            print(f"skipped: {args.model} is not installed here (see worldgym.agents.llm.pretrained)")
            return None
    torch.set_num_threads(args.threads)
    model, _ = load(args.model)
    model.train()
    data = batch(model.get_input_embeddings().weight.shape[0], args.rows, args.length, args.trained)
    figures = {}
    for dtype in (torch.float32, torch.bfloat16):
        cast_for_training(model, dtype)
        figures[str(dtype).removeprefix("torch.")] = measure(model, dtype, data, args.repeats)
    speedup = figures["float32"]["seconds"] / figures["bfloat16"]["seconds"]
    loss_gap = abs(figures["bfloat16"]["loss"] - figures["float32"]["loss"]) / abs(figures["float32"]["loss"])
    print(f"{'dtype':>9} {'s/pass':>8} {'tokens/s':>9} {'loss':>8}")
    for name, row in figures.items():
        print(f"{name:>9} {row['seconds']:>8.2f} {row['tokens_per_s']:>9.0f} {row['loss']:>8.4f}")
    print(f"bf16 speed-up {speedup:.2f}x, relative loss gap {loss_gap:.1e}")
    results = {
        "what": "LoRA (r16, all linear layers) forward + backward through score_tokens, float32 vs bf16",
        "model": args.model, "quick": args.quick,
        "settings": {k: getattr(args, k) for k in ("rows", "length", "trained", "repeats", "threads")},
        "figures": figures, "bf16_speedup": speedup, "loss_gap": loss_gap,
        "cpu_native_bf16": cpu_supports_bf16(), "python": platform.python_version(), "torch": torch.__version__,
        "cpu_count": os.cpu_count(), "load_average": os.getloadavg()[0],
    }
    name = "llm_precision" + ("" if args.model == "tiny" else "_" + args.model.split("-")[0])
    write_json(results_dir(args) / f"{name}.json", results, indent=2)
    return results


if __name__ == "__main__":
    main()
