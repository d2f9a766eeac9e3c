"""Process memory of a long-context backward on CPU: glibc's default malloc vs large blocks mapped on their own.

The workload is the dual-LoRA world model's training loss: ``--calls`` phone-call examples of ``--tokens`` random
tokens (the last 60 the reply), scored one call per forward with activation checkpointing, LoRA (r16, all linear
layers, dropout 0.05) on the model, then one backward. Each measurement is a fresh process, so its peak resident
size (``ru_maxrss``) belongs to that run alone; the two settings alternate ``--repeats`` times:

- ``default``: malloc as the process starts (its mmap threshold rises after each large free, up to 32 MB);
- ``mapped``: :func:`worldgym.agents.llm.allocator.map_large_allocations` (1 MB), what the trainers do on CPU
  with ``cpu_mmap_threshold`` set (the SmolLM2 CSR preset sets it).

Reported: peak resident size above the process after loading the model, seconds, and the loss (the same in
both: the allocator changes where tensors live, not what they hold).

    OMP_WAIT_POLICY=PASSIVE python benchmarks/cpu_allocator_memory.py              # SmolLM2 (`make smollm2`)
    python benchmarks/cpu_allocator_memory.py --quick                              # a tiny model, seconds

Writes ``cpu_allocator_memory.json`` to ``benchmarks/results/`` (``--results-dir``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: find the benchmarks package
from benchmarks.common import results_dir, results_parser, write_json

MODES = ("default", "mapped")
REPLY_TOKENS = 60


def _peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # kB on Linux


def child(mode: str, model_name: str, calls: int, tokens: int) -> dict[str, Any]:
    """One measurement in this (fresh) process."""
    import torch
    from peft import LoraConfig, get_peft_model

    from worldgym.agents.dual_lora.world_model import PhoneCallExample, score_in_chunks
    from worldgym.agents.llm.allocator import map_large_allocations

    if mode == "mapped" and not map_large_allocations():
        raise SystemExit("map_large_allocations is not available here (needs glibc on Linux)")
    torch.set_num_threads(int(os.environ.get("WORLDGYM_THREADS", "1")))
    if model_name == "tiny":
        from worldgym.agents.llm import tiny_chat_model

        chat = tiny_chat_model([f"call {i} then {i * 7}" for i in range(50)], vocab_size=400)
    else:
        from worldgym.agents.llm.pretrained import load_chat_model

        chat = load_chat_model(model_name)
    model, tokenizer = chat.model, chat.tokenizer
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", lora_dropout=0.05))
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    generator = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    examples = [PhoneCallExample(tuple(torch.randint(10, vocab, (tokens,), generator=generator).tolist()),
                                 tokens - REPLY_TOKENS, "random") for _ in range(calls)]
    loaded = _peak_gb()
    torch.manual_seed(0)  # dropout
    start = time.perf_counter()
    loss = score_in_chunks(model, examples, tokenizer.pad_token_id, chunk_size=1).loss.mean()
    loss.backward()
    return {"mode": mode, "seconds": time.perf_counter() - start, "loaded_gb": loaded,
            "peak_above_loaded_gb": _peak_gb() - loaded, "loss": loss.item()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     parents=[results_parser()])
    parser.add_argument("--model", default="smollm2-135m", help="smollm2-135m, another load_chat_model name, or tiny")
    parser.add_argument("--calls", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=1000, help="tokens per call")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.model, args.calls, args.tokens, args.repeats = "tiny", 2, 96, 1
    if args.child:
        print(json.dumps(child(args.child, args.model, args.calls, args.tokens)))
        return
    load_average = os.getloadavg()[0]
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    for _ in range(args.repeats):  # alternated, so load changes hit both alike
        for mode in MODES:
            command = [sys.executable, __file__, "--child", mode, "--model", args.model, "--calls", str(args.calls),
                       "--tokens", str(args.tokens)]
            out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            row = json.loads(out.strip().splitlines()[-1])
            runs[mode].append(row)
            print(f"{mode:8s} peak {row['peak_above_loaded_gb']:.2f} GB above the loaded model, "
                  f"{row['seconds']:.0f} s, loss {row['loss']:.4f}")
    median = {mode: {key: statistics.median(r[key] for r in rows) for key in ("peak_above_loaded_gb", "seconds")}
              for mode, rows in runs.items()}
    payload = {
        "model": args.model, "calls": args.calls, "tokens": args.tokens, "repeats": args.repeats,
        "threads": int(os.environ.get("WORLDGYM_THREADS", "1")), "load_average_before": load_average,
        "quick": args.quick, "runs": runs, "median": median,
        "peak_ratio_default_to_mapped": median["default"]["peak_above_loaded_gb"]
        / max(median["mapped"]["peak_above_loaded_gb"], 1e-9),
        "same_loss": len({r["loss"] for rows in runs.values() for r in rows}) == 1,
        "command": f"python benchmarks/cpu_allocator_memory.py --model {args.model} --calls {args.calls} "
                   f"--tokens {args.tokens} --repeats {args.repeats}" + (" --quick" if args.quick else ""),
    }
    path = write_json(results_dir(args) / "cpu_allocator_memory.json", payload)
    print(f"peak above the loaded model: default {median['default']['peak_above_loaded_gb']:.2f} GB, mapped "
          f"{median['mapped']['peak_above_loaded_gb']:.2f} GB; wrote {path}")


if __name__ == "__main__":
    main()
