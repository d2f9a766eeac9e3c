"""Train an LLM with GRPO/DAPO on MathQA-v1 or CSRPhone-v1, from a supervised warm start, on CPU.

    python examples/train_grpo.py                       # MathQA-v1 (preset math-qa)
    python examples/train_grpo.py csr-tiny              # CSRPhone-v1: tiny model, constrained copy arguments, d1
    python examples/train_grpo.py csr-smollm2 --difficulty 3                     # a real pretrained model
    python examples/train_grpo.py reasoning-gym --grpo.env-kwargs '{"dataset": "basic_arithmetic"}'  # interop extra
    python examples/train_grpo.py math-qa --grpo.model Qwen/Qwen3-0.6B --grpo.device cuda --expert.episodes 0
    python examples/train_grpo.py csr-tiny --help                                # every setting, with its help
    python examples/train_grpo.py --config my_run.yaml --grpo.num-steps 50      # a file, then flags
    python examples/train_grpo.py --resume runs/train_grpo                     # continue a run

MathQA-v1 (``math-qa``): (1) record an imperfect expert (the worked solution, whose final answer is corrupted
with probability ``--expert.noise``); (2) train a byte-level BPE tokenizer and a tiny Qwen3 on that text (skipped
for a real ``--grpo.model``); (3) SFT warm start; (4) GRPO with validation on the test split.

ReasoningGym-v0 (``reasoning-gym``, needs the ``interop`` extra): the same four stages on a reasoning-gym dataset
(``leg_counting`` by default), the expert answering ``<answer>reference</answer>`` (another task's answer with
probability ``--expert.noise``), validated on the test split.

CSRPhone-v1 (``csr-tiny``, ``csr-smollm2``): DAPO on the env's 0/1 task reward (``--shaping progress`` adds
partial credit) with the model's preset (the env's registered presets, ``grpo_presets("CSRPhone-v1")``: ``tiny`` decodes with
constrained copy arguments, ``smollm2-135m`` freely), from a cached warm start (SFT on the scripted expert at
difficulties 1-3, train split, ``--warm-start-dir``), validated on validation-split companies. Another pretrained
model gets SmolLM2's settings: ``csr-smollm2 --warm-start.model path/or/hub-name``.

Writes config.json (the resolved settings), metrics.jsonl, checkpoints, curve.json and curve.png to
``--grpo.output-dir``.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

import worldgym  # noqa: F401  (registers the env ids)
from worldgym.agents.grpo import GRPOConfig, GRPOTrainer, grpo_preset
from worldgym.agents.grpo.presets import at_difficulty, make_engine
from worldgym.agents.llm import Episode, SFTConfig, load_chat_model, sft_train, tiny_chat_model
from worldgym.agents.llm.warm_start import WarmStartConfig, demonstrations, load_or_train_warm_start
from worldgym.cli import parse_run, save_run_config
from worldgym.config import check_choice, check_positive_int, check_range
from worldgym.envs.csr_phone.world import DIFFICULTIES


@dataclass
class ExpertWarmStart:
    """MathQA-v1's supervised warm start on an imperfect expert (seeded by grpo.seed).

    Attributes:
        episodes: expert episodes recorded (0 = no SFT, e.g. for a real model that already answers).
        noise: probability that the expert's final answer is wrong (its worked steps are kept).
        epochs: SFT passes over the episodes.
        batch_size: SFT chats per optimizer step.
        learning_rate: SFT learning rate.
        vocab_size: size of the byte-level BPE tokenizer trained for a tiny model.
    """

    episodes: int = 2000
    noise: float = 0.3
    epochs: int = 3
    batch_size: int = 32
    learning_rate: float = 3e-3
    vocab_size: int = 2000

    def __post_init__(self) -> None:
        check_range("episodes", self.episodes, 0, None)
        check_range("noise", self.noise, 0, 1)
        for name in ("epochs", "batch_size", "vocab_size"):
            check_positive_int(name, getattr(self, name))
        check_range("learning_rate", self.learning_rate, 0, None, low_open=True)


@dataclass
class MathQARun:
    """GRPO on MathQA-v1 from an SFT warm start.

    Attributes:
        grpo: the trainer's settings.
        expert: the supervised warm start.
    """

    grpo: GRPOConfig = field(default_factory=lambda: GRPOConfig(
        env_id="MathQA-v1", env_kwargs={"difficulty": 1, "num_problems": 5000},
        eval_env_kwargs={"split": "test", "num_problems": 500}, max_turns=1, max_new_tokens=24, num_steps=100,
        prompts_per_step=16, group_size=8, minibatch_size=128, learning_rate=3e-4, finetune="full", eval_every=10,
        eval_episodes=256, output_dir="runs/train_grpo"))
    expert: ExpertWarmStart = field(default_factory=ExpertWarmStart)


@dataclass
class ReasoningGymRun:
    """GRPO on a ReasoningGym-v0 task (a reasoning-gym dataset) from an SFT warm start.

    Attributes:
        grpo: the trainer's settings (env_kwargs: the dataset, its size and settings).
        expert: the supervised warm start on the dataset's reference answers.
    """

    grpo: GRPOConfig = field(default_factory=lambda: GRPOConfig(
        env_id="ReasoningGym-v0", env_kwargs={"dataset": "leg_counting", "size": 5000},
        eval_env_kwargs={"split": "test", "size": 500}, max_turns=1, max_new_tokens=16, num_steps=100,
        prompts_per_step=16, group_size=8, minibatch_size=128, learning_rate=3e-4, finetune="full", eval_every=10,
        eval_episodes=256, output_dir="runs/train_grpo"))
    expert: ExpertWarmStart = field(default_factory=ExpertWarmStart)


@dataclass
class CSRRun:
    """DAPO on CSRPhone-v1's 0/1 task reward from a cached warm start.

    Attributes:
        grpo: the trainer's settings (the model's preset; env_kwargs hold the split and difficulty).
        warm_start: what the cached SFT warm start is trained from (every field is part of its cache key).
        difficulty: when set, the difficulty trained and validated (replaces it in grpo.env_kwargs and
            grpo.eval_env_kwargs).
        shaping: "none" (the env's 0/1 reward) or "progress" (partial credit for reaching a department and
            passing its authentication).
        warm_start_dir: where warm starts are cached.
        engine_batch_size: episodes generated together.
        kv_cache_max_tokens: the rollout engine's KV store.
    """

    grpo: GRPOConfig
    warm_start: WarmStartConfig
    difficulty: int | None = None
    shaping: Literal["none", "progress"] = "none"
    warm_start_dir: str = "runs/warm_starts"
    engine_batch_size: int = 32
    kv_cache_max_tokens: int = 131072

    def __post_init__(self) -> None:
        check_choice("difficulty", self.difficulty, [None, *DIFFICULTIES])
        check_choice("shaping", self.shaping, ["none", "progress"])
        check_positive_int("engine_batch_size", self.engine_batch_size)
        check_positive_int("kv_cache_max_tokens", self.kv_cache_max_tokens)

    @classmethod
    def from_preset(cls, model: str) -> CSRRun:
        """The example's run of CSRPhone-v1's preset ``model``: 30 steps, validation every 5 on 64 tasks."""
        preset = grpo_preset("CSRPhone-v1", model)
        grpo = preset.grpo_config(1, num_steps=30, eval_every=5, eval_episodes=64, output_dir="runs/train_grpo")
        return cls(grpo, preset.warm_start, engine_batch_size=preset.engine_batch_size,
                   kv_cache_max_tokens=preset.kv_cache_max_tokens)

    def resolved_grpo(self) -> GRPOConfig:
        """``grpo`` with ``difficulty`` applied."""
        return at_difficulty(self.grpo, self.difficulty)


PRESETS: dict[str, tuple[str, MathQARun | ReasoningGymRun | CSRRun]] = {
    "math-qa": ("GRPO on MathQA-v1: tiny model, SFT on a noisy expert, full fine-tuning.", MathQARun()),
    "reasoning-gym": ("GRPO on ReasoningGym-v0 (leg_counting): tiny model, SFT on a noisy expert (interop extra).",
                      ReasoningGymRun()),
    "csr-tiny": ("DAPO on CSRPhone-v1: tiny model, constrained copy arguments.", CSRRun.from_preset("tiny")),
    "csr-smollm2": ("DAPO on CSRPhone-v1: SmolLM2-135M-Instruct with LoRA, free decoding (`make smollm2`).",
                    CSRRun.from_preset("smollm2-135m")),
}


# CSR reply types that mean a call reached a real department (the number was copied right) ...
_REACHED_DEPARTMENT = {"auth_request", "auth_failed", "service_provided", "task_complete", "routing",
                       "wrong_department", "prerequisite_required"}
# ... and those that mean the representative accepted the caller's authentication.
_AUTHENTICATED = {"service_provided", "task_complete", "routing", "wrong_department", "prerequisite_required"}


def csr_progress_reward(episode: Episode) -> float:
    """Training reward with partial credit: 1.0 for a completed task, else 0.2 for reaching a department and
    0.2 more for passing its authentication (read from the turns' ``response_type``). A tiny warm-started
    model rarely completes a task, so the sparse 0/1 reward alone gives GRPO almost no signal."""
    if episode.success:
        return 1.0
    replies = {turn.info.get("response_type") for turn in episode.turns}
    return 0.2 * bool(replies & _REACHED_DEPARTMENT) + 0.2 * bool(replies & _AUTHENTICATED)


def shared_env_factories(config: GRPOConfig) -> dict[str, Any]:
    """MathQA: generate each split's problems once and share them between the (many) rollout envs."""
    from worldgym.envs.math_qa import MathQAEnv, generate_problems

    kwargs, eval_kwargs = config.env_kwargs, {**config.env_kwargs, **config.eval_env_kwargs}
    train = generate_problems(kwargs["num_problems"], "train", kwargs["difficulty"], seed=0)
    test = generate_problems(eval_kwargs["num_problems"], "test", eval_kwargs["difficulty"], seed=0)
    return {
        "make_env": lambda: MathQAEnv("train", problems=train),
        "make_eval_env": lambda: MathQAEnv("test", problems=test),
    }


# ---------------------------------------------------------------- main
def train_csr(run: CSRRun, resume: bool) -> GRPOTrainer:
    """CSRPhone-v1: the cached warm start, then DAPO on the 0/1 reward."""
    warm = load_or_train_warm_start(run.warm_start, cache_dir=run.warm_start_dir)
    print(f"warm start: {warm.path} ({warm.summary['chats']} expert chats)")
    config = run.resolved_grpo()
    tokenizer = warm.tokenizer
    trainer = GRPOTrainer(
        config, model=warm.model.to(config.device), tokenizer=tokenizer,
        reward_fn=csr_progress_reward if run.shaping == "progress" else None,
        make_engine=lambda policy: make_engine(policy, tokenizer, batch_size=run.engine_batch_size,
                                               reuse_kv_cache=True, kv_cache_max_tokens=run.kv_cache_max_tokens))
    return _train(trainer, resume)


def train_single_turn(run: MathQARun | ReasoningGymRun, resume: bool) -> GRPOTrainer:
    """MathQA-v1 or ReasoningGym-v0: expert episodes, tokenizer and tiny model (or a real one), SFT, then GRPO.

    The demonstrations come from the env's registered expert (its noisy expert, seeded by ``grpo.seed``), as in
    every warm start; the SFT runs here, on the run's own model (a tiny one's tokenizer is trained on them), and
    is not cached: a resumed run loads its checkpoint instead."""
    config, expert = run.grpo, run.expert
    reasoning = isinstance(run, ReasoningGymRun)

    # 1. expert demonstrations, as text actions
    chats = demonstrations(config.env_id, config.env_kwargs, range(expert.episodes), max_turns=config.max_turns,
                           seed=config.seed, noise=expert.noise)
    if chats:
        print(f"expert: {len(chats)} episodes, mean reward {np.mean([c.reward for c in chats]):.3f}")

    # 2. tokenizer + model
    if config.model in ("tiny", "small"):
        corpus = [m["content"] for chat in chats for m in chat.messages]
        corpus += [json.dumps(t) for t in (chats[0].tools or [])] if chats else []
        loaded = tiny_chat_model(corpus, config.model, seed=config.seed, vocab_size=expert.vocab_size)
    else:
        loaded = load_chat_model(config.model)
    tokenizer, model = loaded.tokenizer, loaded.model
    model.to(config.device)
    print(f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, vocab {len(tokenizer)}")

    # 3. SFT warm start (a resumed run loads its trained weights instead)
    if chats and not resume:
        start = time.perf_counter()
        losses = sft_train(model, tokenizer, chats, SFTConfig(
            epochs=expert.epochs, batch_size=expert.batch_size, learning_rate=expert.learning_rate,
            seed=config.seed, bucket_by_length=config.max_turns > 1))  # long multi-turn chats: less padding
        print(f"sft: loss {losses[0]:.3f} -> {losses[-1]:.3f} in {time.perf_counter() - start:.0f}s")

    # 4. GRPO
    factories = {} if reasoning else shared_env_factories(config)  # ReasoningGym-v0 shares its splits itself
    trainer = GRPOTrainer(config, model=model, tokenizer=tokenizer, **factories)
    return _train(trainer, resume)


def _train(trainer: GRPOTrainer, resume: bool) -> GRPOTrainer:
    if resume:
        resumed = trainer.resume_latest()
        print(f"resumed from {resumed} at step {trainer.step}" if resumed else "no checkpoint yet: a fresh run")
    trainer.train()
    trainer.close()
    return trainer


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parsed = parse_run(PRESETS, argv, description=__doc__)
    run = parsed.run
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    config = run.resolved_grpo() if isinstance(run, CSRRun) else run.grpo
    out = Path(config.output_dir)
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun (ddp/fsdp learners) rank 0 writes the files
        save_run_config(out, parsed.preset, run)
    start = time.perf_counter()
    trainer = train_csr(run, parsed.resume) if isinstance(run, CSRRun) else train_single_turn(run, parsed.resume)
    if not trainer.is_main:
        return {}
    model = run.warm_start.model if isinstance(run, CSRRun) else config.model
    return write_curve(trainer.history, out, config.env_id, model, time.perf_counter() - start)


def write_curve(history: list[dict[str, Any]], out: Path, env_id: str, model: str, seconds: float) -> dict[str, Any]:
    """curve.json and curve.png: validation success and rollout reward per step."""
    evals = [(m["step"], m["eval/success_rate"]) for m in history if "eval/success_rate" in m]
    eval_shaped = [(m["step"], m["eval/shaped_reward_mean"]) for m in history
                   if "eval/shaped_reward_mean" in m]
    rollout = [(m["step"], m["rollout/reward_mean"]) for m in history if "rollout/reward_mean" in m]
    shaped = [(m["step"], m["rollout/shaped_reward_mean"]) for m in history
              if "rollout/shaped_reward_mean" in m]
    summary = {
        "env": env_id,
        "model": model,
        "seconds": seconds,
        "eval_success": evals,
        "rollout_reward": rollout,
        "eval_shaped_reward": eval_shaped,
        "rollout_training_reward": shaped,  # what GRPO optimised (differs from rollout_reward with --shaping)
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
    if shaped != rollout:
        ax.plot(*zip(*shaped), alpha=0.5, label="rollout training reward (shaped)")
    if evals:
        ax.plot(*zip(*evals), marker="o", label="validation success (greedy, test split)")
    if eval_shaped:
        ax.plot(*zip(*eval_shaped), marker="s", label="validation shaped reward (greedy)")
    ax.set_xlabel("GRPO step")
    ax.set_title(f"GRPO on {env_id} ({model} model, SFT warm start at step 0)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "curve.png", dpi=120)
    return summary


if __name__ == "__main__":
    main()
