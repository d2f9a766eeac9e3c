"""Process memory and time of long-context backwards on CPU under three malloc settings.

Two workloads (``--workload``):

- ``world-model`` (the default): the dual-LoRA world model's training loss, ``--calls`` phone-call examples of
  ``--tokens`` random tokens (the last 60 the reply), scored one call per forward with activation checkpointing,
  LoRA (r16, all linear layers, dropout 0.05) on the model in float32, then one backward;
- ``learner``: the policy's bf16 learner passes (``score_tokens`` forward + backward, rank-16 LoRA on every linear
  layer, no dropout, the CPU's fastest attention kernel) over episodes of the ``--lengths`` given, one per pass,
  activations recomputed for those of at least 4,096 tokens, as the SmolLM2 CSR preset's update runs them.

Each measurement is a fresh process, so its peak resident size (``ru_maxrss``) belongs to that run alone; the
settings alternate ``--repeats`` times:

- ``default``: malloc as the process starts (its mmap threshold rises after each large free, up to 32 MB);
- ``mapped``: :func:`worldgym.agents.llm.allocator.map_large_allocations` (1 MB), what the trainers do on CPU
  with ``cpu_mmap_threshold`` set;
- ``released``: malloc as it starts, and :func:`worldgym.agents.llm.allocator.release_free_heap` after every
  pass (the learner workload; the world model's is one pass), what the trainers do with ``cpu_release_heap``.

Reported: peak resident size above the process after loading the model, seconds, the resident size after each
pass, and the loss (the same in all: the allocator changes where tensors live, not what they hold).

    OMP_WAIT_POLICY=PASSIVE python benchmarks/cpu_allocator_memory.py              # SmolLM2 (`make smollm2`)
    OMP_WAIT_POLICY=PASSIVE python benchmarks/cpu_allocator_memory.py --workload learner
    python benchmarks/cpu_allocator_memory.py --quick                              # a tiny model, seconds

Writes ``cpu_allocator_memory.json`` (``cpu_allocator_memory_learner.json``) to ``benchmarks/results/``
(``--results-dir``).
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

MODES = {"world-model": ("default", "mapped"), "learner": ("default", "mapped", "released")}
REPLY_TOKENS = 60
CHECKPOINTING_MIN_TOKENS = 4096  # the SmolLM2 CSR preset's checkpointing_min_tokens


def _peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # kB on Linux


def _resident_gb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e9


def learner_child(mode: str, model_name: str, lengths: list[int]) -> dict[str, Any]:
    """One learner measurement in this (fresh) process."""
    import torch

    from benchmarks import llm_precision
    from benchmarks.lora_dropout import bf16_learner
    from worldgym.agents.llm.allocator import map_large_allocations, release_free_heap

    if mode == "mapped" and not map_large_allocations():
        raise SystemExit("map_large_allocations is not available here (needs glibc on Linux)")
    torch.set_num_threads(int(os.environ.get("WORLDGYM_THREADS", "1")))
    model = bf16_learner(model_name).train()
    vocab = model.get_input_embeddings().weight.shape[0]
    loaded = _peak_gb()
    seconds, losses, resident = 0.0, [], []
    for length in lengths:
        if length >= CHECKPOINTING_MIN_TOKENS:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_disable()
        elapsed, loss = llm_precision.step(model, torch.bfloat16, *llm_precision.batch(vocab, 1, length, 0.25))
        if mode == "released" and not release_free_heap():
            raise SystemExit("release_free_heap is not available here (needs glibc on Linux)")
        seconds += elapsed
        losses.append(loss)
        resident.append(_resident_gb())
    return {"mode": mode, "seconds": seconds, "loaded_gb": loaded, "peak_above_loaded_gb": _peak_gb() - loaded,
            "resident_gb_after_each": resident, "loss": float(sum(losses))}


def child(mode: str, model_name: str, calls: int, tokens: int) -> dict[str, Any]:
    """One world-model measurement in this (fresh) process."""
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
    parser.add_argument("--workload", choices=tuple(MODES), default="world-model")
    parser.add_argument("--lengths", type=int, nargs="+", default=[2000, 3500, 5000, 8000, 3000, 6000],
                        help="the learner workload's episode lengths, one pass each")
    parser.add_argument("--child", choices=MODES["learner"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.model, args.calls, args.tokens, args.repeats, args.lengths = "tiny", 2, 96, 1, [64, 96]
    if args.child:
        row = (learner_child(args.child, args.model, args.lengths) if args.workload == "learner"
               else child(args.child, args.model, args.calls, args.tokens))
        print(json.dumps(row))
        return
    load_average = os.getloadavg()[0]
    modes = MODES[args.workload]
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    shape = (["--lengths", *map(str, args.lengths)] if args.workload == "learner"
             else ["--calls", str(args.calls), "--tokens", str(args.tokens)])
    for _ in range(args.repeats):  # alternated, so load changes hit each alike
        for mode in modes:
            command = [sys.executable, __file__, "--child", mode, "--model", args.model, "--workload", args.workload,
                       *shape]
            out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            row = json.loads(out.strip().splitlines()[-1])
            runs[mode].append(row)
            print(f"{mode:8s} peak {row['peak_above_loaded_gb']:.2f} GB above the loaded model, "
                  f"{row['seconds']:.0f} s, loss {row['loss']:.4f}")
    median = {mode: {key: statistics.median(r[key] for r in rows) for key in ("peak_above_loaded_gb", "seconds")}
              for mode, rows in runs.items()}
    payload = {
        "model": args.model, "workload": args.workload, "repeats": args.repeats,
        **({"lengths": args.lengths} if args.workload == "learner" else {"calls": args.calls, "tokens": args.tokens}),
        "threads": int(os.environ.get("WORLDGYM_THREADS", "1")), "load_average_before": load_average,
        "quick": args.quick, "runs": runs, "median": median,
        "peak_ratio_default_to_mapped": median["default"]["peak_above_loaded_gb"]
        / max(median["mapped"]["peak_above_loaded_gb"], 1e-9),
        "same_loss": len({r["loss"] for rows in runs.values() for r in rows}) == 1,
        "command": f"python benchmarks/cpu_allocator_memory.py --model {args.model} "
                   + (f"--workload learner --lengths {' '.join(map(str, args.lengths))} " if args.workload == "learner"
                      else f"--calls {args.calls} --tokens {args.tokens} ")
                   + f"--repeats {args.repeats}" + (" --quick" if args.quick else ""),
    }
    if "released" in median:
        payload["seconds_mapped_to_released"] = median["mapped"]["seconds"] / median["released"]["seconds"]
        payload["peak_ratio_default_to_released"] = (median["default"]["peak_above_loaded_gb"]
                                                     / max(median["released"]["peak_above_loaded_gb"], 1e-9))
    name = "cpu_allocator_memory" + ("_learner" if args.workload == "learner" else "")
    path = write_json(results_dir(args) / f"{name}.json", payload)
    print(f"peak above the loaded model: default {median['default']['peak_above_loaded_gb']:.2f} GB, mapped "
          f"{median['mapped']['peak_above_loaded_gb']:.2f} GB; wrote {path}")


if __name__ == "__main__":
    main()
