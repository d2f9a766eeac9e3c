"""One greedy decode step's attention at the SmolLM2 rollout shape: per-layer variants, then the whole model.

Per layer (a one-token query of 9 heads over 3 KV heads of 64 dims, behind ``positions`` cached tokens of
``rows`` rows), each variant reads the keys and values in place from :class:`GrowingLayer` views (strided
slices of a bigger buffer), cycling through a pool of caches larger than the last-level cache, so every call
reads its KV from memory as a real decode step does. Variants (``mask``: a left-padding mask; ``nomask``: none):

- ``hf_sdpa``: transformers' ``sdpa_attention_forward`` as the model calls it (``pack_gqa`` with a mask,
  ``enable_gqa`` without);
- ``sdpa_gqa``: ``F.scaled_dot_product_attention(..., enable_gqa=True)``;
- ``sdpa_folded``: the same with the query heads of a group folded into the query length (no ``enable_gqa``);
- ``matmul``: ``[B, H_kv, group, D] @ K^T``, softmax in float32, ``@ V``;
- ``matmul_contiguous``: the same on contiguous copies of K and V (the copy not timed);
- ``sdpa_contiguous``: ``hf_sdpa`` after copying K and V contiguous (the copy timed);
- ``compiled``: :func:`~worldgym.agents.llm.engines.decode_attention.compiled_decode_attention_forward`, the
  float32 reductions of ``grouped_decode_attention`` under ``torch.compile`` (skipped with ``--quick`` or
  ``--no-compile``);
- ``native``: :func:`~worldgym.agents.llm.engines.decode_attention.native_decode_attention_forward`, the C++
  kernel (one pass over the keys, one over the values; skipped with ``--no-native`` or where it cannot be built);
- ``fast``: :func:`~worldgym.agents.llm.engines.decode_attention.decode_attention_forward`;
- ``read``: summing K and V (as float32 words): the time to read the bytes, a floor for any kernel.

Then a whole decode step of the model (``rows`` rows behind a :class:`GrowingCache` of ``positions`` random
keys and values per layer) in float32 and bfloat16, with transformers' ``sdpa``, with
:func:`use_fast_decode_attention` (flash, compiled and native) and with no attention at all (``no_attention``: zeros,
what the rest of the step costs, the floor no attention kernel can go below), with and without padding, and its
linear layers alone (``linear_layers``: every projection and the LM head on ``rows`` one-token inputs, their
milliseconds and floating-point rate). Those, plus ``read`` per layer, bound a decode step from below
(``floor``). Timings are medians of ``--repeats`` rounds that alternate the variants, after a warm-up, on one
thread (``WORLDGYM_THREADS`` to change).

    OMP_WAIT_POLICY=PASSIVE python benchmarks/decode_attention.py           # SmolLM2-135M, 16 x 3000 and 16 x 1000
    OMP_WAIT_POLICY=PASSIVE python benchmarks/decode_attention.py --quick   # tiny shapes and model, seconds

Writes ``decode_attention.json`` to ``benchmarks/results/`` (``--results-dir``).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
import transformers
from transformers import AttentionInterface, DynamicCache, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

from worldgym.agents.llm.cache_argument import cache_argument
from worldgym.agents.llm.engines.decode_attention import (
    compiled_decode_attention_forward,
    decode_attention_forward,
    native_decode_attention_forward,
    use_fast_decode_attention,
)
from worldgym.agents.llm.engines.growing_cache import GrowingLayer, growing_cache
from worldgym.agents.llm.engines.native_kernel import native_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: find the benchmarks package
from benchmarks.common import results_dir, results_parser, set_torch_threads, write_json

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass
class Shape:
    """One layer's attention shape."""

    rows: int
    positions: int
    heads: int = 9
    kv_heads: int = 3
    head_dim: int = 64

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads


class _Attention(torch.nn.Module):
    """What an attention function reads off the model's attention module."""

    def __init__(self, group: int) -> None:
        super().__init__()
        self.num_key_value_groups = group
        self.is_causal = True


def cache_pool(shape: Shape, dtype: torch.dtype, pool_bytes: float, room: int) -> list[tuple[torch.Tensor, ...]]:
    """``(keys, values)`` views of :class:`GrowingLayer` s, as many as fill ``pool_bytes`` (at least 2)."""
    per_cache = 2 * shape.rows * shape.kv_heads * shape.positions * shape.head_dim * dtype.itemsize
    pool = []
    for _ in range(max(2, int(pool_bytes // per_cache))):
        layer = GrowingLayer(room)
        size = (shape.rows, shape.kv_heads, shape.positions - 1, shape.head_dim)
        layer.update(torch.randn(size, dtype=dtype), torch.randn(size, dtype=dtype))
        new = (shape.rows, shape.kv_heads, 1, shape.head_dim)
        pool.append(layer.update(torch.randn(new, dtype=dtype), torch.randn(new, dtype=dtype)))
    return pool


def padding_mask(shape: Shape) -> torch.Tensor:
    """The ``[B, 1, 1, T]`` boolean mask transformers builds for a decode step: half the rows left-padded."""
    mask = torch.ones(shape.rows, 1, 1, shape.positions, dtype=torch.bool)
    mask[: shape.rows // 2, ..., : shape.positions // 10] = False
    return mask


def matmul_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
                     scale: float) -> torch.Tensor:
    """Attention of a grouped ``query`` ``[B, H_kv, group, D]`` by batched matmuls, softmax in float32."""
    scores = torch.matmul(query, key.transpose(-1, -2)).float() * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(scores.softmax(-1).to(value.dtype), value)


def variants(shape: Shape, query: torch.Tensor, mask: torch.Tensor | None, compiled: Callable[..., torch.Tensor] | None,
             native: Callable[..., torch.Tensor] | None = None
             ) -> dict[str, Callable[[torch.Tensor, torch.Tensor], Any]]:
    """Each variant as a function of one cache's ``(keys, values)``."""
    module, scale = _Attention(shape.group), shape.head_dim ** -0.5
    folded = query.reshape(shape.rows, shape.kv_heads, shape.group, shape.head_dim)
    table: dict[str, Callable[[torch.Tensor, torch.Tensor], Any]] = {
        "hf_sdpa": lambda k, v: sdpa_attention_forward(module, query, k, v, mask, scaling=scale),
        "sdpa_gqa": lambda k, v: F.scaled_dot_product_attention(query, k, v, attn_mask=mask, scale=scale,
                                                                 enable_gqa=True),
        "sdpa_folded": lambda k, v: F.scaled_dot_product_attention(folded, k, v, attn_mask=mask, scale=scale),
        "sdpa_contiguous": lambda k, v: sdpa_attention_forward(module, query, k.contiguous(), v.contiguous(), mask,
                                                               scaling=scale),
        "matmul": lambda k, v: matmul_attention(folded, k, v, mask, scale),
        "fast": lambda k, v: decode_attention_forward(module, query, k, v, mask, scaling=scale),
        "read": lambda k, v: k.view(torch.float32).sum() + v.view(torch.float32).sum(),
        "mask_build": lambda k, v: sdpa_mask(shape.rows, 1, shape.positions, q_offset=shape.positions - 1,
                                             attention_mask=None if mask is None else mask[:, 0, 0]),
    }
    if compiled is not None:
        table["compiled"] = lambda k, v: compiled(module, query, k, v, mask, scaling=scale)
    if native is not None:
        table["native"] = lambda k, v: native(module, query, k, v, mask, scaling=scale)
    return table


def time_rounds(calls: dict[str, Callable[[], Any]], repeats: int, warmup: int = 2) -> dict[str, list[float]]:
    """Milliseconds of each call in ``repeats`` rounds that alternate them (after ``warmup`` rounds)."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for round_ in range(warmup + repeats):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            if round_ >= warmup:
                times[name].append((time.perf_counter() - start) * 1e3)
    return times


def medians(times: dict[str, list[float]]) -> dict[str, float]:
    return {name: round(statistics.median(values), 3) for name, values in times.items()}


def minima(times: dict[str, list[float]]) -> dict[str, float]:
    return {name: round(min(values), 3) for name, values in times.items()}


def layer_figures(shape: Shape, dtype: torch.dtype, args: argparse.Namespace,
                  compiled: Callable[..., torch.Tensor] | None,
                  native: Callable[..., torch.Tensor] | None = None) -> dict[str, Any]:
    """Per-layer milliseconds of every variant, with and without a padding mask, and the largest difference
    of each variant's output from ``hf_sdpa``'s."""
    pool = cache_pool(shape, dtype, args.pool_gb * 1e9, args.room)
    contiguous = [(k.contiguous(), v.contiguous()) for k, v in pool[:2]]
    query = torch.randn(shape.rows, shape.heads, 1, shape.head_dim, dtype=dtype)
    row: dict[str, Any] = {"pool_caches": len(pool)}
    with torch.no_grad():
        for masked, mask in (("mask", padding_mask(shape)), ("nomask", None)):
            table = variants(shape, query, mask, compiled, native)
            calls = {name: _cycling(fn, pool) for name, fn in table.items()}
            calls["matmul_contiguous"] = _cycling(table["matmul"], contiguous)
            times = time_rounds(calls, args.repeats)
            row[masked], row[f"{masked}_min"] = medians(times), minima(times)
            row[f"{masked}_max_abs_diff"] = _differences(table, shape, pool[0])
            row[f"{masked}_hf_sdpa_kernels"] = kernels(table["hf_sdpa"], pool[0])
    return row


def kernels(call: Callable[..., Any], kv: tuple[torch.Tensor, ...]) -> list[str]:
    """The attention operators ``call(*kv)`` runs (which scaled-dot-product kernel PyTorch picked)."""
    with torch.profiler.profile() as profile:
        call(*kv)
    return sorted({event.key for event in profile.key_averages() if "attention" in event.key})


def finding(layers: list[dict[str, Any]]) -> str:
    """What the figures of the longest cache say about where the default decode attention loses time."""
    longest = max(row["positions"] for row in layers)
    rows = {row["dtype"]: row for row in layers if row["positions"] == longest}
    parts = []
    if "bfloat16" in rows:
        bf16 = rows["bfloat16"]
        parts.append(
            f"bfloat16, {bf16['rows']}x{longest}: with a padding mask transformers' sdpa function folds the 3 query "
            f"heads of a group into the query length (pack_gqa, because use_gqa_in_sdpa refuses masks): "
            f"{bf16['mask']['hf_sdpa']} ms against {bf16['mask']['sdpa_gqa']} ms for the same kernel with "
            f"enable_gqa and the same mask (without a mask transformers already uses enable_gqa: "
            f"{bf16['nomask']['hf_sdpa']} ms)")
        parts.append(
            f"plain matmuls are slower in bfloat16 ({bf16['mask']['matmul']} ms) because oneDNN's batched matmul "
            f"copies the growing cache's strided views to contiguous tensors first "
            f"({bf16['mask']['matmul_contiguous']} ms on contiguous K/V); the flash kernel reads the views in place "
            f"(copying them first: {bf16['mask']['sdpa_contiguous']} ms)")
    if "float32" in rows:
        f32 = rows["float32"]
        parts.append(
            f"float32, {f32['rows']}x{longest}: the opposite layout wins, folded {f32['nomask']['sdpa_folded']} ms "
            f"against enable_gqa {f32['nomask']['sdpa_gqa']} ms (no mask; transformers' choice there: "
            f"{f32['nomask']['hf_sdpa']} ms)")
    any_row = next(iter(rows.values()))
    parts.append(
        f"not the cause: building the mask ({any_row['mask']['mask_build']} ms), a math fallback (PyTorch runs "
        f"{', '.join(any_row['mask_hf_sdpa_kernels'])}), the mask itself (sdpa_gqa "
        f"{any_row['mask']['sdpa_gqa']} ms with it, {any_row['nomask']['sdpa_gqa']} ms without)")
    for dtype, row in rows.items():
        best = min(row["mask"]["sdpa_gqa"], row["mask"]["sdpa_folded"])
        parts.append(f"{dtype}: reading the KV bytes once takes {row['mask']['read']} ms on this thread count, the "
                     f"best kernel {best / row['mask']['read']:.1f} times that")
    return "; ".join(parts) + "."


def _cycling(fn: Callable[[torch.Tensor, torch.Tensor], Any], pool: list[tuple[torch.Tensor, ...]]
             ) -> Callable[[], Any]:
    state = {"i": 0}

    def call() -> Any:
        state["i"] = (state["i"] + 1) % len(pool)
        return fn(*pool[state["i"]])
    return call


def _differences(table: dict[str, Callable[..., Any]], shape: Shape, kv: tuple[torch.Tensor, ...]
                 ) -> dict[str, float]:
    """Largest absolute difference of each variant's output (as ``[B, 1, H, D]``) from ``hf_sdpa``'s."""
    reference = table["hf_sdpa"](*kv)[0].float()
    out: dict[str, float] = {}
    for name in ("sdpa_gqa", "sdpa_folded", "matmul", "fast", "compiled", "native"):
        if name in table:
            result = table[name](*kv)
            result = result[0] if isinstance(result, tuple) else result
            result = result.reshape(shape.rows, shape.heads, 1, shape.head_dim).transpose(1, 2)
            out[name] = float((result.float() - reference).abs().max())
    return out


def load_model(name: str) -> PreTrainedModel:
    if name == "tiny":
        from worldgym.agents.llm import tiny_chat_model

        return tiny_chat_model([f"the number {i} and {i * 7}" for i in range(50)], vocab_size=400).model
    from worldgym.agents.llm.pretrained import load_chat_model

    return load_chat_model(name, dtype=torch.float32).model


def random_cache(model: PreTrainedModel, rows: int, positions: int) -> DynamicCache:
    """A :class:`GrowingCache` of ``positions`` random keys and values per layer (as the engine decodes with)."""
    config = model.config
    kv_heads = config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    size = (rows, kv_heads, positions, head_dim)
    dtype = model.dtype
    cache = DynamicCache(ddp_cache_data=[(torch.randn(size, dtype=dtype), torch.randn(size, dtype=dtype))
                                         for _ in range(config.num_hidden_layers)])
    return growing_cache(cache, 64, config)


def model_step_figures(model: PreTrainedModel, rows: int, positions: int, repeats: int) -> dict[str, float]:
    """Milliseconds of one decode step (``rows`` one-token queries behind ``positions`` cached tokens), with
    and without left padding; the cache grows by one position per step, as in ``generate``."""
    cache = random_cache(model, rows, positions)
    ids = torch.randint(10, model.config.vocab_size, (rows, 1))
    padded = torch.ones(rows, positions + 1 + 2 * repeats + 4, dtype=torch.long)
    padded[: rows // 2, : positions // 10] = 0
    figures = {}
    with torch.no_grad():
        for masked in ("mask", "nomask"):
            times = []
            for step in range(repeats + 1):
                length = cache.get_seq_length()
                mask = (padded if masked == "mask" else torch.ones_like(padded))[:, : length + 1]
                positions_ids = (mask.sum(1, keepdim=True) - 1)
                start = time.perf_counter()
                model(input_ids=ids, attention_mask=mask, position_ids=positions_ids, use_cache=True,
                      logits_to_keep=1, **cache_argument(cache))
                if step:
                    times.append((time.perf_counter() - start) * 1e3)
            figures[masked] = round(statistics.median(times), 2)
    return figures


NO_ATTENTION = "worldgym_no_attention"


def no_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 *args: Any, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """An attention function that reads nothing and returns zeros ``[B, q, H, D]``: a decode step with it
    costs what the step costs besides attention (projections, MLPs, norms, sampling, framework overheads)."""
    return query.new_zeros(query.shape[0], query.shape[2], query.shape[1], query.shape[3]), None


def linear_layer_figures(model: PreTrainedModel, rows: int, repeats: int) -> dict[str, float]:
    """Milliseconds of a decode step's matrix products alone: every linear layer of ``model`` (the LM head
    included) applied to ``rows`` one-token inputs in turn, its weight read from memory as in a real step
    (medians of ``repeats`` passes over all the layers), and the floating-point operations per second they ran
    at: the part of a decode step no attention kernel touches."""
    layers = [module for module in model.modules() if isinstance(module, torch.nn.Linear)]
    inputs = [torch.randn(rows, layer.in_features, dtype=layer.weight.dtype) for layer in layers]
    flops = sum(2 * rows * layer.in_features * layer.out_features for layer in layers)

    def products() -> None:
        for layer, x in zip(layers, inputs):
            F.linear(x, layer.weight, layer.bias)

    with torch.no_grad():
        milliseconds = statistics.median(time_rounds({"linear": products}, repeats, warmup=1)["linear"])
    return {"ms": round(milliseconds, 4), "gflops_per_s": round(flops / milliseconds / 1e6, 3),
            "gflop": round(flops / 1e9, 6)}


def step_floor(model: dict[str, Any], figures: dict[str, Any], layers: list[dict[str, Any]], dtype_name: str
               ) -> dict[str, float]:
    """What a decode step cannot go below: its linear layers' products at the rate measured, plus reading every
    layer's keys and values once (``read`` per layer, at the step's shape, with the padding mask), and the native
    kernel's step against it (None where it did not run)."""
    read = next(row["mask"]["read"] for row in layers
                if row["dtype"] == dtype_name and row["positions"] == model["positions"])
    floor = figures["linear_layers"]["ms"] + model["layers"] * read
    native = figures.get("native", {}).get("mask")
    return {"kv_read_ms": round(model["layers"] * read, 2), "ms": round(floor, 2),
            "native_over_floor": None if native is None else round(native / floor, 3)}


def whole_model(args: argparse.Namespace, rows: int, positions: int) -> dict[str, Any]:
    """Decode-step milliseconds of the model in each dtype, with ``sdpa`` and with the fast decode attention."""
    base = load_model(args.model).eval()
    out: dict[str, Any] = {"model": args.model, "rows": rows, "positions": positions,
                           "layers": base.config.num_hidden_layers}
    for dtype_name in args.dtypes:
        model = base.to(DTYPES[dtype_name])
        model.set_attn_implementation("sdpa")
        figures = {"sdpa": model_step_figures(model, rows, positions, args.model_repeats)}
        if use_fast_decode_attention(model):
            figures["fast"] = model_step_figures(model, rows, positions, args.model_repeats)
        if not args.no_compile and use_fast_decode_attention(model, kernel="compiled"):
            figures["compiled"] = model_step_figures(model, rows, positions, args.model_repeats)
        if not args.no_native and native_kernel() is not None and use_fast_decode_attention(model, kernel="native"):
            figures["native"] = model_step_figures(model, rows, positions, args.model_repeats)
        AttentionInterface.register(NO_ATTENTION, no_attention)
        model.set_attn_implementation(NO_ATTENTION)  # the rest of the step: a floor for any attention kernel
        figures["no_attention"] = model_step_figures(model, rows, positions, args.model_repeats)
        model.set_attn_implementation("sdpa")
        figures["linear_layers"] = linear_layer_figures(model, rows, args.model_repeats)
        out[dtype_name] = figures
        print(f"whole model {dtype_name}: {figures}")
    return out




def print_table(layers: list[dict[str, Any]]) -> None:
    """Variants down, (dtype, shape, mask) across, milliseconds per layer."""
    columns = [(row, masked) for row in layers for masked in ("mask", "nomask")]
    print(f"{'ms per layer':18s}" + "".join(f"{row['dtype'][:4]} {row['rows']}x{row['positions']} {masked:>6s}  "
                                            for row, masked in columns))
    for name in layers[0]["mask"]:  # medians
        cells = "".join(f"{row[masked][name]:>{len(row['dtype'][:4]) + len(str(row['rows'])) + len(str(row['positions'])) + 9}.2f}  "
                        for row, masked in columns)
        print(f"{name:18s}{cells}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     parents=[results_parser()])
    parser.add_argument("--model", default="smollm2-135m", help="smollm2-135m (default) or tiny (--quick's)")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--positions", type=int, nargs="+", default=[3000, 1000])
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    parser.add_argument("--repeats", type=int, default=15, help="timed rounds per layer variant")
    parser.add_argument("--model-repeats", type=int, default=5, help="timed decode steps of the whole model")
    parser.add_argument("--pool-gb", type=float, default=1.2, help="KV bytes cycled through per layer variant")
    parser.add_argument("--room", type=int, default=97, help="the growing cache's spare positions")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile variant")
    parser.add_argument("--no-native", action="store_true", help="skip the native C++ kernel")
    args = parser.parse_args(argv)
    if args.quick:
        args.model, args.rows, args.positions, args.repeats, args.model_repeats = "tiny", 4, [64], 2, 2
        args.pool_gb, args.no_compile = 0.001, True  # the compiled kernel's tests compile it; quick stays quick
    set_torch_threads(1)
    load_average = os.getloadavg()[0]
    compiled = None if args.no_compile else compiled_decode_attention_forward
    native = None if args.no_native or native_kernel() is None else native_decode_attention_forward
    layers = []
    for positions in args.positions:
        for dtype_name in args.dtypes:
            shape = Shape(args.rows, positions)
            row = {"dtype": dtype_name, "rows": args.rows, "positions": positions,
                   "kv_mb": round(2 * args.rows * shape.kv_heads * positions * shape.head_dim
                                  * DTYPES[dtype_name].itemsize / 1e6, 1),
                   **layer_figures(shape, DTYPES[dtype_name], args, compiled, native)}
            layers.append(row)
            print(f"{dtype_name} {args.rows}x{positions}: mask {row['mask']}\n    nomask {row['nomask']}")
    print_table(layers)
    model = whole_model(args, args.rows, max(args.positions))
    for dtype_name in args.dtypes:
        model[dtype_name]["floor"] = step_floor(model, model[dtype_name], layers, dtype_name)
    write_json(results_dir(args) / "decode_attention.json", {
        "quick": args.quick, "threads": torch.get_num_threads(), "load_average_before": load_average,
        "torch": torch.__version__, "transformers": transformers.__version__,
        "machine": f"{platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores".strip(),
        "unit": "milliseconds per call (median; *_min: fastest round)", "finding": finding(layers),
        "layers": layers, "whole_model_step": model,
        "command": (f"python benchmarks/decode_attention.py --model {args.model} --rows {args.rows} --positions "
                    f"{' '.join(map(str, args.positions))} --dtypes {' '.join(args.dtypes)}"
                    + (" --quick" if args.quick else ""))})


if __name__ == "__main__":
    main()
