"""Greedy decoding behind a long KV cache: transformers' ``DynamicCache`` (appends by ``torch.cat``, copying the
whole cache at every token) vs the engine's ``GrowingCache`` (appends in place into spare room).

For each cache length, ``--batch`` rows decode ``--new-tokens`` tokens greedily behind the same cached keys and
values (the KV of random tokens, as a multi-turn rollout's stored conversation), alternating the two caches
``--repeats`` times. Reported per length: seconds of each (every repeat, and the median), the speed-up
(concatenating / growing, pair by pair) and whether both produced the same tokens.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/kv_cache_growth.py            # SmolLM2-135M (`make smollm2`)
    OMP_WAIT_POLICY=PASSIVE python benchmarks/kv_cache_growth.py --quick    # a tiny model, seconds

Writes ``kv_cache_growth.json`` to ``benchmarks/results/`` (``--results-dir``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from transformers import DynamicCache, PreTrainedModel

from worldgym.agents.llm.cache_argument import cache_argument, returned_cache
from worldgym.agents.llm.engines.growing_cache import growing_cache

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: find the benchmarks package
from benchmarks.common import results_dir, results_parser, set_torch_threads, write_json


def load_model(name: str) -> PreTrainedModel:
    if name == "tiny":
        from worldgym.agents.llm import tiny_chat_model

        return tiny_chat_model([f"the number {i} and {i * 7}" for i in range(50)], vocab_size=400).model
    from worldgym.agents.llm.pretrained import load_chat_model

    return load_chat_model(name).model


def decode(model: PreTrainedModel, cached: DynamicCache, next_ids: torch.Tensor, new_tokens: int,
           grow: bool) -> tuple[float, torch.Tensor]:
    """Seconds to decode ``new_tokens`` greedily behind a copy of ``cached``, and the tokens."""
    cache = DynamicCache(ddp_cache_data=[(layer.keys.clone(), layer.values.clone()) for layer in cached.layers])
    if grow:
        cache = growing_cache(cache, new_tokens + 1, model.config)
    length = cached.get_seq_length()
    prompt = torch.cat([torch.zeros(len(next_ids), length, dtype=torch.long), next_ids], 1)  # cached columns
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), **cache_argument(cache),
                             max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                             pad_token_id=0)
    return time.perf_counter() - start, out[:, length + 1:]


def measure(model: PreTrainedModel, length: int, batch: int, new_tokens: int, repeats: int) -> dict[str, Any]:
    vocab = model.config.vocab_size
    generator = torch.Generator().manual_seed(length)
    ids = torch.randint(10, vocab, (batch, length), generator=generator)
    next_ids = torch.randint(10, vocab, (batch, 1), generator=generator)
    with torch.no_grad():
        cached = returned_cache(model(ids, use_cache=True, logits_to_keep=1))  # (all logits: 9 GB at 16 x 3k)
    seconds: dict[str, list[float]] = {"concatenating": [], "growing": []}
    tokens: list[torch.Tensor] = []
    for _ in range(repeats):  # alternated, so load changes hit both alike
        for name, times in seconds.items():
            elapsed, out = decode(model, cached, next_ids, new_tokens, grow=name == "growing")
            times.append(elapsed)
            tokens.append(out)
    ratios = [c / g for c, g in zip(seconds["concatenating"], seconds["growing"])]
    row = {"cached_tokens": length, "seconds": seconds,
           "median_s": {name: statistics.median(values) for name, values in seconds.items()},
           "speedup": ratios, "speedup_median": statistics.median(ratios),
           "same_tokens": all(torch.equal(tokens[0], t) for t in tokens)}
    print(f"{length} cached tokens: concatenating {row['median_s']['concatenating']:.2f}s, growing "
          f"{row['median_s']['growing']:.2f}s ({row['speedup_median']:.2f}x), same tokens {row['same_tokens']}")
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     parents=[results_parser()])
    parser.add_argument("--model", default="smollm2-135m",
                        help="smollm2-135m, another load_chat_model name, or tiny (--quick's)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[1000, 3000], help="cached tokens")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    if args.quick:
        args.model, args.lengths, args.batch, args.new_tokens, args.repeats = "tiny", [64], 2, 8, 1
    set_torch_threads(1)
    load_average = os.getloadavg()[0]
    model = load_model(args.model).eval()
    rows = [measure(model, length, args.batch, args.new_tokens, args.repeats) for length in args.lengths]
    write_json(results_dir(args) / "kv_cache_growth.json", {
        "model": args.model, "batch": args.batch, "new_tokens": args.new_tokens, "repeats": args.repeats,
        "threads": torch.get_num_threads(), "load_average_before": load_average, "quick": args.quick,
        "runs": rows,
        "command": f"python benchmarks/kv_cache_growth.py --model {args.model} --lengths "
                   + " ".join(map(str, args.lengths)) + f" --batch {args.batch} --new-tokens {args.new_tokens} "
                   f"--repeats {args.repeats}" + (" --quick" if args.quick else "")})
    print(f"wrote {results_dir(args) / 'kv_cache_growth.json'}")


if __name__ == "__main__":
    main()
