"""Train a tiny LLM with GRPO/DAPO on MathQA-v0 (or CSRPhone-v0), from a supervised warm start, on CPU.

    python examples/train_grpo.py                          # MathQA-v0, ~6 min on 2 busy CPU cores
    python examples/train_grpo.py --env CSRPhone-v0        # multi-turn tool calls (~1.7k-token chats: GPU)
    python examples/train_grpo.py --model Qwen/Qwen3-0.6B --device cuda --sft-episodes 0   # a real model

Steps: (1) record an imperfect expert (MathQA: the worked solution, whose final answer is corrupted with
probability ``--expert-noise``; CSRPhone: the scripted expert, a random tool call with that probability); (2)
train a byte-level BPE tokenizer and a tiny Qwen3 on that text (skipped for a real ``--model``); (3) SFT warm
start; (4) GRPO with validation on the test split. Writes metrics.jsonl, curve.json and curve.png to
``--output-dir``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

import worldgym  # noqa: F401  (registers the env ids)
from worldgym.agents.grpo import GRPOConfig, GRPOTrainer, make_text_env
from worldgym.agents.llm import (
    SFTConfig,
    build_tiny_model,
    collect_expert_chats,
    load_model,
    load_tokenizer,
    sft_train,
    train_chat_tokenizer,
)
from worldgym.wrappers import format_tool_call


@dataclass
class Args:
    env: str = "MathQA-v0"
    model: str = "tiny"  # "tiny"/"small" (built here) or a hub name / local path
    device: str = "cpu"
    steps: int = 100
    prompts_per_step: int = 16
    group_size: int = 8
    learning_rate: float = 3e-4
    finetune: str = "full"  # a 0.5M-parameter model has too little room for LoRA; use "lora" for real models
    sft_episodes: int = 2000
    sft_epochs: int = 3
    sft_batch_size: int = 32
    expert_noise: float = 0.3
    max_turns: int = 0  # 0: the env's default (MathQA 1, CSRPhone 8)
    max_new_tokens: int = 0  # 0: the env's default per reply (MathQA 24, CSRPhone 96)
    eval_every: int = 10
    eval_episodes: int = 256
    seed: int = 0
    output_dir: str = "runs/train_grpo"


def parse_args() -> Args:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    for name, default in vars(Args()).items():
        parser.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)
    return Args(**vars(parser.parse_args()))


# ---------------------------------------------------------------- env-specific pieces
def env_settings(args: Args) -> dict[str, Any]:
    """Env kwargs, rollout limits and the tool-call wrapper flag for each supported env."""
    if args.env == "MathQA-v0":
        return {
            "env_kwargs": {"difficulty": 1, "num_problems": 5000},
            "eval_env_kwargs": {"split": "test", "num_problems": 500},
            "wrap_tool_calls": False,
            "max_turns": 1,
            "max_new_tokens": 24,
        }
    if args.env == "CSRPhone-v0":
        return {
            "env_kwargs": {"difficulty": 1, "max_turns": 8},
            "eval_env_kwargs": {"split": "test"},
            "wrap_tool_calls": True,
            "max_turns": 8,
            "max_new_tokens": 96,
        }
    raise ValueError(f"--env must be MathQA-v0 or CSRPhone-v0, got {args.env!r}")


def noisy_expert(args: Args):
    """An imperfect expert: competent, but wrong with probability ``expert_noise``."""
    rng = np.random.default_rng(args.seed)
    if args.env == "MathQA-v0":

        def math_expert(env: gym.Env, observation: str, info: dict) -> str:
            problem = env.unwrapped.problems[info["index"]]
            if rng.random() < args.expert_noise:  # keep the worked steps, corrupt the final answer
                wrong = int(problem.answer) + int(rng.choice([-2, -1, 1, 2]))
                return problem.solution.rsplit("####", 1)[0] + f"#### {wrong}"
            return problem.solution

        return math_expert

    from worldgym.envs.csr_phone.policies import ExpertPolicy

    state = {"expert": None}

    def csr_expert(env: gym.Env, observation: str, info: dict) -> str:
        if "tools" in info:  # reset info: a new episode
            state["expert"], state["space"] = ExpertPolicy(), env.unwrapped.action_space  # ToolCallSpace
            state["expert"].reset(observation, info)
        call = state["expert"].act(observation, info)
        if rng.random() < args.expert_noise:
            call = state["space"].sample()
        return format_tool_call(call)

    return csr_expert


def shared_env_factories(args: Args, settings: dict[str, Any]) -> dict[str, Any]:
    """MathQA: generate each split's problems once and share them between the (many) rollout envs."""
    if args.env != "MathQA-v0":
        return {}
    from worldgym.envs.math_qa import MathQAEnv, generate_problems

    kwargs, eval_kwargs = settings["env_kwargs"], {**settings["env_kwargs"], **settings["eval_env_kwargs"]}
    train = generate_problems(kwargs["num_problems"], "train", kwargs["difficulty"], seed=0)
    test = generate_problems(eval_kwargs["num_problems"], "test", eval_kwargs["difficulty"], seed=0)
    return {
        "make_env": lambda: MathQAEnv("train", problems=train),
        "make_eval_env": lambda: MathQAEnv("test", problems=test),
    }


# ---------------------------------------------------------------- main
def main() -> None:
    args = parse_args()
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    settings = env_settings(args)
    settings["max_turns"] = args.max_turns or settings["max_turns"]
    settings["max_new_tokens"] = args.max_new_tokens or settings["max_new_tokens"]
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)

    def make_env() -> gym.Env:
        return make_text_env(args.env, settings["env_kwargs"], settings["wrap_tool_calls"])

    # 1. expert demonstrations, as text actions (tool envs parse them through ParseToolCall)
    start = time.perf_counter()
    chats = collect_expert_chats(
        make_env, noisy_expert(args), range(args.sft_episodes), max_turns=settings["max_turns"]
    )
    if chats:
        print(f"expert: {len(chats)} episodes, mean reward {np.mean([c.reward for c in chats]):.3f}")

    # 2. tokenizer + model
    if args.model in ("tiny", "small"):
        corpus = [m["content"] for chat in chats for m in chat.messages]
        corpus += [json.dumps(t) for t in (chats[0].tools or [])] if chats else []
        tokenizer = train_chat_tokenizer(corpus, vocab_size=2000)
        model = build_tiny_model(tokenizer, args.model, seed=args.seed)
    else:
        tokenizer, model = load_tokenizer(args.model), load_model(args.model)
    model.to(args.device)
    print(
        f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, vocab {len(tokenizer)}"
    )

    # 3. SFT warm start
    if chats:
        losses = sft_train(
            model,
            tokenizer,
            chats,
            SFTConfig(
                epochs=args.sft_epochs,
                batch_size=args.sft_batch_size,
                learning_rate=3e-3,
                seed=args.seed,
                bucket_by_length=settings["max_turns"] > 1,  # long multi-turn chats: less padding
            ),
        )
        print(f"sft: loss {losses[0]:.3f} -> {losses[-1]:.3f} in {time.perf_counter() - start:.0f}s")

    # 4. GRPO
    config = GRPOConfig(
        env_id=args.env,
        env_kwargs=settings["env_kwargs"],
        eval_env_kwargs=settings["eval_env_kwargs"],
        wrap_tool_calls=settings["wrap_tool_calls"],
        max_turns=settings["max_turns"],
        max_new_tokens=settings["max_new_tokens"],
        finetune=args.finetune,
        device=args.device,
        num_steps=args.steps,
        prompts_per_step=args.prompts_per_step,
        group_size=args.group_size,
        learning_rate=args.learning_rate,
        minibatch_size=args.prompts_per_step * args.group_size,
        eval_every=args.eval_every,
        eval_episodes=args.eval_episodes,
        seed=args.seed,
        output_dir=str(out),
    )
    trainer = GRPOTrainer(config, model=model, tokenizer=tokenizer, **shared_env_factories(args, settings))
    trainer.train()
    write_curve(trainer.history, out, args, time.perf_counter() - start)


def write_curve(history: list[dict[str, Any]], out: Path, args: Args, seconds: float) -> None:
    """curve.json and curve.png: validation success and rollout reward per step."""
    evals = [(m["step"], m["eval/success_rate"]) for m in history if "eval/success_rate" in m]
    rollout = [(m["step"], m["rollout/reward_mean"]) for m in history if "rollout/reward_mean" in m]
    summary = {
        "env": args.env,
        "model": args.model,
        "seconds": seconds,
        "eval_success": evals,
        "rollout_reward": rollout,
        "warm_start_success": evals[0][1] if evals else None,
        "final_success": evals[-1][1] if evals else None,
    }
    (out / "curve.json").write_text(json.dumps(summary, indent=1))
    print(f"validation success by step: {evals}  ({seconds:.0f}s total)")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(*zip(*rollout), alpha=0.5, label="rollout reward (sampled)")
    if evals:
        ax.plot(*zip(*evals), marker="o", label="validation success (greedy, test split)")
    ax.set_xlabel("GRPO step")
    ax.set_title(f"GRPO on {args.env} ({args.model} model, SFT warm start at step 0)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "curve.png", dpi=120)


if __name__ == "__main__":
    main()
