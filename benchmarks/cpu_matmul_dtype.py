"""float32 vs bfloat16 matrix products on this CPU, one thread: what ``dtype="auto"`` decides on.

Two shapes, each timed in float32 and bfloat16 in turn (``--repeats`` rounds, the median kept): a 1024x1024
matmul, and ``nn.Linear(576, 1536)`` on 2,048 tokens (a SmolLM2 MLP projection over a long prompt). GFLOP/s
and the bf16/float32 ratio are reported for each.

Every CPU kind gets its own entry in ``cpu_matmul_dtype.json`` (``"machines"``, keyed by
:func:`worldgym.machine.machine_kind`: ``amx``, ``avx512-bf16``, ``avx2``, ...), each with the machine it was
measured on; a run on another kind of CPU adds its entry and keeps the others. ``--cap-isa AVX2`` runs the
measurement with torch's and oneDNN's kernels capped to that instruction set (``ATEN_CPU_CAPABILITY``,
``ONEDNN_MAX_CPU_ISA``, ``MKL_ENABLE_INSTRUCTIONS``): a stand-in for a CPU without native bf16, labelled
``capped to AVX2``, never for a real one.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/cpu_matmul_dtype.py
    OMP_WAIT_POLICY=PASSIVE python benchmarks/cpu_matmul_dtype.py --cap-isa AVX2
    python benchmarks/cpu_matmul_dtype.py --quick     # small shapes, one round: checks the script
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from worldgym.machine import machine_info, machine_kind

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: find the benchmarks package
from benchmarks.common import results_dir, results_parser, write_json

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
# torch's, oneDNN's and MKL's names for an instruction-set cap
_CAP_VARIABLES = {"ATEN_CPU_CAPABILITY": str.lower, "ONEDNN_MAX_CPU_ISA": str.upper,
                  "MKL_ENABLE_INSTRUCTIONS": str.upper}


def _timed(run: Callable[[], torch.Tensor]) -> float:
    run()  # warm-up: kernel selection, first-touch allocation
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def shapes(quick: bool) -> dict[str, tuple[Callable[[torch.dtype], Callable[[], torch.Tensor]], float]]:
    """Per shape: a builder (dtype -> a call to time) and the call's floating-point operations."""
    n, tokens = (128, 64) if quick else (1024, 2048)
    generator = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=generator), torch.randn(n, n, generator=generator)
    layer, x = torch.nn.Linear(576, 1536), torch.randn(tokens, 576, generator=generator)

    def matmul(dtype: torch.dtype) -> Callable[[], torch.Tensor]:
        left, right = a.to(dtype), b.to(dtype)
        return lambda: left @ right

    def linear(dtype: torch.dtype) -> Callable[[], torch.Tensor]:
        weight, bias, inputs = layer.weight.detach().to(dtype), layer.bias.detach().to(dtype), x.to(dtype)
        return lambda: torch.nn.functional.linear(inputs, weight, bias)

    return {f"matmul_{n}": (matmul, 2 * n**3), f"linear_576x1536_{tokens}_tokens": (linear, 2 * tokens * 576 * 1536)}


def measure(repeats: int, quick: bool) -> dict[str, Any]:
    """GFLOP/s per shape and dtype (median of ``repeats`` interleaved rounds) and the bf16/float32 ratio."""
    figures: dict[str, Any] = {}
    for shape, (build, flops) in shapes(quick).items():
        calls = {name: build(dtype) for name, dtype in DTYPES.items()}
        seconds: dict[str, list[float]] = {name: [] for name in DTYPES}
        for _ in range(repeats):
            for name, call in calls.items():
                seconds[name].append(_timed(call))
        gflops = {name: flops / statistics.median(times) / 1e9 for name, times in seconds.items()}
        figures[shape] = {"gflops": gflops, "bf16_vs_float32": gflops["bfloat16"] / gflops["float32"]}
        print(f"{shape}: float32 {gflops['float32']:.1f} GFLOP/s, bfloat16 {gflops['bfloat16']:.1f} GFLOP/s "
              f"(bf16 {figures[shape]['bf16_vs_float32']:.2f}x float32)")
    return figures


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], parents=[results_parser()])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cap-isa", help="cap torch's kernels to this instruction set (e.g. AVX2) for the run")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats = 1
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.cap_isa and os.environ.get("ATEN_CPU_CAPABILITY") is None:  # caps take effect at start: run again
        env = os.environ | {name: spell(args.cap_isa) for name, spell in _CAP_VARIABLES.items()}
        subprocess.run([sys.executable, __file__, *(sys.argv[1:] if argv is None else argv)], env=env, check=True)
        return json.loads((results_dir(args) / "cpu_matmul_dtype.json").read_text())
    torch.set_num_threads(1)
    machine = machine_info()
    entry = {"machine": machine, "threads": 1, "repeats": args.repeats, "quick": args.quick,
             "shapes": measure(args.repeats, args.quick)}
    path = results_dir(args) / "cpu_matmul_dtype.json"
    results = json.loads(path.read_text()) if path.is_file() else {}
    results["machines"] = {**results.get("machines", {}), machine_kind(machine): entry}
    results["quick"] = any(item["quick"] for item in results["machines"].values())
    write_json(path, results, indent=2)
    return results


if __name__ == "__main__":
    main()
