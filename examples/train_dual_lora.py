"""Train the dual-LoRA world-model agent on CSRPhone-v0: a policy adapter (DAPO on the 0/1 task reward) and a
world-model adapter that learns to predict the representative's reply to each phone call, on one frozen base.

    python examples/train_dual_lora.py --demo                     # `make demo`: <= 10 min on 2 CPU cores
    python examples/train_dual_lora.py                            # tiny model, d1, 16 steps, validation 64
    python examples/train_dual_lora.py --transfer stacked --difficulty 2
    python examples/train_dual_lora.py --model smollm2-135m       # a real pretrained model (`make smollm2`)
    python examples/train_dual_lora.py --model Qwen/Qwen3-8B --engine vllm --device cuda   # GPU

Steps: (1) the CSR policy's warm start (SFT on the scripted expert, train split, cached in ``--warm-start-dir``;
the tiny one ships with the package, so ``--demo`` trains none), its vocabulary holding the world model's
``<|predict_csr|>``, ``<|csr|>``, ``<|/csr|>``; (2) two fresh LoRA adapters on it; (3) DAPO + ``λ·L_wm``,
validating on validation-split companies (greedy) every ``--eval-every`` steps. Prints validation success and
world-model token accuracy as they move, and writes ``metrics.jsonl``, ``results.json`` and ``curves.png`` to
``--output-dir``. Any other ``--model`` (a local folder or hub name, loaded with ``from_pretrained``) gets the
SmolLM2 preset's settings.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

import worldgym  # noqa: F401  (registers the env ids)
from worldgym.agents.dual_lora import DualLoRATrainer, wm_success_correlation
from worldgym.agents.dual_lora.presets import dual_lora_config, engine, warm_start_config
from worldgym.agents.llm.warm_start import WarmStartConfig, load_or_train_warm_start

# The demo starts from the tiny preset's warm start, which ships with the package (no SFT to wait for).
DEMO_RUN = {"steps": 8, "eval_every": 2, "eval_episodes": 32}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demo", action="store_true", help="the <= 10 minute CPU demo (`make demo`)")
    parser.add_argument("--model", default="tiny", help="tiny | smollm2-135m | a local folder or hub name")
    parser.add_argument("--transfer", choices=["separate", "stacked", "shared", "iwm"], default="separate")
    parser.add_argument("--wm-coef", type=float, default=0.5, help="λ (0 = DAPO alone)")
    parser.add_argument("--difficulty", type=int, choices=[1, 2, 3, 4, 5], default=1)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--eval-every", type=int, default=4)
    parser.add_argument("--eval-episodes", type=int, default=64)
    parser.add_argument("--max-turns", type=int, default=8, help="tool calls per episode")
    parser.add_argument("--prompts-per-step", type=int, default=None, help="tasks per step (default: preset)")
    parser.add_argument("--group-size", type=int, default=None, help="samples per task (default: preset)")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="tokens per reply (default: preset)")
    parser.add_argument("--warm-start-episodes", type=int, default=None,
                        help="expert episodes per difficulty for the warm start (default: preset)")
    parser.add_argument("--warm-start-epochs", type=int, default=None, help="warm-start SFT epochs (default: preset)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--engine", choices=["hf", "vllm"], default="hf")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--warm-start-dir", default="runs/warm_starts")
    parser.add_argument("--output-dir", default="runs/train_dual_lora")
    parser.add_argument("--resume", action="store_true", help="continue from --output-dir's last checkpoint")
    args = parser.parse_args(argv)
    if args.demo:
        args.__dict__.update(DEMO_RUN)
    return args


def preset_name(model: str) -> str:
    """The preset a model takes: its own, or SmolLM2's for any other pretrained model."""
    return model if model in ("tiny", "smollm2-135m") else "smollm2-135m"


def warm_start_settings(args: argparse.Namespace) -> WarmStartConfig:
    settings = replace(warm_start_config(preset_name(args.model)), model=args.model)
    chosen = {"episodes_per_difficulty": args.warm_start_episodes, "epochs": args.warm_start_epochs}
    return replace(settings, **{k: v for k, v in chosen.items() if v is not None})


def make_engine(args: argparse.Namespace, tokenizer: Any):
    """The rollout engine factory: the preset's HF engine, or vLLM serving the policy adapter (GPU)."""
    if args.engine == "vllm":
        from worldgym.agents.llm.engines import VLLMEngine

        return lambda policy: VLLMEngine(args.model, peft_model=policy, adapter_name="policy")
    return lambda policy: engine(preset_name(args.model), policy, tokenizer)


def plot(history: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    evals = [m for m in history if "eval/success_rate" in m]
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    steps = [m["step"] for m in evals]
    ax.plot(steps, [m["eval/success_rate"] for m in evals], marker="o", label="validation success")
    ax.plot(steps, [m.get("eval/wm_token_accuracy", float("nan")) for m in evals], marker="s",
            label="world-model token accuracy")
    rollouts = [m for m in history if "rollout/success_rate" in m]
    ax.plot([m["step"] for m in rollouts], [m["rollout/success_rate"] for m in rollouts], alpha=0.5,
            label="success on training tasks (sampled)")
    ax.set(xlabel="training step", ylim=(0, 1), title="dual-LoRA agent on CSRPhone-v0")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    start = time.perf_counter()
    out = Path(args.output_dir)
    ws = load_or_train_warm_start(warm_start_settings(args), cache_dir=args.warm_start_dir)
    config = dual_lora_config(
        preset_name(args.model), args.difficulty, transfer=args.transfer, wm_coef=args.wm_coef, model=args.model,
        num_steps=args.steps, eval_every=args.eval_every, eval_episodes=args.eval_episodes,
        max_turns=args.max_turns, seed=args.seed, device=args.device, output_dir=str(out), checkpoint_every=1,
        iwm_steps=min(4, args.steps - 1),
        **{k: v for k, v in (("prompts_per_step", args.prompts_per_step), ("group_size", args.group_size),
                             ("max_new_tokens", args.max_new_tokens)) if v is not None})
    trainer = DualLoRATrainer(config, model=ws.model, tokenizer=ws.tokenizer,
                              make_engine=make_engine(args, ws.tokenizer))
    if args.resume:
        trainer.resume_latest()
    trainer.train()
    evals = [m for m in trainer.history if "eval/success_rate" in m]
    results = {
        "command": "python examples/train_dual_lora.py " + " ".join(argv if argv is not None else []),
        "config": config.to_dict(), "warm_start": ws.path.name,
        "success": [[m["step"], m["eval/success_rate"]] for m in evals],
        "wm_token_accuracy": [[m["step"], m.get("eval/wm_token_accuracy")] for m in evals],
        "training_success": [[m["step"], m["rollout/success_rate"]] for m in trainer.history
                             if "rollout/success_rate" in m],
        "wm_success_correlation": wm_success_correlation(trainer.history),
        "seconds": time.perf_counter() - start,
    }
    (out / "results.json").write_text(json.dumps(results, indent=1))
    plot(trainer.history, out / "curves.png")
    print(f"validation success {evals[0]['eval/success_rate']:.3f} -> {evals[-1]['eval/success_rate']:.3f}, "
          f"world-model token accuracy {evals[0].get('eval/wm_token_accuracy', 0):.3f} -> "
          f"{evals[-1].get('eval/wm_token_accuracy', 0):.3f} in {results['seconds']:.0f} s; wrote {out}")
    return results


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
