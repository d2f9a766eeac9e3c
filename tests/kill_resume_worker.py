"""Tiny training runs of every trainer, each in a process of its own, for ``tests/test_kill_resume.py``.

:func:`train` builds a tiny run of one trainer writing to ``run_dir`` (a checkpoint after every step) and trains
it to its last step, first resuming from the newest checkpoint in ``run_dir`` the way that trainer resumes:

* GRPO, dual-LoRA and Z-token PPO: ``trainer.resume_latest()`` (what the examples' ``--resume`` and the
  benchmarks call);
* Dreamer v3: ``engine.run(resume_from=latest_checkpoint(run_dir))`` (the example's ``--resume``), on the
  homebrew Game Boy task, whose save states let a resumed run continue the episodes in progress.

Started again after a SIGKILL, a run therefore continues where its surviving checkpoint left it. Each start
appends ``{"resumed_from": <checkpoint or null>}`` to ``<run_dir>.starts.jsonl``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from worldgym.checkpointing import CRASH_ENV, latest_checkpoint, open_checkpoint, read_tensors
from worldgym.jsonl import append_jsonl

TRAINERS = ("grpo", "ztoken_ppo", "dreamer_v3", "dual_lora")
# the metrics.jsonl key that counts a trainer's training steps (records with it at 0 are evaluations)
STEP_KEY = {"grpo": "step", "dual_lora": "step", "ztoken_ppo": "step", "dreamer_v3": "iter"}
# the libraries every run imports: a forkserver loads them once, so each run starts in a fraction of a second
PRELOAD = ["torch", "transformers", "peft", "worldgym.agents.grpo", "worldgym.agents.dual_lora",
           "worldgym.agents.ztoken_ppo", "worldgym.agents.dreamer_v3", __name__]  # fmt: skip

LLM_STEPS = 4  # GRPO and dual-LoRA runs: steps to the end
_TESTS = Path(__file__).resolve().parent
MATH_TOKENIZER, CSR_TOKENIZER = "math_tokenizer", "csr_tokenizer"


def _dual_lora_fixtures():
    """``tests/agents/dual_lora/conftest.py``: its CSR env factory, tool calls and scripted ``PhoningEngine``."""
    spec = importlib.util.spec_from_file_location(
        "dual_lora_fixtures", _TESTS / "agents/dual_lora/conftest.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- shared assets
def prepare_assets(assets: str | Path) -> None:
    """Train the tokenizers the LLM runs share, as the LLM tests' fixtures do, and save them under ``assets``."""
    from worldgym.agents.dual_lora import WM_SPECIAL_TOKENS
    from worldgym.agents.llm.tokenizer import env_text_corpus, train_chat_tokenizer
    from worldgym.envs.math_qa import generate_problems

    assets = Path(assets)
    problems = generate_problems(300, seed=0)  # tests/agents/conftest.py's tokenizer
    corpus = [p.question + "\n" + p.solution for p in problems]
    corpus += ['<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'] * 20
    train_chat_tokenizer(corpus, vocab_size=600).save_pretrained(assets / MATH_TOKENIZER)
    csr = _dual_lora_fixtures()  # tests/agents/dual_lora/conftest.py's csr_tokenizer
    corpus = env_text_corpus(csr.make_csr_env, num_resets=50) + [csr.PHONE_CALL, csr.SEARCH] * 10
    tokenizer = train_chat_tokenizer(corpus, vocab_size=800, extra_special_tokens=WM_SPECIAL_TOKENS)
    tokenizer.save_pretrained(assets / CSR_TOKENIZER)


# ---------------------------------------------------------------- one run per trainer
def _grpo(
    run_dir: Path, assets: Path, num_steps: int = LLM_STEPS
) -> tuple[object, Callable[[], Path | None]]:
    from worldgym.agents.grpo import GRPOConfig, GRPOTrainer
    from worldgym.agents.llm.models import build_tiny_model, load_tokenizer
    from worldgym.envs.math_qa import MathQAEnv

    tokenizer = load_tokenizer(assets / MATH_TOKENIZER)
    config = GRPOConfig(
        num_steps=num_steps,
        prompts_per_step=2,
        group_size=4,
        max_new_tokens=8,
        learning_rate=1e-2,
        minibatch_size=4,
        dynamic_sampling=True,
        max_resample_rounds=1,
        eval_every=2,
        eval_episodes=4,
        checkpoint_every=1,
        save_total_limit=1,
        progress=False,
        output_dir=str(run_dir),
    )
    trainer = GRPOTrainer(
        config,
        model=build_tiny_model(tokenizer, seed=0),
        tokenizer=tokenizer,
        make_env=lambda: MathQAEnv(num_problems=30),
        make_eval_env=lambda: MathQAEnv("test", num_problems=8),
    )
    return trainer, trainer.resume_latest


def _dual_lora(
    run_dir: Path, assets: Path, num_steps: int = LLM_STEPS
) -> tuple[object, Callable[[], Path | None]]:
    from worldgym.agents.dual_lora import DualLoRAConfig, DualLoRATrainer
    from worldgym.agents.llm.models import build_tiny_model, load_tokenizer

    csr = _dual_lora_fixtures()
    tokenizer = load_tokenizer(assets / CSR_TOKENIZER)
    # tests/agents/dual_lora/test_trainer.py's settings (2 turns, not 3: half the time), with replay so its state
    # must survive the resume too: 4 calls a step, 6 kept, so the oldest go and so do the segments only they need
    config = DualLoRAConfig(
        env_id="CSRPhone-v1",
        env_kwargs={"difficulty": 1},
        eval_env_kwargs={"split": "validation", "difficulty": 1},
        max_turns=2,
        num_steps=num_steps,
        prompts_per_step=2,
        group_size=2,
        max_new_tokens=40,
        eval_every=2,
        eval_episodes=2,
        minibatch_size=4,
        learning_rate=1e-2,
        wm_replay_fraction=0.5,
        wm_replay_capacity=6,
        checkpoint_every=1,
        save_total_limit=1,
        progress=False,
        output_dir=str(run_dir),
    )
    trainer = DualLoRATrainer(
        config,
        model=build_tiny_model(tokenizer, seed=0),
        tokenizer=tokenizer,
        make_env=csr.make_csr_env,
        make_engine=lambda policy: csr.PhoningEngine(tokenizer),
    )
    return trainer, trainer.resume_latest


def _ztoken_ppo(run_dir: Path, assets: Path) -> tuple[object, Callable[[], Path | None]]:
    from worldgym.agents.ztoken_ppo import ZTokenModelConfig, ZTokenPPOConfig, ZTokenPPOTrainer

    env_kwargs = {"num_z_tokens": 4, "max_new_tokens": 4, "operand_digits": 1}
    # tests/agents/ztoken_ppo's tiny model and PPO settings
    model = ZTokenModelConfig(
        hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16, intermediate_size=64
    )
    config = ZTokenPPOConfig(
        model=model,
        env_kwargs=env_kwargs,
        num_envs=4,
        episodes_per_rollout=16,
        num_steps=4,
        update_epochs=2,
        num_minibatches=2,
        eval_episodes=8,
        eval_every=2,
        checkpoint_every=1,
        learning_rate=1e-3,
        progress=False,
        output_dir=str(run_dir),
    )
    trainer = ZTokenPPOTrainer(config)
    return trainer, trainer.resume_latest


class _DreamerRun:
    """``train()`` of a Dreamer v3 run: the CPU engine on two homebrew Game Boys, resumed with ``run()``."""

    def __init__(self, run_dir: Path) -> None:
        from worldgym.agents.dreamer_v3 import CPUEngine, LossConfig, ReplayConfig, ScheduleConfig, model_size
        from worldgym.agents.dreamer_v3.gameboy import gameboy_config, make_gameboy_env

        # tests/agents/dreamer_v3/test_gameboy_integration.py's tiny config; 12-step episodes span checkpoints
        config = gameboy_config(
            num_envs=2, num_steps=64, seed=1, model=model_size("tiny"),
            replay=ReplayConfig(capacity=128, seq_len=8, batch_size=4, min_ready_steps=8, safety_margin=8,
                                commit_stride=4),
            schedule=ScheduleConfig(replay_ratio=0.5, learning_starts=16, pretrain_steps=1, rollout_window=4),
            loss=LossConfig(horizon=4), log_every=8, checkpoint_every=8, save_total_limit=2, output_dir=str(run_dir),
        )  # fmt: skip
        env, transform = make_gameboy_env(2, task="sprite_goal", max_episode_steps=13)
        self.engine = CPUEngine(config, env=env, obs_transform=transform)
        self.run_dir = run_dir
        self.resumed_from: Path | None = None

    @property
    def step(self) -> int:
        """The iteration (what the checkpoints are numbered by)."""
        return self.engine.core.counters.iter_num

    @property
    def saver(self) -> object:
        """What saves the checkpoints (``save()``): the engine's core."""
        return self.engine.core

    def resume(self) -> Path | None:
        self.resumed_from = latest_checkpoint(self.run_dir)
        return self.resumed_from

    def train(self) -> None:
        self.engine.run(resume_from=self.resumed_from, progress=False)


def _dreamer_v3(run_dir: Path, assets: Path) -> tuple[object, Callable[[], Path | None]]:
    os.environ.setdefault("WORLDGYM_WARP_CACHE", str(Path.home() / ".cache" / "worldgym" / "warp"))
    run = _DreamerRun(run_dir)
    return run, run.resume


_BUILDERS = {"grpo": _grpo, "dual_lora": _dual_lora, "ztoken_ppo": _ztoken_ppo, "dreamer_v3": _dreamer_v3}


def crash_saves_from(trainer, stage: str, first_step: int) -> None:
    """Make ``trainer``'s saves at ``trainer.step >= first_step`` SIGKILL this process at ``stage`` of the save
    (through :data:`~worldgym.checkpointing.CRASH_ENV`); the earlier saves complete. The saves are those of
    ``trainer.saver`` where it has one (Dreamer's engine core), else of ``trainer``."""
    owner = getattr(trainer, "saver", trainer)
    save = owner.save

    def save_or_crash(*args):
        if trainer.step >= first_step:
            os.environ[CRASH_ENV] = stage
        return save(*args)

    owner.save = save_or_crash


def train(
    trainer: str,
    run_dir: str,
    assets: str,
    log: str,
    crash: tuple[str, int] | None = None,
    num_steps: int | None = None,
) -> None:
    """Train a tiny run of ``trainer`` in ``run_dir`` to its end, resuming from its newest checkpoint.

    Output and tracebacks go to the file ``log``. ``crash=(stage, first_step)`` has the first save at step
    ``first_step`` or later SIGKILL the process at ``stage`` (see :func:`crash_saves_from`; GRPO, dual-LoRA and
    Dreamer v3). GRPO and dual-LoRA only: ``num_steps`` stops the same run earlier (its later steps do not change).
    """
    with open(log, "a") as output:
        os.dup2(output.fileno(), 1)
        os.dup2(output.fileno(), 2)
    torch.set_num_threads(1)
    run_dir_path = Path(run_dir)
    settings = {} if num_steps is None else {"num_steps": num_steps}
    run, resume = _BUILDERS[trainer](run_dir_path, Path(assets), **settings)
    resumed_from = resume()
    append_jsonl(
        f"{run_dir}.starts.jsonl", {"resumed_from": None if resumed_from is None else str(resumed_from)}
    )
    if crash is not None:
        crash_saves_from(run, *crash)
    run.train()


# ---------------------------------------------------------------- reading a finished run
def final_weights(trainer: str, run_dir: str | Path) -> dict[str, torch.Tensor]:
    """The trainable weights in the final checkpoint of a finished run (checked against its manifest)."""
    from worldgym.agents.dreamer_v3 import checkpoint as dreamer
    from worldgym.agents.llm.checkpoint import load_checkpoint
    from worldgym.agents.ztoken_ppo import checkpoint as ztoken

    run_dir = Path(run_dir)
    if trainer in ("grpo", "dual_lora"):
        return load_checkpoint(run_dir / "checkpoint-last")[0]
    if trainer == "ztoken_ppo":
        weights = ztoken.POLICY_WEIGHTS
        root = open_checkpoint(
            run_dir / "checkpoint-last", ztoken.KIND, ztoken.FORMAT_VERSION, required=(weights,)
        )
        return read_tensors(root / weights)
    path = latest_checkpoint(run_dir)
    root = open_checkpoint(path, dreamer.KIND, dreamer.FORMAT_VERSION, required=("model.safetensors",))
    return read_tensors(root / "model.safetensors")


if __name__ == "__main__":
    sys.exit("import this module: tests/test_kill_resume.py runs it in forked processes")
