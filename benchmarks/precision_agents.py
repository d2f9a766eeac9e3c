"""float32 vs bfloat16 (``dtype``) for the Z-token PPO agent and the cartridge distiller: seconds per update step,
side by side in one process on one thread, with the same seed, and how far bf16's numbers move.

    python benchmarks/precision_agents.py           # two model sizes per agent (~2 min on 2 shared cores)
    python benchmarks/precision_agents.py --quick   # smoke run: the smallest sizes, 2 steps (seconds)

For each agent and model size, one trainer per dtype is built from the same seed; after ``--warmup-steps``
untimed steps each, the two take ``--steps`` timed steps in turn (float32, bf16, float32, ...), so load on the
machine falls on both alike; the median step time of each and their ratio are reported.

* Z-token PPO (``ZTokenPPOConfig.dtype``): a step is one rollout (``--ppo-episodes`` episodes on 8 envs) and its
  PPO update (2 epochs x 4 minibatches; under bf16 it first recomputes the rollout's log-probs, which is
  counted). Sizes: the agent's default policy (64 wide, 2 layers) and a wider one (512 wide, 4 layers). Gaps: the
  mean / max |rollout log-prob - recomputed log-prob| that bf16 training logs, and the |bf16 - float32|
  log-prob of the same sampled actions, same weights, same observations.
* Cartridge distiller (``CartridgeDistillConfig.dtype``): a step is one on-policy step (the student samples, the
  teacher and the student score, Adam on the cartridge); the model is a randomly initialised Qwen3 of the
  library's ``tiny`` / ``small`` shapes over a tokenizer trained on the panel (speed does not need a trained
  teacher). Gaps: each step's KL(teacher ‖ student) in bf16 vs float32, and the |bf16 - float32| teacher-forced
  log-prob of the patient's documents' first 256 tokens.

Writes precision_agents.json to benchmarks/results/ (``--results-dir``).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

import worldgym  # noqa: F401  (registers the env ids)
from worldgym.agents.cartridge import CartridgeDistillConfig, CartridgeDistillTrainer
from worldgym.agents.llm import build_tiny_model, train_chat_tokenizer
from worldgym.agents.llm.scoring import score_tokens
from worldgym.agents.ztoken_ppo import ZTokenModelConfig, ZTokenPPOConfig, ZTokenPPOTrainer
from worldgym.envs.longhealth import generate_panel
from worldgym.precision import autocast, cast_for_training, cpu_supports_bf16

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: find the benchmarks package
from benchmarks.common import results_dir, results_parser, write_json

DTYPES = ("float32", "bfloat16")
ZTOKEN_SHAPES = {
    "default": ZTokenModelConfig(),
    "wide": ZTokenModelConfig(hidden_size=512, num_layers=4, num_heads=8, num_kv_heads=4, head_dim=64,
                              intermediate_size=1536),
}
ZTOKEN_ENV = {"num_z_tokens": 8, "max_new_tokens": 8, "operand_digits": 2}
CARTRIDGE_SIZES = ("tiny", "small")
SCORED_TOKENS = 256  # documents' tokens whose teacher-forced log-probs are compared across dtypes


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     parents=[results_parser()])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per dtype and size")
    parser.add_argument("--warmup-steps", type=int, default=1, help="untimed steps per trainer first")
    parser.add_argument("--ppo-episodes", type=int, default=64, help="Z-token PPO episodes per rollout")
    parser.add_argument("--ztoken-shapes", nargs="+", choices=list(ZTOKEN_SHAPES), default=list(ZTOKEN_SHAPES))
    parser.add_argument("--cartridge-sizes", nargs="+", choices=CARTRIDGE_SIZES, default=list(CARTRIDGE_SIZES))
    parser.add_argument("--num-patients", type=int, default=5, help="the cartridge panel's patients")
    parser.add_argument("--cartridge-tokens", type=int, default=64)
    parser.add_argument("--questions-per-step", type=int, default=4)
    parser.add_argument("--samples-per-question", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.warmup_steps, args.ppo_episodes = 2, 1, 16
        args.ztoken_shapes, args.cartridge_sizes, args.num_patients = ["default"], ["tiny"], 3
        args.cartridge_tokens, args.questions_per_step, args.samples_per_question, args.max_new_tokens = 8, 1, 1, 4
    return args


# ---------------------------------------------------------------- timing
def interleaved(steps: dict[str, Callable[[], dict[str, float]]], warmup: int, timed: int
                ) -> dict[str, list[dict[str, float]]]:
    """Run each dtype's ``step`` ``warmup`` times untimed, then ``timed`` times in turn; every timed step's
    figures per dtype."""
    for step in steps.values():
        for _ in range(warmup):
            step()
    rows: dict[str, list[dict[str, float]]] = {dtype: [] for dtype in steps}
    for _ in range(timed):
        for dtype, step in steps.items():
            rows[dtype].append(step())
    return rows


def side_by_side(rows: dict[str, list[dict[str, float]]], keys: tuple[str, ...]) -> dict[str, Any]:
    """Median of each timing key per dtype, and float32's over bf16's (above 1: bf16 is faster)."""
    medians = {dtype: {key: statistics.median(row[key] for row in dtype_rows) for key in keys}
               for dtype, dtype_rows in rows.items()}
    return {"median_s": medians,
            "float32_over_bfloat16": {key: medians["float32"][key] / medians["bfloat16"][key] for key in keys},
            "steps_s": {dtype: [row["step_s"] for row in dtype_rows] for dtype, dtype_rows in rows.items()}}


def _gap(a: torch.Tensor, b: torch.Tensor) -> dict[str, float]:
    gap = (a.float() - b.float()).abs()
    return {"mean": float(gap.mean()), "max": float(gap.max())}


# ---------------------------------------------------------------- Z-token PPO
def ztoken_trainer(args: argparse.Namespace, model: ZTokenModelConfig, dtype: str, workdir: Path
                   ) -> ZTokenPPOTrainer:
    config = ZTokenPPOConfig(model=model, env_kwargs=ZTOKEN_ENV, episodes_per_rollout=args.ppo_episodes,
                             num_steps=1000, eval_episodes=0, log_rollouts=False, progress=False, seed=args.seed,
                             output_dir=str(workdir / dtype), dtype=dtype)
    return ZTokenPPOTrainer(config)


def ztoken_step(trainer: ZTokenPPOTrainer) -> Callable[[], dict[str, float]]:
    """One PPO iteration (rollout + update), timed in its two parts."""
    def step() -> dict[str, float]:
        start = time.perf_counter()
        episodes = trainer.collect()
        collected = time.perf_counter()
        metrics = trainer.update(episodes)
        trainer.rollout_index += 1
        done = time.perf_counter()
        return {"step_s": done - start, "collect_s": collected - start, "update_s": done - collected, **metrics}
    return step


def ztoken_logprob_gap(trainer: ZTokenPPOTrainer) -> dict[str, float]:
    """|bf16 - float32| log-prob of the tokens a float32 rollout sampled, same weights and observations."""
    episodes = trainer.collect()
    observations = np.stack([o for e in episodes for o in e.observations])
    tokens = torch.tensor([t for e in episodes for t in e.tokens])
    batch = trainer.encoder.encode(observations)
    with torch.no_grad():
        full = trainer.policy(batch).token_log_probs.gather(-1, tokens[:, None])
        with autocast(torch.bfloat16):
            half = trainer.policy(batch).token_log_probs.gather(-1, tokens[:, None])
    return _gap(half, full)


def ztoken_shape(args: argparse.Namespace, name: str, workdir: Path) -> dict[str, Any]:
    model = ZTOKEN_SHAPES[name]
    trainers = {dtype: ztoken_trainer(args, model, dtype, workdir / name) for dtype in DTYPES}
    rows = interleaved({dtype: ztoken_step(t) for dtype, t in trainers.items()}, args.warmup_steps, args.steps)
    recomputed = rows["bfloat16"]
    result = {
        "model": {key: getattr(model, key) for key in ("hidden_size", "num_layers", "intermediate_size")},
        "parameters": sum(p.numel() for p in trainers["float32"].policy.parameters()),
        **side_by_side(rows, ("step_s", "collect_s", "update_s")),
        "rollout_vs_recomputed_logprob_gap": {
            "mean": statistics.mean(row["precision/logprob_gap_mean"] for row in recomputed),
            "max": max(row["precision/logprob_gap_max"] for row in recomputed)},
        "bf16_vs_float32_logprob_gap": ztoken_logprob_gap(trainers["float32"]),
        "losses_finite": all(torch.isfinite(torch.tensor(row["loss/policy"])) for row in recomputed),
    }
    for trainer in trainers.values():
        trainer.close()
    return result


# ---------------------------------------------------------------- cartridge distiller
def panel_tokenizer(num_patients: int):
    panel = generate_panel(num_patients, 0)
    corpus = [text for patient in panel.values() for text in patient["texts"].values()]
    corpus += [q["question"] for patient in panel.values() for q in patient["questions"]]
    return train_chat_tokenizer(corpus, vocab_size=2000)


def cartridge_trainer(args: argparse.Namespace, tokenizer, size: str, dtype: str, workdir: Path
                      ) -> CartridgeDistillTrainer:
    config = CartridgeDistillConfig(env_kwargs={"num_patients": args.num_patients, "task": 1},
                                    num_tokens=args.cartridge_tokens, questions_per_step=args.questions_per_step,
                                    samples_per_question=args.samples_per_question,
                                    max_new_tokens=args.max_new_tokens, num_steps=1000, eval_every=0,
                                    seed=args.seed, output_dir=str(workdir / dtype), progress=False, dtype=dtype)
    return CartridgeDistillTrainer(config, model=build_tiny_model(tokenizer, size, seed=args.seed),
                                   tokenizer=tokenizer)


def cartridge_step(trainer: CartridgeDistillTrainer) -> Callable[[], dict[str, float]]:
    def step() -> dict[str, float]:
        metrics = trainer.train_step()
        return {"step_s": metrics["time/step_s"], "sample_s": metrics["time/sample_s"],
                "score_and_update_s": metrics["time/step_s"] - metrics["time/sample_s"], "kl": metrics["kl/full"]}
    return step


def documents_logprob_gap(trainer: CartridgeDistillTrainer, tokenizer, size: str, seed: int) -> dict[str, float]:
    """|bf16 - float32| teacher-forced log-probs of the documents' first tokens (the same weights, one stored
    in bf16 and run under autocast)."""
    ids = torch.tensor([tokenizer(trainer.documents)["input_ids"][:SCORED_TOKENS]])
    ones = torch.ones_like(ids)
    half = cast_for_training(build_tiny_model(tokenizer, size, seed=seed).requires_grad_(False), torch.bfloat16)
    with torch.no_grad():
        full_lp = score_tokens(trainer.model, ids, ones, ones[:, 1:]).logprobs
        with autocast(torch.bfloat16):
            half_lp = score_tokens(half, ids, ones, ones[:, 1:]).logprobs
    return _gap(half_lp, full_lp)


def cartridge_size(args: argparse.Namespace, tokenizer, size: str, workdir: Path) -> dict[str, Any]:
    trainers = {dtype: cartridge_trainer(args, tokenizer, size, dtype, workdir / size) for dtype in DTYPES}
    rows = interleaved({dtype: cartridge_step(t) for dtype, t in trainers.items()}, args.warmup_steps, args.steps)
    kl = {dtype: [row["kl"] for row in dtype_rows] for dtype, dtype_rows in rows.items()}
    return {
        "model": size,
        "parameters": sum(p.numel() for p in trainers["float32"].model.parameters()),
        "documents_prefix_tokens": len(trainers["float32"].documents_prefix_ids),
        **side_by_side(rows, ("step_s", "sample_s", "score_and_update_s")),
        "kl_per_step": kl,
        "kl_relative_gap_max": max(abs(b - a) / a for a, b in zip(kl["float32"], kl["bfloat16"], strict=True)),
        "bf16_vs_float32_documents_logprob_gap": documents_logprob_gap(trainers["float32"], tokenizer, size,
                                                                       args.seed),
    }


# ---------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    start = time.perf_counter()
    report: dict[str, Any] = {
        "quick": args.quick, "settings": vars(args), "machine": platform.platform(),
        "processor": platform.processor(), "cpu_native_bf16": cpu_supports_bf16(),
        "torch": torch.__version__, "torch_threads": torch.get_num_threads(), "ztoken_ppo": {}, "cartridge": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.ztoken_shapes:
            report["ztoken_ppo"][name] = entry = ztoken_shape(args, name, Path(tmp) / "ztoken")
            _print("ztoken_ppo", name, entry)
        tokenizer = panel_tokenizer(args.num_patients) if args.cartridge_sizes else None
        for size in args.cartridge_sizes:
            report["cartridge"][size] = entry = cartridge_size(args, tokenizer, size, Path(tmp) / "cartridge")
            _print("cartridge", size, entry)
    report["seconds"] = time.perf_counter() - start
    write_json(results_dir(args) / "precision_agents.json", report)
    return report


def _print(agent: str, name: str, entry: dict[str, Any]) -> None:
    medians, ratio = entry["median_s"], entry["float32_over_bfloat16"]["step_s"]
    gaps = {key: value for key, value in entry.items() if key.endswith(("_gap", "_gap_max"))}
    print(f"{agent} {name}: {medians['float32']['step_s']:.3f} s/step float32, {medians['bfloat16']['step_s']:.3f} "
          f"s/step bf16 (float32/bf16 x{ratio:.2f}); {gaps}", flush=True)


if __name__ == "__main__":
    main()
