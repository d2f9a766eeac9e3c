"""float32 vs bfloat16 for the LLM stack: the learner's LoRA forward + backward, and a whole DAPO step.

``learner``: the model is loaded once; float32 and bf16 passes take turns, the frozen weights cast to each in
place (:func:`worldgym.precision.cast_for_training`; LoRA stays float32) and the same batches are timed under
autocast, as ``GRPOTrainer``/``sft_train`` run them with ``dtype="bfloat16"``. Each figure is the median of
``--repeats`` timed passes after a warm-up; ``loss_gap`` is the relative difference of the two precisions'
losses on the same batch. The default shape, one sequence of 3,072 tokens with the last quarter trained, is a
CSR difficulty-3 episode's (~3,000 tokens, the model's replies a minority of them).

``dapo-step``: one DAPO step of the model's CSR preset (its shipped warm start, CSRPhone-v1 at ``--difficulty``,
``--prompts`` x ``--group-size`` episodes at temperature 0.5, dynamic sampling) in each ``--dtypes``: rollout,
update and step seconds, the process's peak memory, and under bf16 the engine-vs-learner logprob gap and the
importance weights.

``sft``: the model's CSR warm start (the preset's SFT recipe, expert chats at d1-d3) trained in bf16 from
scratch, timed, then greedy validation success at ``--difficulties`` for it (in bf16) and for the float32 warm
start (cached or shipped, in float32) on the same seeds.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/llm_precision.py learner --model smollm2-135m --threads 1
    OMP_WAIT_POLICY=PASSIVE python benchmarks/llm_precision.py sft --model smollm2-135m --threads 2
    OMP_WAIT_POLICY=PASSIVE python benchmarks/llm_precision.py dapo-step --model smollm2-135m --dtypes bfloat16
    OMP_WAIT_POLICY=PASSIVE python benchmarks/llm_precision.py learner --quick      # tiny model, seconds

Both write into ``llm_precision.json`` (``llm_precision_<model>.json`` for a model other than tiny) in
``benchmarks/results/`` (``--results-dir``), each under its own key, keeping the other's figures; a DAPO step with
settings other than the preset's (``--first-round-prompts``, ``--checkpointing-min-tokens``,
``--decode-attention``, ``--merge-lora``) under ``dapo_step+<setting>=<value>...``; each records the engine's decoding
options (``engine``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel

from worldgym.agents.llm.adapters import seeded_lora
from worldgym.agents.llm.engines.decode_attention import DECODE_ATTENTION_KERNELS
from worldgym.agents.llm.scoring import score_tokens
from worldgym.machine import machine_info, machine_kind
from worldgym.precision import autocast, cast_for_training, cpu_supports_bf16

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: find the benchmarks package
from benchmarks.common import model_ready, results_dir, results_parser, write_json


def load(name: str) -> tuple[PreTrainedModel, list[str]]:
    """The float32 model with an all-linear LoRA adapter (rank 16) and its vocabulary size."""
    if name == "tiny":
        from worldgym.agents.llm.models import model_from_config, tiny_model_config
        from worldgym.agents.llm.pretrained import DEFAULT_LORA_TARGETS

        model = model_from_config(tiny_model_config(2000, "small", pad_token_id=0))
        targets = list(DEFAULT_LORA_TARGETS)
    else:
        from worldgym.agents.llm.pretrained import load_chat_model

        chat = load_chat_model(name)
        model, targets = chat.model, list(chat.lora_target_modules)
    return seeded_lora(model, 0, rank=16, alpha=32, target_modules=targets), targets


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


def measure(model: PreTrainedModel, data: tuple[torch.Tensor, ...], repeats: int) -> dict[str, dict[str, Any]]:
    """float32 and bf16 passes taking turns (the frozen weights cast before each, untimed), after a warm-up of
    each; per dtype the median seconds, tokens/s and the loss."""
    timed: dict[torch.dtype, list[tuple[float, float]]] = {torch.float32: [], torch.bfloat16: []}
    for round_ in range(repeats + 1):
        for dtype, results in timed.items():
            cast_for_training(model, dtype)
            result = step(model, dtype, *data)
            if round_:  # round 0 warms up
                results.append(result)
    figures = {}
    for dtype, results in timed.items():
        seconds = statistics.median(t for t, _ in results)
        figures[str(dtype).removeprefix("torch.")] = {
            "seconds": seconds, "tokens_per_s": data[0].numel() / seconds, "loss": results[0][1],
            "all_seconds": [t for t, _ in results]}
    return figures


def attention_ms(model: PreTrainedModel, length: int, repeats: int) -> dict[str, dict[str, float]]:
    """One layer's causal attention (PyTorch's sdpa, as the model runs it) forward and backward at the model's
    head shape over ``length`` tokens: median ms per dtype."""
    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    shape = (1, config.num_attention_heads, length, head_dim)
    out: dict[str, dict[str, float]] = {}
    for dtype in (torch.float32, torch.bfloat16):
        q, k, v = (torch.randn(shape, dtype=dtype, requires_grad=True) for _ in range(3))
        forward, backward = [], []
        for _ in range(repeats + 1):
            start = time.perf_counter()
            output = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            middle = time.perf_counter()
            output.sum().backward()
            forward.append(middle - start)
            backward.append(time.perf_counter() - middle)
        out[str(dtype).removeprefix("torch.")] = {"forward_ms": 1000 * statistics.median(forward[1:]),
                                                  "backward_ms": 1000 * statistics.median(backward[1:])}
    return out


def dapo_step(model: str, dtype: str, difficulty: int, prompts: int, group_size: int, quick: bool,
              always_update: bool = True, engine_options: dict[str, Any] | None = None,
              **overrides: Any) -> dict[str, float]:
    """One DAPO step of ``model``'s CSR preset in ``dtype``; the step's timings and precision metrics.

    With ``always_update`` the step has an entropy term of 1e-6, so its update runs (and is timed) even when no
    group's rewards differ, which DAPO would otherwise skip; the update's work is the same either way."""
    from worldgym.agents.grpo import GRPOTrainer
    from worldgym.agents.grpo.presets import grpo_presets, make_engine
    from worldgym.agents.llm.warm_start import load_or_train_warm_start

    preset = grpo_presets("CSRPhone-v1")[model]
    warm = load_or_train_warm_start(preset.warm_start)
    with tempfile.TemporaryDirectory() as run_dir:
        config = preset.grpo_config(difficulty, dtype=dtype, num_steps=1, eval_every=0, temperature=0.5,
                                    prompts_per_step=prompts, group_size=group_size, output_dir=run_dir,
                                    progress=False, entropy_coef=1e-6 if always_update else 0.0,
                                    **({"max_new_tokens": 16, "max_turns": 2} if quick else {}), **overrides)
        trainer = GRPOTrainer(config, model=warm.model, tokenizer=warm.tokenizer,
                              make_engine=lambda policy: make_engine(policy, warm.tokenizer,
                                                                     **{**preset.engine_options, **(engine_options or {})}))
        row = trainer.train_step()
    keys = ("time/rollout_s", "time/update_s", "time/step_s", "rollout/episodes_sampled", "rollout/success_rate",
            "rollout/model_tokens", "rollout/kept_groups", "precision/logprob_gap_mean", "precision/logprob_gap_max",
            "precision/is_weight_mean", "precision/is_weight_capped", "loss/ratio_first_minibatch",
            "loss/skipped_update")
    return {**{key: row[key] for key in keys if key in row}, "peak_rss_gb": peak_rss_gb()}


def peak_rss_gb() -> float:
    """The process's peak resident memory so far, in GB (Linux reports ``ru_maxrss`` in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def sft_in_bf16(args: argparse.Namespace) -> dict[str, Any]:
    """Train the preset's warm start in bf16 (cached in ``runs/warm_starts``), then validate it and the float32
    one at each difficulty."""
    from benchmarks.csr_policy import evaluate
    from worldgym.agents.grpo.presets import grpo_presets
    from worldgym.agents.llm.warm_start import load_or_train_warm_start

    reference = grpo_presets("CSRPhone-v1")[args.model].warm_start
    if args.quick:
        reference = replace(reference, difficulties=(1,), episodes_per_difficulty=4, epochs=1)
    cache = results_dir(args) / "runs" / "warm_starts" if args.quick else Path("runs/warm_starts")
    start = time.perf_counter()
    half = load_or_train_warm_start(replace(reference, dtype="bfloat16"), cache_dir=cache, progress=False)
    out: dict[str, Any] = {"sft_seconds": time.perf_counter() - start, "sft_summary_seconds":
                           half.summary["seconds"], "loss_first": half.summary["loss_first"],
                           "loss_last": half.summary["loss_last"], "validation": {}}
    full = load_or_train_warm_start(reference, cache_dir=cache, progress=False)
    for name, warm in (("bfloat16", half), ("float32", full)):
        out["validation"][name] = {
            f"d{d}": evaluate(warm, args.model, d, args.episodes, grpo_presets("CSRPhone-v1")[args.model].decoding)
            for d in args.difficulties}
        print(name, out["validation"][name])
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    modes = parser.add_subparsers(dest="mode", required=True)
    learner = modes.add_parser("learner", parents=[results_parser()], help="LoRA forward + backward")
    learner.add_argument("--rows", type=int, default=1)
    learner.add_argument("--length", type=int, default=3072)
    learner.add_argument("--trained", type=float, default=0.25, help="share of positions with a target")
    learner.add_argument("--repeats", type=int, default=3)
    step = modes.add_parser("dapo-step", parents=[results_parser()], help="one DAPO step of the CSR preset")
    step.add_argument("--dtypes", nargs="+", choices=["float32", "bfloat16"], default=["float32", "bfloat16"])
    step.add_argument("--difficulty", type=int, default=3)
    step.add_argument("--prompts", type=int, default=2)
    step.add_argument("--group-size", type=int, default=8)
    step.add_argument("--first-round-prompts", type=int, default=None,
                      help="tasks in dynamic sampling's first round (default: the preset's)")
    step.add_argument("--checkpointing-min-tokens", type=int, default=None,
                      help="recompute activations only in microbatches of at least this many positions")
    step.add_argument("--decode-attention", choices=list(DECODE_ATTENTION_KERNELS), default=None,
                      help="decode with this decode attention (HFEngine's decode_attention; default the preset's)")
    step.add_argument("--merge-lora", choices=["on", "off"], default=None,
                      help="generate with the LoRA layers merged or not (HFEngine's merge_lora; default the preset's)")
    step.add_argument("--skip-empty-updates", action="store_true",
                      help="as DAPO does: no update when no group's rewards differ (default: time the update anyway)")
    sft = modes.add_parser("sft", parents=[results_parser()], help="the CSR warm start's SFT in bf16")
    sft.add_argument("--difficulties", type=int, nargs="+", default=[1, 2])
    sft.add_argument("--episodes", type=int, default=16, help="validation episodes per difficulty")
    for mode in (learner, step, sft):
        mode.add_argument("--model", default="smollm2-135m", help="'tiny' or a name for load_chat_model")
        mode.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args(argv)
    if args.quick and args.mode == "learner":
        args.model, args.rows, args.length, args.repeats = "tiny", 2, 128, 1
    if args.quick and args.mode == "dapo-step":
        args.model, args.prompts, args.group_size = "tiny", 1, 2
    if args.quick and args.mode == "sft":
        args.model, args.difficulties, args.episodes = "tiny", [1], 2
    return args


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    args = parse_args(argv)
    if not model_ready(args):
        return None
    name = "llm_precision" + ("" if args.model == "tiny" else "_" + args.model.split("-")[0])
    path = results_dir(args) / f"{name}.json"
    runs = {"learner": run_learner, "sft": sft_in_bf16, "dapo-step": run_dapo_step}
    figures = runs[args.mode](args)
    # read only now: another mode may have written its figures to the same file while this one ran
    results = json.loads(path.read_text()) if path.is_file() else {}
    key = args.mode.replace("-", "_") + (settings_suffix(args) if args.mode == "dapo-step" else "")
    figures["machine"] = machine_info()  # each mode's figures say where they were made (the file may mix)
    earlier = results.get(key, {})
    if key.startswith("dapo_step") and machine_kind(earlier.get("machine", {})) == machine_kind(figures["machine"]):
        figures["figures"] = {**earlier.get("figures", {}), **figures["figures"]}  # one dtype per run: keep the other's
    results |= {"model": args.model, "cpu_native_bf16": cpu_supports_bf16(), "python": platform.python_version(),
                "torch": torch.__version__, "cpu_count": os.cpu_count(), key: figures}
    write_json(path, results, indent=2)
    return results


def settings_suffix(args: argparse.Namespace) -> str:
    """``+name=value`` for each setting a DAPO-step run changed from the preset (its key in the results file:
    ``dapo_step`` for the preset's own settings on every core), ``+threads=N`` last where it ran on fewer threads
    than the machine has cores."""
    changed = {**step_overrides(args), **engine_overrides(args)}
    if args.threads != os.cpu_count():
        changed["threads"] = args.threads
    return "".join(f"+{name}={value}" for name, value in changed.items())


def step_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The trainer settings ``--first-round-prompts`` / ``--checkpointing-min-tokens`` change (none: the
    preset's)."""
    names = ("first_round_prompts", "checkpointing_min_tokens")
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def engine_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The engine options ``--decode-attention`` and ``--merge-lora`` set (none: the preset's)."""
    options: dict[str, Any] = {"decode_attention": args.decode_attention} if args.decode_attention else {}
    return options | ({"merge_lora": args.merge_lora == "on"} if args.merge_lora else {})


def run_dapo_step(args: argparse.Namespace) -> dict[str, Any]:
    figures = {}
    for dtype in args.dtypes:
        figures[dtype] = dapo_step(args.model, dtype, args.difficulty, args.prompts, args.group_size, args.quick,
                                   not args.skip_empty_updates, engine_overrides(args), **step_overrides(args))
        print(dtype, {k: round(v, 4) for k, v in figures[dtype].items()})
    update = "skipped when no group's rewards differ" if args.skip_empty_updates else "always run (entropy 1e-6)"
    return {"what": f"one DAPO step of the {args.model} CSR preset (shipped warm start), d{args.difficulty}, "
                    f"{args.prompts} prompts x {args.group_size}, temperature 0.5, update {update}",
            "settings": {**step_overrides(args), **engine_overrides(args)}, "engine": engine_options(args),
            "quick": args.quick, "threads": args.threads, "load_average": os.getloadavg()[0], "figures": figures}


def engine_options(args: argparse.Namespace) -> dict[str, Any]:
    """The rollout engine's decoding options in this run: the preset's, with the flags' changes."""
    from worldgym.agents.grpo.presets import grpo_presets

    preset = grpo_presets("CSRPhone-v1")[args.model].engine_options
    options = {"decode_attention": "flash", "merge_lora": False} | {
        name: value for name, value in preset.items() if name in ("decode_attention", "merge_lora")}
    return options | engine_overrides(args)


def run_learner(args: argparse.Namespace) -> dict[str, Any]:
    model, _ = load(args.model)
    model.train()
    data = batch(model.get_input_embeddings().weight.shape[0], args.rows, args.length, args.trained)
    figures = measure(model, data, args.repeats)
    attention = attention_ms(model, args.length, args.repeats)
    layers = model.config.num_hidden_layers
    speedup = figures["float32"]["seconds"] / figures["bfloat16"]["seconds"]
    loss_gap = abs(figures["bfloat16"]["loss"] - figures["float32"]["loss"]) / abs(figures["float32"]["loss"])
    print(f"{'dtype':>9} {'s/pass':>8} {'tokens/s':>9} {'loss':>8}")
    for name, row in figures.items():
        print(f"{name:>9} {row['seconds']:>8.2f} {row['tokens_per_s']:>9.0f} {row['loss']:>8.4f}")
    print(f"bf16 speed-up {speedup:.2f}x, relative loss gap {loss_gap:.1e}")
    for name, row in attention.items():
        share = layers * (row["forward_ms"] + row["backward_ms"]) / 1000 / figures[name]["seconds"]
        row["share_of_pass"] = share
        print(f"{name} attention per layer: forward {row['forward_ms']:.1f} ms, backward {row['backward_ms']:.1f} ms "
              f"(x{layers} layers = {100 * share:.0f}% of the pass)")
    return {
        "attention_per_layer": attention,
        "what": "LoRA (r16, all linear layers) forward + backward through score_tokens, float32 vs bf16",
        "quick": args.quick,
        "settings": {k: getattr(args, k) for k in ("rows", "length", "trained", "repeats", "threads")},
        "figures": figures, "bf16_speedup": speedup, "loss_gap": loss_gap, "load_average": os.getloadavg()[0],
        "peak_rss_gb": peak_rss_gb(),  # both precisions' passes, activations kept (no checkpointing)
    }


if __name__ == "__main__":
    main()
