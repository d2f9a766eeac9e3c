"""What drawing the next tokens costs: ``torch.multinomial`` (``generate(do_sample=True)``'s draw) against the
engine's inverse transform sampling (:class:`~worldgym.agents.llm.engines.sampling.DrawNextToken`), for a
batch of rows over a vocabulary, and whether both draw from the same distribution.

- **time**: one draw of ``--rows`` tokens from softmax probabilities over ``--vocab`` tokens (SmolLM2's 49,152 by
  default) at temperature 0.5, each sampler's whole step from the warped scores to the token, alternating round
  by round (medians);
- **distribution**: ``--draws`` draws of each sampler from one 8-token distribution with a zero-probability
  token, the largest gap between a token's observed frequency and its probability, and whether the
  zero-probability token was ever drawn.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/token_sampling.py
    OMP_WAIT_POLICY=PASSIVE python benchmarks/token_sampling.py --quick    # seconds

Writes ``token_sampling.json`` to ``benchmarks/results/`` (``--results-dir``).
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

from worldgym.agents.llm.engines.sampling import DrawNextToken

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: find the benchmarks package
from benchmarks.common import results_dir, results_parser, write_json

Sampler = Callable[[torch.Tensor], torch.Tensor]  # warped scores [rows, vocab] -> token ids [rows]


def multinomial(scores: torch.Tensor) -> torch.Tensor:
    """``generate(do_sample=True)``'s draw: softmax, then ``torch.multinomial``."""
    return torch.multinomial(torch.softmax(scores, dim=-1), num_samples=1).squeeze(1)


def inverse_cdf(scores: torch.Tensor) -> torch.Tensor:
    """The engine's draw: :class:`DrawNextToken`, then the greedy choice ``generate`` makes."""
    return DrawNextToken()(torch.empty(0, dtype=torch.long), scores).argmax(dim=-1)


SAMPLERS: dict[str, Sampler] = {"multinomial": multinomial, "inverse_cdf": inverse_cdf}


def time_draws(rows: int, vocab: int, repeats: int) -> dict[str, Any]:
    """Median milliseconds per draw of each sampler, alternating; the seconds ratio."""
    scores = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(0)) * 3 / 0.5
    milliseconds: dict[str, list[float]] = {name: [] for name in SAMPLERS}
    for round_ in range(repeats + 1):
        for name, sampler in SAMPLERS.items():
            start = time.perf_counter()
            sampler(scores)
            if round_:  # round 0 warms up
                milliseconds[name].append((time.perf_counter() - start) * 1e3)
    figures: dict[str, Any] = {name: {"ms": statistics.median(values)} for name, values in milliseconds.items()}
    figures["speedup"] = figures["multinomial"]["ms"] / figures["inverse_cdf"]["ms"]
    return figures


def distribution(draws: int) -> dict[str, Any]:
    """Each sampler's largest frequency gap from the true probabilities, and its draws of a zero-probability
    token, over ``draws`` rows of one 8-token distribution."""
    probs = torch.tensor([0.3, 0.2, 0.15, 0.0, 0.12, 0.1, 0.08, 0.05])
    scores = probs.log().expand(draws, -1).contiguous()
    torch.manual_seed(0)
    result: dict[str, Any] = {"probabilities": probs.tolist(), "draws": draws}
    for name, sampler in SAMPLERS.items():
        frequencies = torch.bincount(sampler(scores), minlength=len(probs)).double() / draws
        result[name] = {"max_frequency_gap": float((frequencies - probs.double()).abs().max()),
                        "zero_probability_draws": int(frequencies[3] * draws)}
    return result


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], parents=[results_parser()])
    parser.add_argument("--rows", type=int, nargs="+", default=[16, 32], help="rows drawn at once")
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--draws", type=int, default=200_000)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.vocab, args.repeats, args.draws = [4], 1024, 3, 20_000
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    results: dict[str, Any] = {
        "what": "one draw of the next tokens: torch.multinomial against the engine's inverse transform sampling",
        "quick": args.quick, "threads": args.threads, "load_average_before": os.getloadavg()[0],
        "settings": {"vocab": args.vocab, "repeats": args.repeats},
        "time": {str(rows): time_draws(rows, args.vocab, args.repeats) for rows in args.rows},
        "distribution": distribution(args.draws),
        "load_average_after": os.getloadavg()[0],
    }
    for rows, figures in results["time"].items():
        print(f"{rows} rows x {args.vocab} tokens: multinomial {figures['multinomial']['ms']:.2f} ms, inverse CDF "
              f"{figures['inverse_cdf']['ms']:.2f} ms ({figures['speedup']:.1f}x)")
    for name in SAMPLERS:
        gap = results["distribution"][name]
        print(f"{name}: largest frequency gap {gap['max_frequency_gap']:.4f} over {args.draws} draws, "
              f"{gap['zero_probability_draws']} draws of the zero-probability token")
    write_json(results_dir(args) / "token_sampling.json", results, indent=2)
    return results


if __name__ == "__main__":
    main()
