"""GRPO throughput and reward: worldgym's GRPOTrainer vs TRL's GRPOTrainer (loss_type="dapo"), side by side.

Both trainers get the same Qwen3 (copied for each), tokenizer, MathQA-v1 training problems, group size, batch,
learning rate, completion budget and step budget, and both do full fine-tuning or both LoRA (r 16, alpha 32, all
linear layers). Reported: training tokens/s (prompt + completion tokens per wall-clock second of the whole
step, generation + update; also per CPU-second of the process, which other jobs on the machine disturb
less) and greedy validation success on the test split after the budget, measured by one
evaluator (worldgym's ``evaluate_chat_policy``) for every model. Ours runs twice: as configured by default (a
group's shared prompt runs once, in the engine's prefill and in the training pass) and with
``share_prompt_prefix=False``, which shows how much of the gap that one optimisation makes.

Two settings, each in both finetune modes:

* ``overhead``: the ``tiny`` model (~0.46M parameters) after SFT on an imperfect expert, 24-token budget.
  Answers are ~9 tokens, so Python/framework overhead per step dominates.
* ``compute``: the ``small`` model (~3.3M parameters), 192-token budget, from random weights: an untrained
  model rarely samples its stop token, so completions run long (~165 tokens on average, well over 128) and the
  matrix work dominates.
  Rewards stay ~0 there (nothing is learned in a few steps): that setting measures speed only.

Writes ``grpo_vs_trl.json`` (every setting and mode with the command that reruns it alone) and
``grpo_vs_trl.png`` to ``--results-dir`` (default benchmarks/results). ``--quick`` runs both settings on the
tiny model for 1-2 steps in seconds (its figures mean nothing; they go to runs/benchmarks/quick).

    OMP_WAIT_POLICY=PASSIVE python benchmarks/grpo_vs_trl.py                    # all settings and modes
    OMP_WAIT_POLICY=PASSIVE python benchmarks/grpo_vs_trl.py --setting compute --finetune lora
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from worldgym.agents.grpo import GRPOConfig, GRPOTrainer
from worldgym.agents.llm import (
    HFEngine,
    SFTConfig,
    build_tiny_model,
    collect_expert_chats,
    sft_train,
    train_chat_tokenizer,
)
from worldgym.agents.llm.evaluation import evaluate_chat_policy
from worldgym.envs.math_qa import SYSTEM_PROMPT, MathProblem, MathQAEnv, MathRewardModel, generate_problems

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: find the benchmarks package
from benchmarks.common import results_dir, results_parser, write_json

SCRIPT = "benchmarks/grpo_vs_trl.py"
FINETUNE_MODES = ("full", "lora")
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Setting:
    """One model size and completion regime (the same for both trainers)."""

    description: str
    model_size: Literal["tiny", "small"]
    max_new_tokens: int
    steps: int
    expert_episodes: int  # expert chats: the tokenizer's corpus and, with sft_epochs > 0, the warm start
    sft_epochs: int  # 0 = random weights (completions run to the budget)
    eval_episodes: int
    prompts_per_step: int = 8
    group_size: int = 8
    learning_rate: float = 3e-4


SETTINGS = {
    "overhead": Setting("tiny model after SFT, ~9-token answers: framework overhead dominates",
                        "tiny", 24, steps=30, expert_episodes=2000, sft_epochs=3, eval_episodes=200),
    "compute": Setting("small model from random weights, 192-token budget: compute dominates",
                       "small", 192, steps=8, expert_episodes=2000, sft_epochs=0, eval_episodes=64),
}
QUICK_SETTINGS = {
    "overhead": Setting("quick smoke run", "tiny", 8, steps=2, expert_episodes=64, sft_epochs=1,
                        eval_episodes=4, prompts_per_step=2, group_size=2),
    "compute": Setting("quick smoke run", "tiny", 16, steps=1, expert_episodes=64, sft_epochs=0,
                       eval_episodes=4, prompts_per_step=2, group_size=2),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, parents=[results_parser()]
    )
    parser.add_argument("--setting", choices=[*SETTINGS, "all"], default="all")
    parser.add_argument("--finetune", choices=[*FINETUNE_MODES, "both"], default="both")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                        help="both trainers' precision (ours: GRPOConfig.dtype; TRL: bf16=True); bf16 results go to "
                             "grpo_vs_trl_bfloat16.json")
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.error(f"--threads must be >= 1, got {args.threads}")
    return args


def command(args: argparse.Namespace, setting: str, finetune: str) -> str:
    """The command line that reruns one setting and mode (or the whole run), without machine paths."""
    flags = [f"--setting {setting}"] if setting != "all" else []
    flags += [f"--finetune {finetune}"] if finetune != "both" else []
    flags += ["--quick"] if args.quick else []
    flags += [f"--threads {args.threads}"] if args.threads != 2 else []
    flags += [f"--seed {args.seed}"] if args.seed != 0 else []
    flags += [f"--dtype {args.dtype}"] if args.dtype != "float32" else []
    return " ".join(["OMP_WAIT_POLICY=PASSIVE python", SCRIPT, *flags])


def warm_start(
    setting: Setting, train_problems: list[MathProblem], seed: int
) -> tuple[PreTrainedTokenizerBase, PreTrainedModel]:
    """Tokenizer trained on expert chats + a model of ``setting.model_size``, fine-tuned on the imperfect
    expert (final answer wrong 30% of the time) unless ``setting.sft_epochs`` is 0."""
    rng = np.random.default_rng(seed)

    def expert(env, observation, info):
        problem = env.unwrapped.problem(info["index"])
        if rng.random() < 0.3:
            return (
                problem.solution.rsplit("####", 1)[0]
                + f"#### {int(problem.answer) + int(rng.choice([-1, 1]))}"
            )
        return problem.solution

    make_env = lambda: MathQAEnv(problems=train_problems)
    chats = collect_expert_chats(make_env, expert, range(setting.expert_episodes))
    tokenizer = train_chat_tokenizer([m["content"] for c in chats for m in c.messages], vocab_size=2000)
    model = build_tiny_model(tokenizer, setting.model_size, seed=seed)
    if setting.sft_epochs:
        sft = SFTConfig(epochs=setting.sft_epochs, batch_size=32, learning_rate=3e-3, progress=False)
        sft_train(model, tokenizer, chats, sft)
    return tokenizer, model


def greedy_success(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    test_problems: list[MathProblem],
    setting: Setting,
) -> float:
    """Greedy validation success of any (plain or PEFT) model, through worldgym's evaluator."""
    engine = HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id])
    metrics, _ = evaluate_chat_policy(
        engine,
        tokenizer,
        lambda: MathQAEnv("test", problems=test_problems),
        setting.eval_episodes,
        max_turns=1,
        max_new_tokens=setting.max_new_tokens,
    )
    return metrics["eval/success_rate"]


def trainable_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def run_ours(
    setting: Setting,
    finetune: str,
    tokenizer: PreTrainedTokenizerBase,
    model: PreTrainedModel,
    train_problems: list[MathProblem],
    output_dir: Path,
    seed: int,
    share_prompt_prefix: bool = True,
    dtype: str = "float32",
) -> tuple[dict[str, Any], PreTrainedModel]:
    config = GRPOConfig(
        dtype=dtype,
        share_prompt_prefix=share_prompt_prefix,
        finetune=finetune,
        lora_rank=16,
        lora_alpha=32,
        lora_target_modules=LORA_TARGETS,
        num_steps=setting.steps,
        prompts_per_step=setting.prompts_per_step,
        group_size=setting.group_size,
        max_new_tokens=setting.max_new_tokens,
        learning_rate=setting.learning_rate,
        minibatch_size=setting.prompts_per_step * setting.group_size,
        eval_every=0,
        progress=False,
        seed=seed,
        output_dir=str(output_dir),
    )
    trainer = GRPOTrainer(
        config, model=model, tokenizer=tokenizer, make_env=lambda: MathQAEnv(problems=train_problems)
    )
    start, cpu_start = time.perf_counter(), time.process_time()
    history = trainer.train()
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    trainer.close()
    tokens = sum(m["perf/step_tokens_per_s"] * m["time/step_s"] for m in history)
    return {
        "seconds": seconds,
        "tokens": tokens,
        "tokens_per_s": tokens / seconds,
        "cpu_seconds": cpu_seconds,
        "tokens_per_cpu_s": tokens / cpu_seconds,
        "completion_tokens_mean": float(np.mean([m["rollout/response_tokens_mean"] for m in history])),
        "trainable_parameters": trainable_parameters(trainer.policy),
        "reward_curve": [m["rollout/reward_mean"] for m in history],
    }, trainer.policy


def run_trl(
    setting: Setting,
    finetune: str,
    tokenizer: PreTrainedTokenizerBase,
    model: PreTrainedModel,
    train_problems: list[MathProblem],
    output_dir: Path,
    seed: int,
    dtype: str = "float32",
) -> tuple[dict[str, Any], PreTrainedModel]:
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
        output_dir=str(output_dir),
        loss_type="dapo",
        epsilon=0.2,
        epsilon_high=0.28,
        beta=0.0,
        num_generations=setting.group_size,
        per_device_train_batch_size=setting.prompts_per_step * setting.group_size,
        max_completion_length=setting.max_new_tokens,
        learning_rate=setting.learning_rate,
        max_steps=setting.steps,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        use_cpu=True,
        bf16=dtype == "bfloat16",
        gradient_checkpointing=False,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        seed=seed,
        temperature=1.0,
        top_p=1.0,
    )
    lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, task_type="CAUSAL_LM",
                      target_modules=list(LORA_TARGETS))
    trainer = TRLTrainer(
        model=model,
        reward_funcs=math_reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora if finetune == "lora" else None,
    )
    trainer.remove_callback(PrinterCallback)  # its per-step dicts would flood the output (logs are kept)
    start, cpu_start = time.perf_counter(), time.process_time()
    trainer.train()
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    logs = [entry for entry in trainer.state.log_history if "reward" in entry]
    tokens = max(entry.get("num_tokens", 0) for entry in logs)  # cumulative prompt + completion tokens
    return {
        "seconds": seconds,
        "tokens": tokens,
        "tokens_per_s": tokens / seconds,
        "cpu_seconds": cpu_seconds,
        "tokens_per_cpu_s": tokens / cpu_seconds,
        "completion_tokens_mean": float(np.mean([entry["completions/mean_length"] for entry in logs])),
        "trainable_parameters": trainable_parameters(trainer.model),
        "reward_curve": [entry["reward"] for entry in logs],
    }, trainer.model


def run_setting(name: str, setting: Setting, modes: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """Warm start once, then per finetune mode: ours, ours without prompt sharing, TRL; all evaluated alike."""
    train_problems = generate_problems(5000, "train", 1, seed=0)
    test_problems = generate_problems(500, "test", 1, seed=0)
    tokenizer, warm = warm_start(setting, train_problems, args.seed)
    warm_success = greedy_success(copy.deepcopy(warm), tokenizer, test_problems, setting)
    print(f"[{name}] warm start: {sum(p.numel() for p in warm.parameters()):,} parameters, "
          f"validation success {warm_success:.3f}")
    result: dict[str, Any] = {
        "setting": asdict(setting),
        "model_parameters": sum(p.numel() for p in warm.parameters()),
        "warm_start_success": warm_success,
    }
    for finetune in modes:
        runs: dict[str, Any] = {"command": command(args, name, finetune)}
        with tempfile.TemporaryDirectory(prefix="grpo_vs_trl_") as scratch:
            for key, share in (("worldgym", True), ("worldgym_no_prompt_sharing", False)):
                run, policy = run_ours(setting, finetune, tokenizer, copy.deepcopy(warm), train_problems,
                                       Path(scratch) / key, args.seed, share, args.dtype)
                run["eval_success"] = greedy_success(policy, tokenizer, test_problems, setting)
                runs[key] = run
            run, policy = run_trl(setting, finetune, tokenizer, copy.deepcopy(warm), train_problems,
                                  Path(scratch) / "trl", args.seed, args.dtype)
            run["eval_success"] = greedy_success(policy, tokenizer, test_problems, setting)
            runs["trl"] = run
        for measure in ("tokens_per_s", "tokens_per_cpu_s"):
            runs[f"{measure}_ratio"] = runs["worldgym"][measure] / runs["trl"][measure]
            runs[f"{measure}_ratio_no_prompt_sharing"] = (
                runs["worldgym_no_prompt_sharing"][measure] / runs["trl"][measure]
            )
        for key in ("worldgym", "worldgym_no_prompt_sharing", "trl"):
            report(f"[{name} {finetune}] {key}", runs[key])
        print(f"[{name} {finetune}] worldgym / TRL tokens/s: {runs['tokens_per_s_ratio']:.2f} "
              f"(without prompt sharing {runs['tokens_per_s_ratio_no_prompt_sharing']:.2f}); "
              f"per CPU-second {runs['tokens_per_cpu_s_ratio']:.2f}")
        result[finetune] = runs
    return result


def report(name: str, run: dict[str, Any]) -> None:
    print(f"{name}: {run['tokens_per_s']:.0f} tokens/s ({run['tokens_per_cpu_s']:.0f} per CPU-s), completions "
          f"{run['completion_tokens_mean']:.1f} tokens, success {run['eval_success']:.3f}, {run['seconds']:.0f}s")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    settings = QUICK_SETTINGS if args.quick else SETTINGS
    names = list(settings) if args.setting == "all" else [args.setting]
    modes = list(FINETUNE_MODES) if args.finetune == "both" else [args.finetune]
    import peft
    import transformers
    import trl

    load_before = os.getloadavg()
    summary: dict[str, Any] = {
        "command": command(args, args.setting, args.finetune),
        "quick": args.quick,
        "dtype": args.dtype,
        "machine": {
            "trl_version": trl.__version__,
            "torch_version": torch.__version__,
            "transformers_version": transformers.__version__,
            "peft_version": peft.__version__,
            "torch_threads": torch.get_num_threads(),
            "cpu_count": os.cpu_count(),
        },
        "settings": {name: run_setting(name, settings[name], modes, args) for name in names},
    }
    summary["machine"]["load_average_1min"] = {"start": load_before[0], "end": os.getloadavg()[0]}
    folder = results_dir(args)
    name = "grpo_vs_trl" + ("" if args.dtype == "float32" else f"_{args.dtype}")
    write_json(folder / f"{name}.json", summary)
    plot(summary, folder / f"{name}.png")
    return summary


TRAINERS = {
    "worldgym": ("worldgym", "tab:blue"),
    "worldgym_no_prompt_sharing": ("worldgym, no prompt sharing", "tab:cyan"),
    "trl": ("TRL", "tab:orange"),
}


def plot(summary: dict[str, Any], path: Path) -> None:
    """Left: tokens/s of the three trainers per setting and mode (ratios to TRL on top). Right: the reward
    curves of the settings that learn (from a warm start)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (speed, reward) = plt.subplots(1, 2, figsize=(13, 4.4))
    groups = [(name, mode) for name, result in summary["settings"].items()
              for mode in FINETUNE_MODES if mode in result]
    width = 0.27
    for offset, (key, (label, color)) in enumerate(TRAINERS.items()):
        values = [summary["settings"][name][mode][key]["tokens_per_s"] for name, mode in groups]
        speed.bar(np.arange(len(groups)) + (offset - 1) * width, values, width, label=label, color=color)
    for index, (name, mode) in enumerate(groups):
        runs = summary["settings"][name][mode]
        top = max(runs[key]["tokens_per_s"] for key in TRAINERS)
        ratios = f"{runs['tokens_per_s_ratio']:.2f}x\n({runs['tokens_per_cpu_s_ratio']:.2f}x)"
        speed.annotate(ratios, (index, top), ha="center", va="bottom", xytext=(0, 3), textcoords="offset points",
                       fontsize=9)
    labels = []
    for name, mode in groups:
        result = summary["settings"][name]
        length = result[mode]["worldgym"]["completion_tokens_mean"]
        labels.append(f"{name}\n{result['setting']['model_size']}, {mode}\n~{length:.0f} tokens/reply")
    speed.set_xticks(range(len(groups)), labels, fontsize=8)
    speed.set_yscale("log")
    bottom, top = speed.get_ylim()
    speed.set_ylim(bottom, top * 4)  # room for the legend above the bars
    speed.set_ylabel("training tokens/s (log scale)")
    speed.set_title("wall-clock throughput (label: worldgym / TRL; per CPU-second in brackets)", fontsize=10)
    speed.legend(fontsize=8, ncol=3, loc="upper center")

    styles = {"full": "-", "lora": "--"}
    for name, result in summary["settings"].items():
        if not result["setting"]["sft_epochs"]:
            continue  # random weights: rewards stay ~0, nothing to compare
        for mode in (m for m in FINETUNE_MODES if m in result):
            for key, (label, color) in TRAINERS.items():
                run = result[mode][key]
                reward.plot(range(1, len(run["reward_curve"]) + 1), run["reward_curve"], styles[mode],
                            color=color, label=f"{label} ({mode}): success {run['eval_success']:.2f}")
        reward.axhline(result["warm_start_success"], color="gray", linestyle=":",
                       label=f"warm start: success {result['warm_start_success']:.2f}")
        reward.set_title(f"MathQA-v1, {name} setting ({result['setting']['model_size']} model)")
    reward.set_xlabel("GRPO step")
    reward.set_ylabel("mean rollout reward")
    reward.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
