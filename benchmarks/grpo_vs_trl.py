"""GRPO throughput and reward: worldgym's GRPOTrainer vs TRL's GRPOTrainer (loss_type="dapo"), side by side.

Same tiny Qwen3 (SFT warm start on the imperfect MathQA expert, copied for both), same tokenizer, same
MathQA-v0 training problems, group size, batch, learning rate, completion length and step budget. Both do full
fine-tuning (or both LoRA with ``--finetune lora``). Reports training tokens/s (prompt + completion tokens per
wall-clock second of the whole step: generation + update) and greedy validation success on the test split
after the budget, measured with the same evaluator for both. Ours runs twice: as configured by default (a
group's shared prompt runs once, in the engine's prefill and in the training pass) and with
``share_prompt_prefix=False``, which shows how much of the gap that one optimisation makes. Writes
benchmarks/results/grpo_vs_trl.json and .png.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/grpo_vs_trl.py --steps 30
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import time
from pathlib import Path

import numpy as np
import torch

from worldgym.agents.grpo import GRPOConfig, GRPOTrainer
from worldgym.agents.llm import (
    SFTConfig,
    build_tiny_model,
    collect_expert_chats,
    sft_train,
    train_chat_tokenizer,
)
from worldgym.envs.math_qa import SYSTEM_PROMPT, MathQAEnv, MathRewardModel, generate_problems

RESULTS = Path(__file__).parent / "results"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--prompts-per-step", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--learning-rate", type=float, default=3e-4)
    parser.add_argument("--finetune", choices=["full", "lora"], default="full")
    parser.add_argument("--sft-episodes", type=int, default=2000)
    parser.add_argument("--eval-episodes", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def warm_start(args: argparse.Namespace, train_problems, rng: np.random.Generator):
    """Tokenizer + tiny model fine-tuned on the imperfect expert (final answer wrong 30% of the time)."""

    def expert(env, observation, info):
        problem = env.unwrapped.problems[info["index"]]
        if rng.random() < 0.3:
            return (
                problem.solution.rsplit("####", 1)[0]
                + f"#### {int(problem.answer) + int(rng.choice([-1, 1]))}"
            )
        return problem.solution

    chats = collect_expert_chats(lambda: MathQAEnv(problems=train_problems), expert, range(args.sft_episodes))
    tokenizer = train_chat_tokenizer([m["content"] for c in chats for m in c.messages], vocab_size=2000)
    model = build_tiny_model(tokenizer, seed=args.seed)
    sft_train(model, tokenizer, chats, SFTConfig(epochs=3, batch_size=32, learning_rate=3e-3, progress=False))
    return tokenizer, model


def run_ours(
    args, tokenizer, model, train_problems, test_problems, share_prompt_prefix: bool = True
) -> dict:
    config = GRPOConfig(
        share_prompt_prefix=share_prompt_prefix,
        finetune=args.finetune,
        num_steps=args.steps,
        prompts_per_step=args.prompts_per_step,
        group_size=args.group_size,
        max_new_tokens=args.max_new_tokens,
        learning_rate=args.learning_rate,
        minibatch_size=args.prompts_per_step * args.group_size,
        eval_every=0,
        progress=False,
        seed=args.seed,
        output_dir="runs/bench_grpo_ours" + ("" if share_prompt_prefix else "_unshared"),
    )
    trainer = GRPOTrainer(
        config,
        model=model,
        tokenizer=tokenizer,
        make_env=lambda: MathQAEnv(problems=train_problems),
        make_eval_env=lambda: MathQAEnv("test", problems=test_problems),
    )
    start = time.perf_counter()
    history = trainer.train()
    seconds = time.perf_counter() - start
    tokens = sum(m["perf/step_tokens_per_s"] * m["time/step_s"] for m in history)
    evaluation = trainer.evaluate(args.eval_episodes)
    return {
        "seconds": seconds,
        "tokens": tokens,
        "tokens_per_s": tokens / seconds,
        "reward_curve": [m["rollout/reward_mean"] for m in history],
        "eval_success": evaluation["eval/success_rate"],
        "trainer": trainer,
    }


def run_trl(args, tokenizer, model, train_problems) -> dict:
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import PrinterCallback
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer as TRLTrainer

    grader = MathRewardModel()

    def math_reward(prompts, completions, answer, **kwargs):
        return [
            grader(completion[0]["content"], reference) for completion, reference in zip(completions, answer)
        ]

    dataset = Dataset.from_list(
        [
            {
                "prompt": [
                    {"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": p.question},
                ],
                "answer": p.answer_text,
            }
            for p in train_problems
        ]
    )
    config = TRLConfig(
        output_dir="runs/bench_grpo_trl",
        loss_type="dapo",
        epsilon=0.2,
        epsilon_high=0.28,
        beta=0.0,
        num_generations=args.group_size,
        per_device_train_batch_size=args.prompts_per_step * args.group_size,
        max_completion_length=args.max_new_tokens,
        learning_rate=args.learning_rate,
        max_steps=args.steps,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        seed=args.seed,
        temperature=1.0,
        top_p=1.0,
    )
    peft_config = (
        LoraConfig(
            r=16,
            lora_alpha=32,
            lora_dropout=0.0,
            task_type="CAUSAL_LM",
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        )
        if args.finetune == "lora"
        else None
    )
    trainer = TRLTrainer(
        model=model,
        reward_funcs=math_reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    trainer.remove_callback(PrinterCallback)  # its per-step dicts would flood the output (logs are kept)
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    logs = [entry for entry in trainer.state.log_history if "reward" in entry]
    tokens = max(entry.get("num_tokens", 0) for entry in logs)
    return {
        "seconds": seconds,
        "tokens": tokens,
        "tokens_per_s": tokens / seconds,
        "reward_curve": [entry["reward"] for entry in logs],
        "model": trainer.model,
    }


def evaluate_with_ours(model, tokenizer, test_problems, episodes: int, seed: int) -> float:
    """Greedy validation success of any trained model, through worldgym's own evaluator."""
    config = GRPOConfig(finetune="full", eval_every=0, progress=False, seed=seed, max_new_tokens=24)
    trainer = GRPOTrainer(
        config,
        model=model,
        tokenizer=tokenizer,
        make_env=lambda: MathQAEnv("test", problems=test_problems),
        make_eval_env=lambda: MathQAEnv("test", problems=test_problems),
    )
    return trainer.evaluate(episodes)["eval/success_rate"]


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(args.seed)
    train_problems = generate_problems(5000, "train", 1, seed=0)
    test_problems = generate_problems(500, "test", 1, seed=0)
    tokenizer, warm = warm_start(args, train_problems, rng)
    warm_success = evaluate_with_ours(
        copy.deepcopy(warm), tokenizer, test_problems, args.eval_episodes, args.seed
    )
    print(f"warm start: validation success {warm_success:.3f}")

    ours = run_ours(args, tokenizer, copy.deepcopy(warm), train_problems, test_problems)
    report("worldgym", ours)
    unshared = run_ours(args, tokenizer, copy.deepcopy(warm), train_problems, test_problems, False)
    report("worldgym without prompt sharing", unshared)
    trl = run_trl(args, tokenizer, copy.deepcopy(warm), train_problems)
    trl_model = trl["model"].merge_and_unload() if args.finetune == "lora" else trl["model"]
    trl["eval_success"] = evaluate_with_ours(
        trl_model, tokenizer, test_problems, args.eval_episodes, args.seed
    )
    report("TRL", trl)

    import trl as trl_package

    summary = {
        "setup": {
            **vars(args),
            "trl_version": trl_package.__version__,
            "torch_threads": torch.get_num_threads(),
            "cpu_count": os.cpu_count(),
            "model_parameters": sum(p.numel() for p in warm.parameters()),
        },
        "warm_start_success": warm_success,
        "worldgym": {k: v for k, v in ours.items() if k != "trainer"},
        "worldgym_no_prompt_sharing": {k: v for k, v in unshared.items() if k != "trainer"},
        "trl": {k: v for k, v in trl.items() if k != "model"},
        "tokens_per_s_ratio": ours["tokens_per_s"] / trl["tokens_per_s"],
        "tokens_per_s_ratio_no_prompt_sharing": unshared["tokens_per_s"] / trl["tokens_per_s"],
    }
    print(f"ratio worldgym / TRL tokens/s: {summary['tokens_per_s_ratio']:.2f}")
    print(f"  without prompt sharing: {summary['tokens_per_s_ratio_no_prompt_sharing']:.2f}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "grpo_vs_trl.json").write_text(json.dumps(summary, indent=1))
    plot(summary, RESULTS / "grpo_vs_trl.png")


def report(name: str, run: dict) -> None:
    speed, success = f"{run['tokens_per_s']:.0f} tokens/s", f"success {run['eval_success']:.3f}"
    print(f"{name}: {speed}, {success}, {run['seconds']:.0f}s")


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name in ("worldgym", "worldgym_no_prompt_sharing", "trl"):
        run = summary[name]
        ax.plot(
            range(1, len(run["reward_curve"]) + 1),
            run["reward_curve"],
            label=f"{name}: {run['tokens_per_s']:.0f} tok/s, final success {run['eval_success']:.2f}",
        )
    ax.axhline(
        summary["warm_start_success"], color="gray", linestyle=":", label="warm start (greedy success)"
    )
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("mean rollout reward")
    ax.set_title("MathQA-v0, tiny Qwen3, same budget")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
