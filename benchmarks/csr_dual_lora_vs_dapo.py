"""Dual-LoRA world-model agent vs DAPO on CSRPhone-v1's 0/1 reward: same warm start, same task budget.

Every mode trains two fresh LoRA adapters' worth of settings on the CSR policy's cached warm start (frozen):
``dapo`` is the policy adapter alone (λ = 0; the world model is still evaluated), ``separate`` / ``stacked`` /
``shared`` / ``iwm`` are the dual-LoRA transfer modes (:class:`worldgym.agents.dual_lora.DualLoRAConfig`).
Validation is greedy on validation-split companies (never seen in training), episode ``i`` seeded
``10**6 + i``.

    python benchmarks/csr_dual_lora_vs_dapo.py run --model tiny --mode dapo --seed 0     # resumable
    python benchmarks/csr_dual_lora_vs_dapo.py run --model tiny --mode separate --seed 0
    python benchmarks/csr_dual_lora_vs_dapo.py final-eval --difficulties 2   # last checkpoints at d2
    python benchmarks/csr_dual_lora_vs_dapo.py step-time --mode separate     # s per step, no validation
    python benchmarks/csr_dual_lora_vs_dapo.py imagined-replies --mode separate-own-clip-imagined50
    python benchmarks/csr_dual_lora_vs_dapo.py demo-time                     # `make demo`'s wall time
    python benchmarks/csr_dual_lora_vs_dapo.py report
    python benchmarks/csr_dual_lora_vs_dapo.py run --model smollm2-135m --mode dapo --difficulty 3 \
        --mistake-rate 0.2 --continue-on 3        # from another warm start (flags as in csr_policy.py)
    python benchmarks/csr_dual_lora_vs_dapo.py step0 --difficulty 1   # the step-0 validation runs share
    python benchmarks/csr_dual_lora_vs_dapo.py run --mode dapo --final-test 1 2 3 4 5   # then the test split

Each run writes ``benchmarks/results/csr_dual_lora/<model>-<mode>-d<difficulty>-s<seed>.json`` (then
``-T<temperature>`` and the warm start's name, e.g. ``-mistakes0.2-continued-d3``, when they are not the
preset's); ``report`` merges the runs of each model, difficulty, temperature and warm start into
``benchmarks/results/csr_dual_lora_vs_dapo.json`` and ``.png``: real tasks (training episodes sampled,
dynamic-sampling resamples included, imagined ones not: those are counted apart) and steps to reach the
validation-success threshold, final success, world-model token accuracy and exact-reply rate by response type,
the imagined replies' type accuracy, and seconds per step relative to DAPO (overall, and per machine that made
parts of both: only those compare); final success also with a bootstrap 95% interval over seeds, then the
last validation's episodes within each. ``--device cuda`` runs a mode (and trains a warm start that is not cached
yet) on a GPU.

Every run of a setting starts from the same weights, so its step-0 validation is computed once (``step0``:
``csr_dual_lora/step0/<model>-d<difficulty><warm start>.json``, both kinds of world-model scoring) and a fresh
run whose setting it matches (model, warm start, difficulty, validation episodes and seeds, turns, tokens,
decoding) logs it instead of validating step 0. ``run --final-test D ...`` evaluates the last weights on
test-split companies at those difficulties; the part is then ``finished``. A part made with other settings
(steps, validation, batch: ``SETTING_FIELDS``) is never resumed: ``run`` refuses it unless ``--restart``
replaces it. ``csr_dual_lora_sweep.py`` runs many of these, a named sweep's missing ones first.

Every stage also takes ``--results-dir`` (where part files and the report go; default ``benchmarks/results``)
and ``--quick``: 2 DAPO steps of 2 x 2 episodes of at most 4 calls, 4 validation episodes, the packaged tiny warm
start, run folders under ``<results-dir>/runs/`` (``run --quick --mode dapo``, ``run --quick --mode separate``,
then ``report --quick`` check the pipeline in about a minute; the figures mean nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fnmatch
import gc
import json
import os
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

import worldgym  # noqa: F401  (registers the ids)
from worldgym.agents.dual_lora import DualLoRAConfig, DualLoRATrainer, wm_success_correlation
from worldgym.agents.dual_lora.imagination import PhoneCallImagination
from worldgym.agents.dual_lora.presets import dual_lora_config, engine, warm_start_config
from worldgym.agents.grpo.trainer import EPISODE_SUCCESS_KEY
from worldgym.agents.llm.allocator import release_free_heap
from worldgym.agents.llm.engines import SamplingParams
from worldgym.agents.llm.evaluation import VALIDATION_SEEDS_START
from worldgym.agents.llm.warm_start import WarmStart, WarmStartConfig, expert_chats
from worldgym.checkpointing import latest_checkpoint, step_checkpoint
from worldgym.jsonl import read_jsonl
from worldgym.machine import machine_info, machine_label

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: find the benchmarks package
from benchmarks.common import (
    add_batch_flags,
    batch_command,
    batch_settings,
    portable,
    results_dir,
    results_parser,
    set_torch_threads,
    temperature_suffix,
    train_in_chunks,
    write_json,
)
from benchmarks.csr_warm_starts import (
    DIFFICULTIES,
    load_chosen,
    selected_config,
    warm_start_command,
    warm_start_flags,
    warm_start_suffix,
)
from benchmarks.evaluation_jobs import Job, JobFolder, work

MODES: dict[str, dict[str, Any]] = {
    "dapo": {"transfer": "separate", "wm_coef": 0.0},
    "separate": {"transfer": "separate"},
    "stacked": {"transfer": "stacked"},
    "shared": {"transfer": "shared"},
    "iwm": {"transfer": "iwm"},
    # added after shared (λ = 0.5) collapsed the tiny policy in seed 0 (validation 0.266 -> 0.0 by step 8): the
    # same auxiliary loss ten times weaker
    "shared-l0.05": {"transfer": "shared", "wm_coef": 0.05},
    # added after stacked and shared collapsed with L_wm's gradient ~100x the policy's: the world model's
    # gradient capped at the policy gradient's norm on the tensors both reach (GRPOConfig.auxiliary_grad_ratio)
    "shared-capped": {"transfer": "shared", "auxiliary_grad_ratio": 1.0},
    "stacked-capped": {"transfer": "stacked", "auxiliary_grad_ratio": 1.0},
    # added after shared-capped still collapsed (26.6% -> 1.6% by step 16): AdamW divides each coordinate by its
    # own gradient scale, so an auxiliary direction that stays the same step after step moves the weights about
    # as far as the (noisier) policy gradient does even at ratio 1; the cap 10 times lower
    "shared-capped-0.1": {"transfer": "shared", "auxiliary_grad_ratio": 0.1},
    # added after shared-capped-0.1 matched DAPO with a world model that learned nothing (its gradient scaled by
    # ~0.001): the part of the world model's gradient that points against the policy's removed (PCGrad), the
    # rest capped at the policy gradient's norm, as in shared-capped
    "shared-projected": {"transfer": "shared", "auxiliary_projection": True, "auxiliary_grad_ratio": 1.0},
    # separate adapters, each gradient clipped on its own: under the one shared clip the world model's gradient
    # (~100x the policy's) shrank the policy's steps, and separate's policy did not rise as DAPO's did
    "separate-own-clip": {"transfer": "separate", "clip_per_adapter": True},
    # the same-weights baseline: the policy learns the phone calls' replies in its own rollouts (weight 0.1)
    "echo": {"transfer": "echo"},
    # added after echo (weight 0.1) collapsed the tiny policy by step 8: the same loss ten times lighter
    "echo-0.01": {"transfer": "echo", "echo_coef": 0.01},
    # half of each step's groups phone the world model instead of the env (lookups stay real)
    "echo-imagined50": {"transfer": "echo", "imagined_fraction": 0.5},
    "separate-imagined50": {"transfer": "separate", "imagined_fraction": 0.5},
    "shared-capped-0.1-imagined50": {"transfer": "shared", "auxiliary_grad_ratio": 0.1, "imagined_fraction": 0.5},
    # the imagined calls of the one mode whose policy and world model both rose on the tiny model (make demo's)
    # the world model's adapter trains its markers' rows (wm_token_rows), added after the first run of this mode
    # imagined no reply of the right type in 4 steps: without the rows, SmolLM2's world model trained alone for 32
    # updates closed 12% of its replies with <|/csr|>, with them 100% (benchmarks/world_model_replies.py); and,
    # added after that world model still typed only 16% of its replies right after those 32 updates, a warm-up
    # before step 1 on the phone calls of the chats the warm start imitated (no new task): 32 updates of 2 chats'
    # calls, once per run; then, after that warm-up's world model wrote closed replies that mixed template pieces
    # (none typed by classify_reply after 32 updates; 10% after 48, 23% read by the nearest template), the
    # imagined replies are read by their nearest template and the warm-up makes one whole pass over the warm
    # start's 128 d3 chats (64 updates of 2 chats' calls, 1,020 calls)
    "separate-own-clip-imagined50": {"transfer": "separate", "clip_per_adapter": True, "imagined_fraction": 0.5,
                                     "wm_token_rows": True, "wm_warmup_updates": 64, "wm_warmup_chats_per_update": 2,
                                     "imagined_reply_reading": "nearest"},
}

# The validation success a run must reach, per model, each fixed before that model's comparison ran:
# tiny (d1): its warm start's 0.266 plus about one standard error of a 64-episode estimate;
# SmolLM2-135M (d3, the mistakes warm start): its 0.31 at d3 (16 episodes) plus about 1.5 standard errors of a
# 64-episode estimate; the sweep's committed step-0 validation (64 episodes, the current bf16 kernels) is 0.14.
THRESHOLDS: dict[str, float] = {"tiny": 0.30, "smollm2-135m": 0.40}

# the config fields that make two runs of one name the same run (a part made with other values is stale)
SETTING_FIELDS = ("num_steps", "eval_every", "eval_episodes", "max_turns", "temperature", "prompts_per_step",
                  "group_size", "iwm_steps", "lora_dropout")
# the fields the modes set: a part made before its mode's definition changed is stale too (a field the part's
# config lacks, written before the field existed, had its default)
MODE_FIELDS = tuple(sorted({name for fields in MODES.values() for name in fields}))
_CONFIG_DEFAULTS = {field.name: field.default for field in dataclasses.fields(DualLoRAConfig)}


# --quick: batch and episode sizes on top of the preset (the step counts are set in _apply_quick)
QUICK_CONFIG: dict[str, Any] = {"prompts_per_step": 2, "group_size": 2, "progress": False}


def parts_dir(args: argparse.Namespace) -> Path:
    return results_dir(args) / "csr_dual_lora"


def runs_dir(args: argparse.Namespace) -> Path:
    """Run folders and the warm-start cache: ``runs/`` (relative to the working directory), or inside the
    results folder with ``--quick``."""
    return results_dir(args) / "runs" if args.quick else Path("runs")


def warm_start(args: argparse.Namespace, model: str) -> WarmStart:
    """The CSR policy's cached warm start (the tiny one ships with the package), or the one ``--continue-on`` /
    ``--mistake-rate`` select."""
    return load_chosen(warm_start_config(model), args, runs_dir(args) / "warm_starts", **_quick_warm_start(args))


def warm_start_key(args: argparse.Namespace) -> str:
    """The cache key of the warm start :func:`warm_start` loads (nothing is loaded)."""
    return warm_start_chosen_config(args, args.model).key()


def warm_start_chosen_config(args: argparse.Namespace, model: str) -> WarmStartConfig:
    """The config of the warm start :func:`warm_start` loads (nothing is loaded)."""
    return selected_config(warm_start_config(model), args, **_quick_warm_start(args))


def _quick_warm_start(args: argparse.Namespace) -> dict[str, Any]:
    """``--quick``: a continued warm start trains on a few chats."""
    return {"episodes_per_difficulty": 8, "epochs": 1} if args.quick else {}


def run_name(args: argparse.Namespace, mode: str | None = None, seed: int | None = None) -> str:
    """A run's part-file stem: ``<model>-<mode>-d<difficulty>-s<seed>`` (then ``-T<temperature>`` and the warm
    start's name when they are not the preset's). Modes hold no ``-d<digit>``."""
    mode = args.mode if mode is None else mode
    seed = args.seed if seed is None else seed
    return (f"{args.model}-{mode}-d{args.difficulty}-s{seed}{temperature_suffix(args.temperature)}"
            + warm_start_suffix(args))


def run_config(args: argparse.Namespace, mode: str, output_dir: Path) -> DualLoRAConfig:
    """The config of a ``run`` of ``mode`` with the command line's settings."""
    return dual_lora_config(
        args.model, args.difficulty, **MODES[mode], num_steps=args.steps, max_turns=args.max_turns,
        eval_every=args.eval_every, eval_episodes=args.episodes, checkpoint_every=1, seed=args.seed,
        iwm_steps=args.iwm_steps, output_dir=str(output_dir), device=args.device,
        **({"lora_dropout": args.lora_dropout} if args.lora_dropout is not None else {}),
        **batch_settings(args) | (QUICK_CONFIG if args.quick else {}))


def run_setting(config: dict[str, Any]) -> dict[str, Any]:
    """What must match for a part (or a run folder) to belong to a run: :data:`SETTING_FIELDS` of its config."""
    return {name: config.get(name) for name in SETTING_FIELDS}


def is_finished(part: dict[str, Any], difficulties: tuple[int, ...] = ()) -> bool:
    """Whether a part's run reached its last step, validated every ``eval_every`` steps up to it, and has its
    final test evaluations at ``difficulties``."""
    done = part.get("steps_done", part["steps"]) >= part["steps"]
    every = part.get("config", {}).get("eval_every") or 0
    validated = {step for step, _ in part.get("curve", [])}
    done = done and (not every or all(step in validated for step in range(every, part["steps"] + 1, every)))
    return done and all(str(d) in part.get("final_test_by_difficulty", {}) for d in difficulties)


def stale_part(path: Path, config: DualLoRAConfig) -> dict[str, Any] | None:
    """The settings and mode fields (``{field: [part's, this run's]}``) where the part at ``path`` was made
    otherwise than ``config`` says; None when it is this run's or there is none."""
    if not path.is_file():
        return None
    theirs, ours = json.loads(path.read_text())["config"], config.to_dict()
    differ = {name: [theirs.get(name), ours[name]] for name in SETTING_FIELDS if theirs.get(name) != ours[name]}
    differ |= {name: [theirs.get(name, _CONFIG_DEFAULTS[name]), ours[name]] for name in MODE_FIELDS
               if theirs.get(name, _CONFIG_DEFAULTS[name]) != ours[name]}
    return differ or None


def run(args: argparse.Namespace) -> None:
    if args.train_only and not args.evaluate_aside:
        raise SystemExit("--train-only leaves the evaluations to `evaluate-aside` workers: give --evaluate-aside too")
    name = run_name(args)
    out = runs_dir(args) / "csr_dual_lora" / name
    config = run_config(args, args.mode, out)
    part_path = parts_dir(args) / f"{name}.json"
    stale = stale_part(part_path, config)
    if stale and not args.restart:
        raise SystemExit(f"{portable(part_path)} was made with other settings ({stale}, [its, this run's]): "
                         "pass --restart to replace it with this run")
    if args.restart:
        shutil.rmtree(out, ignore_errors=True)  # its checkpoints belong to the replaced run
    training = contextlib.ExitStack()  # validating aside: the training lock, held until the last step is trained
    if args.evaluate_aside:
        training.enter_context(JobFolder(out / "evaluations").claimed(TRAINING_LOCK, wait=True))
        if latest_checkpoint(out) is None:
            step0(args)  # a trainer that validates aside never validates step 0 itself
    ws = warm_start(args, args.model)
    # validating aside, the trainer itself never validates: its config says so, the part's keeps eval_every
    training_config = dataclasses.replace(config, eval_every=0) if args.evaluate_aside else config
    trainer = make_trainer(args, training_config, ws)
    resumed = trainer.resume_latest()
    step0_from = _start(args, trainer) if resumed is None else None
    if resumed is not None:
        print(f"resumed from {resumed} at step {trainer.step}")
    command = _run_command_line(args)
    step0_from = step0_from or _logged_step0_source(part_path)
    if args.evaluate_aside:
        with training:
            write_aside_part(args, config, command, step0_from)
            trainer.train()
        trainer.close()
        if args.train_only:  # a fresh worker takes this process's place (the sweep starts one)
            write_aside_part(args, config, command)
            return
        del trainer, ws  # their model: the evaluator loads its own
        gc.collect()
        release_free_heap()  # what training freed goes back to the system before the evaluator allocates
        evaluate_aside(args, config, command, wait=False)  # then help the workers
        return

    def write_part() -> None:  # after every validation: a stopped run keeps its curve so far
        part = _part(args, trainer.history, trainer.step, config, out, command) | {"step0_from": step0_from}
        write_json(part_path, part | _final_tests_kept(part_path, part))
        print("validation success by step:", part["curve"])

    train_in_chunks(trainer, args.eval_every, write_part)
    _final_tests(args, trainer, part_path)


def _run_command_line(args: argparse.Namespace) -> str:
    """The ``run`` command line of ``args``'s run, as its part file records it."""
    return (f"python benchmarks/csr_dual_lora_vs_dapo.py run --model {args.model} --mode {args.mode} "
            f"--seed {args.seed} --difficulty {args.difficulty} --steps {args.steps} --max-turns "
            f"{args.max_turns} --eval-every {args.eval_every} --episodes {args.episodes} "
            f"--iwm-steps {args.iwm_steps}" + (f" --device {args.device}" if args.device != "cpu" else "")
            + (f" --lora-dropout {args.lora_dropout:g}" if args.lora_dropout is not None else "")
            + batch_command(args) + warm_start_command(args)
            + (" --final-test " + " ".join(map(str, args.final_test)) if args.final_test else "")
            + (" --evaluate-aside" if args.evaluate_aside else "") + (" --quick" if args.quick else ""))


def _part(args: argparse.Namespace, history: list[dict[str, Any]], steps_done: int, config: DualLoRAConfig,
          out: Path, command: str) -> dict[str, Any]:
    """A run's part file as its ``history`` (the rows of its metrics log, validations in them) stands after
    ``steps_done`` steps: curves, tasks, step times, the last validation's figures."""
    evals = [m for m in history if "eval/success_rate" in m]
    steps = [m for m in history if "rollout/reward_mean" in m]
    return {
        "model": args.model, "mode": args.mode, "difficulty": args.difficulty, "seed": args.seed,
        "warm_start_suffix": warm_start_suffix(args),
        "steps": args.steps, "steps_done": steps_done, "max_turns": args.max_turns,
        "eval_episodes": args.episodes, "config": config.to_dict() | {"output_dir": portable(out)},
        "curve": [[m["step"], m["eval/success_rate"]] for m in evals],
        # each validation episode's success (seed order): the report's bootstrap over seeds and episodes
        "episode_success_curve": [[m["step"], m.get(EPISODE_SUCCESS_KEY)] for m in evals],
        "wm_accuracy_curve": [[m["step"], m.get("eval/wm_token_accuracy")] for m in evals],
        # a collapsing policy loses the tool-call format: the share of its validation calls that are invalid
        "invalid_call_rate_curve": [[m["step"], m.get("eval/invalid_call_rate")] for m in evals],
        # real tasks: episodes no step of which a world model answered (imagined ones are counted apart)
        "tasks_by_step": np.cumsum([0] + [m.get("rollout/real_episodes_sampled", m["rollout/episodes_sampled"])
                                          for m in steps]).tolist(),
        "episodes_by_step": np.cumsum([0] + [m["rollout/episodes_sampled"] for m in steps]).tolist(),
        "imagined_episodes_by_step": [m.get("rollout/imagined_episodes", 0.0) for m in steps],
        "imagined_success_by_step": [m.get("rollout/imagined_success_rate") for m in steps],
        "real_success_by_step": [m.get("rollout/real_success_rate", m["rollout/success_rate"]) for m in steps],
        "imagined_type_accuracy_by_step": [m.get("rollout/imagined_type_accuracy") for m in steps],
        # of the imagined successes, the share the env would have given too (None: a step with none)
        "imagined_success_confirmed_by_step": [m.get("rollout/imagined_success_confirmed_rate") for m in steps],
        "device": args.device,
        "step_seconds": [m["time/step_s"] for m in steps],
        # the world model's warm-up before step 1 (wm_warmup_updates; 0 s without one): not in any step's time
        "wm_warmup_seconds": sum(m.get("time/wm_warmup_s", 0.0) for m in steps),
        "wm_warmup_loss": next(([m["wm_warmup/loss_first"], m["wm_warmup/loss_last"]] for m in steps
                                if "wm_warmup/loss_first" in m), None),
        "wm_success_correlation": wm_success_correlation(history),
        "aux_grad_norm_ratio_range": _range(m.get("aux/grad_norm_ratio") for m in steps),
        "aux_grad_scale_range": _range(m.get("aux/grad_scale") for m in steps),
        "aux_grad_cosine_range": _range(m.get("aux/grad_cosine") for m in steps),
        "final_eval": {k: v for k, v in evals[-1].items() if k.startswith("eval/")},
        "final_test_difficulties": list(args.final_test or ()),
        "finished": False,  # set once the run reached its last step and its final tests are in
        "command": command,
    }


FINAL_TEST_KEYS = ("final_test_by_difficulty", "final_test_episode_success", "finished")


def _final_tests_kept(path: Path, part: dict[str, Any]) -> dict[str, Any]:
    """The final test evaluations the part at ``path`` already holds, when it is of the same last step."""
    if not path.is_file():
        return {}
    old = json.loads(path.read_text())
    same = old.get("steps_done") == part["steps_done"] and run_setting(old["config"]) == run_setting(part["config"])
    return {key: old[key] for key in FINAL_TEST_KEYS if key in old} if same else {}


def _final_tests(args: argparse.Namespace, trainer: DualLoRATrainer, path: Path) -> None:
    """Greedy success of the run's last weights on test-split companies at each ``--final-test`` difficulty
    (episode ``i`` seeded ``10**6 + i``), merged into its part one difficulty at a time; then the part is
    ``finished``. Only for a run that reached its last step (a deadline may stop one before)."""
    if trainer.step < trainer.config.num_steps:
        return
    part = json.loads(path.read_text())
    by_difficulty = part.setdefault("final_test_by_difficulty", {})
    successes = part.setdefault("final_test_episode_success", {})
    for difficulty in [d for d in args.final_test or () if str(d) not in by_difficulty]:
        successes[str(difficulty)] = _successes_at(trainer, difficulty, args.episodes, "test")
        by_difficulty[str(difficulty)] = float(np.mean(successes[str(difficulty)]))
        print(f"final test d{difficulty}: {by_difficulty[str(difficulty)]:.3f}")
        write_json(path, part)
    part["finished"] = is_finished(part, tuple(args.final_test or ()))
    write_json(path, part)


# ---------------------------------------------------------------- evaluation beside training
TRAINING_LOCK = "training"  # held by a run's trainer while it trains (evaluation_jobs.JobFolder.claimed)
PART_LOCK = "part"  # held while a process rewrites the part file
# final tests from this difficulty on run one at a time, among all the runs of a runs folder: two SmolLM2 workers
# testing d4 and d5 at once held 17.8 GB of a 24 GB machine and were still growing (their KV caches hold the
# longest episodes); two runs' d5 tests at once ran it out of memory (one of them held 13.9 GB)
ONE_LONG_TEST_FROM = 4
TRAINER_START_S = 120.0  # a worker waits this long for the trainer to take its lock before it counts it gone


def evaluation_jobs(args: argparse.Namespace) -> dict[Job, int | None]:
    """A run's evaluations beside training, in the order workers take them: the validation of every
    ``--eval-every``-th step (value None), then each ``--final-test`` difficulty at the last step (the value)."""
    every = args.eval_every
    validations = {Job(f"validation-step-{step}", step): None for step in range(every, args.steps + 1, every)
                   } if every else {}
    return validations | {Job(f"test-d{d}", args.steps, "long-tests" if d >= ONE_LONG_TEST_FROM else None): d
                          for d in args.final_test or ()}


class CheckpointEvaluator:
    """Evaluates a run's step checkpoints, each job's result what the trainer's own validation or final test
    would give: a trainer of its own (built at the first job) loads the job's checkpoint, in a scratch output
    folder (loading a checkpoint trims its trainer's metrics log)."""

    def __init__(self, args: argparse.Namespace, config: DualLoRAConfig, out: Path):
        self.args, self.out, self.jobs = args, out, evaluation_jobs(args)
        self.scratch = out / "evaluations" / f"scratch-{os.getpid()}"
        self.config = dataclasses.replace(config, output_dir=str(self.scratch))
        self.trainer: DualLoRATrainer | None = None
        self.step: int | None = None

    def __call__(self, job: Job) -> dict[str, Any]:
        if self.trainer is None:
            self.trainer = _fresh_trainer(self.args, self.config)
        if self.step != job.step:
            self.trainer.load(step_checkpoint(self.out, job.step))
            self.step = job.step
        start = time.perf_counter()
        difficulty = self.jobs[job]
        if difficulty is not None:
            successes = _successes_at(self.trainer, difficulty, self.args.episodes, "test")
            print(f"final test d{difficulty}: {np.mean(successes):.3f}", flush=True)
            return {"successes": successes}
        row = self.trainer.validation_row()  # the row GRPOTrainer's own validation logs
        print(f"validation at step {job.step}: {row['eval/success_rate']:.3f}", flush=True)
        return {**row, "time/validation_s": time.perf_counter() - start}

    def close(self) -> None:
        if self.trainer is not None:
            self.trainer.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


def evaluate_aside(args: argparse.Namespace, config: DualLoRAConfig, command: str, wait: bool) -> int:
    """Take a run's evaluation jobs whose checkpoint exists (``wait``: also wait for the others while the
    trainer runs); rewrite the part after each. Returns the jobs this process did."""
    out = Path(config.output_dir)
    folder = JobFolder(out / "evaluations", groups=out.parent)  # long tests: one at a time among the runs
    jobs = evaluation_jobs(args)
    evaluator = CheckpointEvaluator(args, config, out)
    start = time.monotonic()
    try:
        count = work(folder, list(jobs), ready=lambda job: step_checkpoint(out, job.step).is_dir(),
                     run_job=evaluator, after=lambda: write_aside_part(args, config, command),
                     done=lambda job: jobs[job] is None and job.step in _validated_steps(out),
                     poll_s=10.0 if wait else None,
                     keep_waiting=lambda: (folder.is_held(TRAINING_LOCK)
                                           or time.monotonic() - start < TRAINER_START_S))
    finally:
        evaluator.close()
    write_aside_part(args, config, command)
    return count


def _validated_steps(out: Path) -> set[int]:
    """The steps a run validated itself (before it went on validating aside)."""
    return {row["step"] for row in read_jsonl(out / "metrics.jsonl") if "eval/success_rate" in row}


def write_aside_part(args: argparse.Namespace, config: DualLoRAConfig, command: str,
                     step0_from: str | None = None) -> None:
    """The part file of a run that validates aside: its metrics log's rows, each evaluation job's result merged
    into the row of its step, the final tests (``finished`` once all are in). ``step0_from``: None keeps the
    part's record of where its step-0 validation came from."""
    out = Path(config.output_dir)
    folder = JobFolder(out / "evaluations")
    part_path = parts_dir(args) / f"{run_name(args)}.json"
    with folder.claimed(PART_LOCK, wait=True):
        history = read_jsonl(out / "metrics.jsonl")
        rows = {row["step"]: row for row in history}
        jobs = evaluation_jobs(args)
        results = {job: result for job in jobs if (result := folder.result(job)) is not None}
        for job, result in results.items():
            if jobs[job] is None and job.step in rows:
                rows[job.step].update(result)
        if not any("eval/success_rate" in row for row in history):
            return  # no step-0 validation logged yet
        steps_done = max((row["step"] for row in history if "rollout/reward_mean" in row), default=0)
        step0_from = step0_from or _logged_step0_source(part_path)
        part = _part(args, history, steps_done, config, out, command) | {"step0_from": step0_from}
        tests = {str(jobs[job]): result["successes"] for job, result in results.items() if jobs[job] is not None}
        if tests:
            part["final_test_episode_success"] = tests
            part["final_test_by_difficulty"] = {d: float(np.mean(successes)) for d, successes in tests.items()}
        part["finished"] = is_finished(part, tuple(args.final_test or ()))
        write_json(part_path, part)


def evaluate_aside_stage(args: argparse.Namespace) -> None:
    """The ``evaluate-aside`` stage: a worker beside ``run --evaluate-aside`` of the same flags."""
    args.evaluate_aside = True
    config = run_config(args, args.mode, runs_dir(args) / "csr_dual_lora" / run_name(args))
    done = evaluate_aside(args, config, _run_command_line(args), wait=True)
    print(f"{done} evaluation(s) done beside the trainer")


# ---------------------------------------------------------------- the shared step-0 validation
def step0_path(args: argparse.Namespace) -> Path:
    """The step-0 validation every run of a setting shares: one file per model, difficulty and warm start."""
    return parts_dir(args) / "step0" / f"{args.model}-d{args.difficulty}{warm_start_suffix(args)}.json"


def validation_setting(args: argparse.Namespace, config: DualLoRAConfig) -> dict[str, Any]:
    """What a step-0 validation depends on: the model and its warm start, the validation tasks (env, difficulty,
    split, seeds), how an episode is played (turns, tokens, decoding) and how the world model scores replies."""
    setting = {"model": args.model, "warm_start": warm_start_key(args), "difficulty": args.difficulty,
               "env_id": config.env_id, "env_kwargs": {**config.env_kwargs, **config.eval_env_kwargs},
               "episodes": config.eval_episodes, "first_seed": VALIDATION_SEEDS_START,
               "max_turns": config.max_turns, "max_new_tokens": config.max_new_tokens,
               "max_episode_tokens": config.max_episode_tokens, "decoding": config.decoding,
               "world_model_scoring": "packed"}  # a conversation's calls in one forward (world_model.pack_calls)
    return json.loads(json.dumps(setting))  # as the file holds it (tuples as lists)


def _world_model_kind(mode: str) -> str:
    """How a mode scores its world model at step 0: ``"echo"`` (the policy, in the episodes' own sequences) or
    ``"adapter"`` (a fresh LoRA behind the markers: the same figures for every other mode)."""
    return "echo" if MODES[mode]["transfer"] == "echo" else "adapter"


def _start(args: argparse.Namespace, trainer: DualLoRATrainer) -> str | None:
    """Log the shared step-0 validation as this fresh run's first row when the file holds one of the run's
    setting (the file's path), else leave the trainer to compute its own (None)."""
    path = step0_path(args)
    if not args.eval_every or not path.is_file():
        return None
    shared = json.loads(path.read_text())
    if shared["setting"] != validation_setting(args, trainer.config):
        print(f"{portable(path)} is another setting's step-0 validation: this run validates step 0 itself")
        return None
    trainer.log_initial_validation(shared["validation"][_world_model_kind(args.mode)])
    print(f"step-0 validation from {portable(path)}")
    return portable(path)


def _logged_step0_source(part_path: Path) -> str | None:
    """A resumed run's record of where its step-0 validation came from."""
    return json.loads(part_path.read_text()).get("step0_from") if part_path.is_file() else None


def step0(args: argparse.Namespace) -> None:
    """The step-0 validation of a setting, computed once for every run of it: the warm start's greedy episodes
    with fresh adapters (the same in every mode), scored by each kind of world model (:func:`_world_model_kind`);
    kept when the file already holds this setting's."""
    path = step0_path(args)
    out = runs_dir(args) / "csr_dual_lora" / "step0"
    config = run_config(args, "dapo", out)
    setting = validation_setting(args, config)
    if path.is_file() and json.loads(path.read_text())["setting"] == setting:
        print(f"{portable(path)} holds this setting's step-0 validation")
        return
    trainer = _fresh_trainer(args, config)
    episodes = trainer.validation_episodes()
    successes = {EPISODE_SUCCESS_KEY: [float(episode.success) for episode in episodes]}
    validation = {"adapter": trainer.evaluation_metrics(episodes) | successes}
    echo = _fresh_trainer(args, run_config(args, "echo", out))  # the same episodes, scored by the policy itself
    validation["echo"] = echo.evaluation_metrics(episodes) | successes
    write_json(path, {"setting": setting, "validation": validation, "dtype": str(echo.dtype),
                     "command": f"python benchmarks/csr_dual_lora_vs_dapo.py step0 --model {args.model} "
                                f"--difficulty {args.difficulty} --max-turns {args.max_turns} --episodes "
                                f"{args.episodes}" + warm_start_command(args) + (" --quick" if args.quick else "")})
    print("step-0 validation success:", validation["adapter"]["eval/success_rate"])


def _mean(values: Any) -> float | None:
    """The mean of the values that are not None (None when there are none)."""
    present = [v for v in values if v is not None]
    return float(np.mean(present)) if present else None


def _range(values: Any) -> list[float] | None:
    """[min, max] of the values that are not None (None when there are none): e.g. a capped mode's per-step
    auxiliary gradient ratios (a step's figure is the mean over its minibatches)."""
    present = [v for v in values if v is not None]
    return [min(present), max(present)] if present else None


STEP_TIMES = ("time/step_s", "time/rollout_s", "time/update_s")


def step_time(args: argparse.Namespace) -> None:
    """Seconds per training step of one mode (no validation), from the warm start, appended to the mode's
    ``runs`` (its means over them beside). Time a mode and DAPO at once, one process each (their first steps
    sample the same episodes): the report compares runs started within :data:`SIDE_BY_SIDE_S` of each other.
    ``--from-checkpoint`` starts from a run's checkpoint instead (a mode whose world model warms up for an hour
    first: its ``checkpoint-0``, timed beside DAPO of the same seed)."""
    started_at = time.time()
    ws = warm_start(args, args.model)
    config = dual_lora_config(args.model, args.difficulty, **MODES[args.mode], num_steps=args.steps,
                              max_turns=args.max_turns, eval_every=0, seed=args.seed,
                              output_dir=str(runs_dir(args) / "csr_dual_lora_step_time" / args.mode),
                              **({"lora_dropout": args.lora_dropout} if args.lora_dropout is not None else {}),
                              **batch_settings(args) | (QUICK_CONFIG if args.quick else {"progress": False}))
    trainer = make_trainer(args, config, ws)
    if args.from_checkpoint is not None:
        trainer.load(args.from_checkpoint)
    steps = [trainer.train_step() for _ in range(args.steps)]
    row = {key: float(np.mean([m[key] for m in steps])) for key in STEP_TIMES}
    row |= {"episodes_sampled": [m["rollout/real_episodes_sampled"] for m in steps], "started_at": started_at}
    if args.from_checkpoint is not None:
        row["from_checkpoint"] = portable(args.from_checkpoint)
    path = results_dir(args) / "csr_dual_lora_step_time.json"
    key = step_time_key(args.model, args.mode, args.difficulty, args.temperature or 1.0, warm_start_suffix(args))
    with JobFolder(path.parent).claimed(path.stem, wait=True):  # modes timed side by side share the file
        table = json.loads(path.read_text()) if path.is_file() else {}
        runs = table.get(key, {}).get("runs", []) + [row | {"steps": args.steps, "seed": args.seed,
                                                            "machine": machine_info()}]
        table[key] = {"runs": runs} | {name: float(np.mean([run[name] for run in runs])) for name in STEP_TIMES}
        write_json(path, table)
    print(args.mode, row)


def imagined_replies(args: argparse.Namespace) -> None:
    """One round of a mode's imagined groups (the tasks and sampling seed of the trainer's first round) from the
    warm start, its world-model replies recorded; then those very calls (the same prompts, in order) replayed
    by two fresh reply engines: one prefilling each call's whole conversation (``reuse_kv_cache=False``), one
    keeping each episode's KV between its calls (what the trainer uses), in the order ``--replay-order`` gives.
    Records the round's wall time and its replies' share, each replay's seconds and tokens, and how many replies
    the two replays wrote alike, in ``imagined_replies.json`` (one entry per setting, every timing kept)."""
    ws = warm_start(args, args.model)
    config = dual_lora_config(args.model, args.difficulty, **MODES[args.mode], max_turns=args.max_turns,
                              eval_every=0, seed=args.seed, output_dir=str(runs_dir(args) / "imagined_replies"),
                              **batch_settings(args) | (QUICK_CONFIG if args.quick else {"progress": False}))
    if config.imagined_fraction == 0:
        raise SystemExit(f"mode {args.mode!r} imagines no phone calls: pick one with imagined_fraction > 0")
    if sorted(args.replay_order) != ["plain", "reuse"]:
        raise SystemExit(f"--replay-order names each engine once, got {args.replay_order}")
    trainer = make_trainer(args, config, ws)
    action_space = trainer.make_env().unwrapped.action_space
    imagination = trainer.collector.step_override
    assert isinstance(imagination, PhoneCallImagination)
    first_round = trainer._draw_round(0, config.prompts_per_step)  # the trainer's own first draw
    seeds, params = first_round.seeds[: imagination.count], first_round.params
    calls = _recorded_replies(imagination)
    start = time.perf_counter()
    episodes = trainer.collector.collect(seeds, config.group_size, params)
    wall = time.perf_counter() - start
    row: dict[str, Any] = {
        "round": {"wall_s": wall, "episodes": len(episodes), "reply_batches": len(calls),
                  "imagined_calls": sum(len(prompts) for prompts, _, _ in calls),
                  "imagined_reply_s": sum(seconds for *_, seconds in calls),
                  "tokens_per_episode": float(np.mean([len(e.token_ids) for e in episodes]))},
        "replays": {}}
    replies = {}
    for reuse in [order == "reuse" for order in args.replay_order]:
        replay = PhoneCallImagination(trainer.policy, ws.tokenizer, config, action_space, trainer.dtype,
                                      reuse_kv_cache=reuse)
        start = time.perf_counter()
        replies[reuse] = [replay.replies(prompts, call_params) for prompts, call_params, _ in calls]
        seconds = time.perf_counter() - start
        stats = replay.engine.kv_cache.stats if reuse else None
        row["replays"]["reuse" if reuse else "plain"] = {
            "seconds": seconds, "prompt_tokens": sum(sum(map(len, prompts)) for prompts, *_ in calls),
            "reused_tokens": stats.reused_tokens if stats else 0,
            "reply_tokens": sum(len(g.token_ids) for batch in replies[reuse] for g in batch)}
        print(f"replay {'reusing KV' if reuse else 'plain'}: {seconds:.1f} s")
    pairs = [(a.token_ids, b.token_ids) for x, y in zip(replies[False], replies[True]) for a, b in zip(x, y)]
    row |= {"same_replies": sum(a == b for a, b in pairs), "replies": len(pairs),
            "replay_speedup": row["replays"]["plain"]["seconds"] / row["replays"]["reuse"]["seconds"],
            "replay_order": args.replay_order, "seeds": seeds, "started_at": time.time(), "machine": machine_info()}
    path = results_dir(args) / "imagined_replies.json"
    key = step_time_key(args.model, args.mode, args.difficulty, args.temperature or 1.0, warm_start_suffix(args))
    with JobFolder(path.parent).claimed(path.stem, wait=True):
        table = json.loads(path.read_text()) if path.is_file() else {}
        table[key] = {"runs": table.get(key, {}).get("runs", []) + [row]}
        write_json(path, table)
    print(f"replies reusing KV {row['replay_speedup']:.2f}x faster, {row['same_replies']} of {row['replies']} "
          f"alike; the round's replies took {row['round']['imagined_reply_s']:.0f} of its {wall:.0f} s")


def _recorded_replies(imagination: PhoneCallImagination) -> list[tuple[list[list[int]], SamplingParams, float]]:
    """Wrap ``imagination.replies``: each call appends (its prompts, its sampling, its seconds)."""
    calls: list[tuple[list[list[int]], SamplingParams, float]] = []
    replies = imagination.replies

    def recorded(prompts: list[list[int]], params: SamplingParams) -> Any:
        start = time.perf_counter()
        out = replies(prompts, params)
        calls.append(([list(p) for p in prompts], params, time.perf_counter() - start))
        return out

    imagination.replies = recorded  # type: ignore[method-assign]
    return calls


def step_time_key(model: str, mode: str, difficulty: int, temperature: float, warm_start_name: str) -> str:
    """A mode's entry in ``csr_dual_lora_step_time.json``: ``tiny-dapo``, ``smollm2-135m-echo-d3-T0.5-...``."""
    return (f"{model}-{mode}" + (f"-d{difficulty}" if difficulty != 1 else "") + temperature_suffix(temperature)
            + warm_start_name)


SIDE_BY_SIDE_S = 300.0  # two step-time runs started this close together ran side by side


def side_by_side_step_times(results: Path, setting: tuple[str, int, float, str], modes: list[str]
                            ) -> dict[str, dict[str, float]]:
    """Per mode, its seconds per step over DAPO's, on each machine whose ``csr_dual_lora_step_time.json`` (in
    ``results`` or ``results/machines/*``) holds runs of both in ``setting`` started side by side (within
    :data:`SIDE_BY_SIDE_S`): the mean over such pairs of runs. Runs timed at other moments (other loads) are
    not compared."""
    ratios: dict[str, dict[str, float]] = {}
    for path in [results / "csr_dual_lora_step_time.json", *sorted(results.glob("machines/*/csr_dual_lora_step_time.json"))]:
        table = json.loads(path.read_text()) if path.is_file() else {}
        dapo_runs = table.get(step_time_key(setting[0], "dapo", *setting[1:]), {}).get("runs", [])
        for mode in modes:
            runs = table.get(step_time_key(setting[0], mode, *setting[1:]), {}).get("runs", [])
            pairs = [(run, dapo) for run in runs for dapo in (dapo_runs if mode != "dapo" else [run])
                     if abs(run.get("started_at", -1e9) - dapo.get("started_at", 1e9)) <= SIDE_BY_SIDE_S]
            if pairs:
                label = machine_label(pairs[-1][0].get("machine"))
                ratios.setdefault(mode, {})[label] = float(np.mean([run["time/step_s"] / dapo["time/step_s"]
                                                                    for run, dapo in pairs]))
    return ratios


# --quick: the demo cut to one step of 2 x 2 episodes and a 2-episode validation (the pipeline, not the figure)
QUICK_DEMO_FLAGS = ("--agent.num-steps", "1", "--agent.eval-every", "1", "--agent.eval-episodes", "2",
                    "--agent.prompts-per-step", "2", "--agent.group-size", "2", "--agent.max-turns", "4")


def demo_time(args: argparse.Namespace) -> None:
    """Wall time of ``make demo``'s command (``python examples/train_dual_lora.py demo``) as a user runs it: a
    fresh interpreter with torch's own thread count, its run folder under ``runs_dir``; writes
    ``csr_dual_lora_demo.json`` with the seconds, the cores and load around the run, and the demo's own curves
    (its ``curves.png`` copied to ``csr_dual_lora_demo.png``).
    Run it with nothing else on the machine: the figure is the demo's budget on free cores."""
    out = runs_dir(args) / "demo_time"
    shutil.rmtree(out, ignore_errors=True)  # a fresh run, never a resumed one
    flags = ["--agent.output-dir", str(out), *(QUICK_DEMO_FLAGS if args.quick else ())]
    command = [sys.executable, str(Path(__file__).resolve().parents[1] / "examples" / "train_dual_lora.py"), "demo",
               *flags]
    env = {key: value for key, value in os.environ.items() if key != "WORLDGYM_THREADS"}
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    subprocess.run(command, check=True, env=env)
    seconds = time.perf_counter() - start
    demo = json.loads((out / "results.json").read_text())
    summary = {
        "command": "python examples/train_dual_lora.py demo" + (" " + " ".join(QUICK_DEMO_FLAGS) if args.quick else ""),
        "quick": args.quick, "seconds": seconds, "cores": os.cpu_count(),
        "load_1min_before": load_before, "load_1min_after": os.getloadavg()[0],
        "success": demo["success"], "wm_token_accuracy": demo["wm_token_accuracy"],
        "training_success": demo["training_success"], "warm_start": demo["warm_start"],
    }
    write_json(results_dir(args) / "csr_dual_lora_demo.json", summary)
    shutil.copyfile(out / "curves.png", results_dir(args) / "csr_dual_lora_demo.png")  # the README shows it
    print(f"make demo: {seconds:.0f} s on {os.cpu_count()} cores (1-min load {load_before:.2f} before); "
          f"validation success {demo['success']}")


def final_eval(args: argparse.Namespace) -> None:
    """Greedy success of each finished run's last checkpoint at other difficulties (validation split), merged
    into its part file as ``final_by_difficulty``, and of the warm start itself (``csr_dual_lora_warm_start.json``)."""

    reference = results_dir(args) / "csr_dual_lora_warm_start.json"  # the warm start itself (fresh adapters)
    table = json.loads(reference.read_text()) if reference.is_file() else {}
    label = args.model + warm_start_suffix(args)
    for difficulty in [d for d in args.difficulties if str(d) not in table.get(label, {})]:
        trainer = _fresh_trainer(args, dual_lora_config(args.model, difficulty,
                                                       output_dir=str(runs_dir(args) / "csr_dual_lora" / "warm")))
        metrics = _success_at(trainer, difficulty, args.episodes)
        table.setdefault(label, {})[str(difficulty)] = {"success": metrics, "episodes": args.episodes}
        write_json(reference, table)
        print("warm start", f"d{difficulty}", metrics)
    for path in sorted(parts_dir(args).glob(f"{args.model}-*.json")):
        part = json.loads(path.read_text())
        if part.get("warm_start_suffix", "") != warm_start_suffix(args):  # a run from another warm start
            continue
        done = part.setdefault("final_by_difficulty", {})
        todo = [d for d in args.difficulties if str(d) not in done]
        if not todo:
            continue
        run_dir = runs_dir(args) / "csr_dual_lora" / path.stem
        # a scratch output folder: loading trims the run's own metrics.jsonl to the checkpoint's step
        config = DualLoRAConfig(**_config_fields(part["config"]) | {"output_dir": str(run_dir / "final_eval")})
        trainer = _fresh_trainer(args, config)
        trainer.load(run_dir / "checkpoint-last")
        for difficulty in todo:
            done[str(difficulty)] = _success_at(trainer, difficulty, args.episodes)
            print(path.stem, f"d{difficulty}", done[str(difficulty)])
        write_json(path, part)


def _fresh_trainer(args: argparse.Namespace, config: DualLoRAConfig) -> DualLoRATrainer:
    """A trainer on a freshly loaded warm start (attaching adapters changes the base model in place)."""
    return make_trainer(args, config, warm_start(args, args.model))


def make_trainer(args: argparse.Namespace, config: DualLoRAConfig, ws: WarmStart) -> DualLoRATrainer:
    """A trainer of ``config`` on the warm start ``ws``, the preset's engine; a world-model warm-up
    (``wm_warmup_updates``) learns the phone calls of the chats the warm start imitated."""
    chats = expert_chats(warm_start_chosen_config(args, args.model)) if config.wm_warmup_updates else None
    return DualLoRATrainer(config, model=ws.model, tokenizer=ws.tokenizer, world_model_chats=chats,
                           make_engine=lambda policy: engine(args.model, policy, ws.tokenizer))


def _success_at(trainer: DualLoRATrainer, difficulty: int, episodes: int) -> float:
    """Greedy validation success of the trainer's policy at ``difficulty`` (episode ``i`` seeded ``10**6 + i``)."""
    return float(np.mean(_successes_at(trainer, difficulty, episodes, "validation")))


def _successes_at(trainer: DualLoRATrainer, difficulty: int, episodes: int, split: str) -> list[float]:
    """Each greedy episode's success of the trainer's policy on ``split`` companies at ``difficulty`` (episode
    ``i`` seeded ``10**6 + i``)."""
    from worldgym.agents.llm.envs import make_text_env
    from worldgym.agents.llm.evaluation import evaluate_chat_policy

    kwargs = {"split": split, "difficulty": difficulty}
    config = trainer.config
    _, played = evaluate_chat_policy(trainer.engine, trainer.tokenizer,
                                     lambda: make_text_env("CSRPhone-v1", kwargs),
                                     episodes, config.max_turns, config.max_new_tokens, config.decoding,
                                     max_episode_tokens=config.max_episode_tokens)
    return [float(episode.success) for episode in played]


def _config_fields(data: dict[str, Any]) -> dict[str, Any]:
    """A stored ``DualLoRAConfig.to_dict()`` back as constructor arguments (JSON turned tuples into lists; the
    retired ``wrap_tool_calls`` and the deprecated ``wm_chunk_size`` of older results dropped)."""
    data = dict(data)
    data.pop("wrap_tool_calls", None)
    data.pop("wm_chunk_size", None)
    data["lambda_steps"] = tuple(tuple(pair) for pair in data["lambda_steps"])
    data["loss_ratio_band"] = tuple(data["loss_ratio_band"])
    return data


def tasks_to_threshold(part: dict[str, Any], threshold: float) -> tuple[int | None, int | None]:
    """(training tasks, steps) until the first validation at or above ``threshold`` (None: never)."""
    for step, success in part["curve"]:
        if success >= threshold:
            return part["tasks_by_step"][step], step
    return None, None


def _setting(part: dict[str, Any]) -> tuple[str, int, float, str]:
    """What the runs compared with each other share: model, difficulty, rollout temperature and warm start."""
    return (part["model"], part["difficulty"], part["config"].get("temperature", 1.0),
            part.get("warm_start_suffix", ""))


def cut_at_step(part: dict[str, Any], step: int) -> dict[str, Any]:
    """``part`` as if its run had stopped after the validation at ``step`` (the same budget for every run)."""
    part = dict(part)
    kept = sum(1 for validated, _ in part["curve"] if validated <= step)
    for key in ("curve", "episode_success_curve", "wm_accuracy_curve", "invalid_call_rate_curve"):
        if part.get(key) is not None:
            part[key] = part[key][:kept]
    for key in ("step_seconds", "imagined_episodes_by_step", "imagined_success_by_step", "real_success_by_step",
                "imagined_type_accuracy_by_step", "imagined_success_confirmed_by_step"):
        if key in part:
            part[key] = part[key][:step]
    part["steps_done"] = min(part.get("steps_done", part["steps"]), step)
    part["finished"] = part.get("finished", True) and part["steps_done"] >= part["steps"]
    return part


def bootstrap_interval(groups: list[list[float]], level: float = 0.95, resamples: int = 10_000,
                       seed: int = 0) -> tuple[float, float]:
    """A percentile bootstrap interval of the mean over groups (seeds) of each group's mean (its episodes):
    each resample draws the groups with replacement, then the episodes within each drawn group with
    replacement. Deterministic for a ``seed``.

    >>> bootstrap_interval([[1.0, 1.0], [0.0, 0.0]], resamples=1_000)  # every seed agrees with itself
    (0.0, 1.0)
    """
    if not groups or any(len(group) == 0 for group in groups):
        raise ValueError(f"bootstrap_interval needs at least one group and no empty one, got sizes "
                         f"{[len(group) for group in groups]}")
    rng = np.random.default_rng(seed)
    values = [np.asarray(group, dtype=float) for group in groups]
    picks = rng.integers(len(values), size=(resamples, len(values)))
    means = np.empty(picks.shape)
    for index, group in enumerate(values):
        drawn = picks == index
        episodes = rng.integers(len(group), size=(int(drawn.sum()), len(group)))
        means[drawn] = group[episodes].mean(1)
    low, high = np.quantile(means.mean(1), [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


def final_success_interval(runs: list[dict[str, Any]]) -> list[float] | None:
    """The bootstrap 95% interval of the runs' final validation success over seeds and episodes (None when a
    run's part keeps no per-episode successes of its last validation, as older parts do not)."""
    last = [part.get("episode_success_curve", [[None, None]])[-1] for part in runs]
    if any(successes is None or step != part["curve"][-1][0] for (step, successes), part in zip(last, runs)):
        return None
    return list(bootstrap_interval([successes for _, successes in last]))


def step_time_by_machine(runs: list[dict[str, Any]], dapo: list[dict[str, Any]]) -> dict[str, float]:
    """Seconds per step relative to DAPO's, on each machine that made parts of both (step times compare only
    within one machine)."""
    def seconds(parts: list[dict[str, Any]], label: str) -> list[float]:
        return [s for p in parts if machine_label(p.get("machine")) == label for s in p["step_seconds"]]

    labels = sorted({machine_label(p.get("machine")) for p in runs} & {machine_label(p.get("machine")) for p in dapo})
    return {label: float(np.mean(seconds(runs, label)) / np.mean(seconds(dapo, label)))
            for label in labels if seconds(runs, label) and seconds(dapo, label)}


def imagined_success_confirmed(part: dict[str, Any]) -> float | None:
    """Of a run's imagined successes over all its steps, the share the env would have given too (its unseen
    reply to the last call had the type the world model imagined); None without imagined successes, or for a
    part that predates the record."""
    confirmed_rates = part.get("imagined_success_confirmed_by_step")
    if not confirmed_rates:
        return None
    successes = [episodes * (rate or 0.0) for episodes, rate
                 in zip(part["imagined_episodes_by_step"], part["imagined_success_by_step"], strict=True)]
    total = sum(successes)
    if total == 0:
        return None
    return sum(n * (rate or 0.0) for n, rate in zip(successes, confirmed_rates, strict=True)) / total


def second_round_share(part: dict[str, Any]) -> float | None:
    """The share of a run's steps whose dynamic sampling ran a second round: more episodes than one round's
    ``prompts_per_step x group_size`` (None for a part without its episode counts or steps)."""
    config = part.get("config", {})
    first_round = (config.get("first_round_prompts") or config.get("prompts_per_step", 0)) * config.get("group_size", 0)
    sampled = np.diff(part.get("episodes_by_step", []))
    return float(np.mean(sampled > first_round)) if first_round and len(sampled) else None


def _final_test_rows(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The runs' final test-split successes by difficulty (None for a run without one) and their mean."""
    difficulties = sorted({d for p in runs for d in p.get("final_test_by_difficulty", {})}, key=int)
    by_difficulty = {d: [p.get("final_test_by_difficulty", {}).get(d) for p in runs] for d in difficulties}
    return {"final_test_success_by_difficulty": by_difficulty,
            "final_test_success_by_difficulty_mean": {d: _mean(values) for d, values in by_difficulty.items()}}


def part_finished(part: dict[str, Any]) -> bool:
    """Whether a part's run is over: its ``finished`` flag, or (a part written before the flag) its last step."""
    return part.get("finished", part.get("steps_done", part["steps"]) >= part["steps"])


def read_parts(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The parts in the results folder, by file name, but those ``--leave-out`` names (a run in flight keeps its
    part there, rewritten after every evaluation)."""
    paths = sorted(parts_dir(args).glob("*.json"))
    return [json.loads(p.read_text()) for p in paths
            if not any(fnmatch.fnmatchcase(p.stem, pattern) for pattern in args.leave_out)]


def report(args: argparse.Namespace) -> None:
    results = results_dir(args)
    parts = read_parts(args)
    if args.at_step is not None:
        parts = [cut_at_step(p, args.at_step) if p["model"] == args.at_step_model else p for p in parts]
    reference = results / "csr_dual_lora_warm_start.json"
    thresholds = {"tiny": args.threshold, "smollm2-135m": args.threshold_smollm2}
    summary: dict[str, Any] = {"threshold": args.threshold, "thresholds": thresholds, "split": "validation",
                               "quick": args.quick, "runs": {}, "step_time_vs_dapo_side_by_side": {},
                               "compared_at_step": {args.at_step_model: args.at_step} if args.at_step else {},
                               "warm_start_by_difficulty": json.loads(reference.read_text()) if reference.is_file()
                               else {}}
    for setting in sorted({_setting(p) for p in parts}):
        model, difficulty, temperature, warm_start_name = setting
        chosen = [p for p in parts if _setting(p) == setting]
        _check_one_setting(chosen)
        dapo_seconds = [s for p in chosen if p["mode"] == "dapo" for s in p["step_seconds"]]
        # step times compare only within one machine: say which machines the parts were made on
        machines = sorted({machine_label(p.get("machine")) for p in chosen})
        rows = {}
        for mode in [m for m in MODES if any(p["mode"] == m for p in chosen)]:
            runs = sorted((p for p in chosen if p["mode"] == mode), key=lambda p: p["seed"])
            reached = [tasks_to_threshold(p, thresholds[model]) for p in runs]
            seconds = [s for p in runs for s in p["step_seconds"]]
            by_difficulty = {d: [p.get("final_by_difficulty", {}).get(d) for p in runs]
                             for d in sorted({d for p in runs for d in p.get("final_by_difficulty", {})})}
            rows[mode] = {
                "seeds": [p["seed"] for p in runs],
                "steps": [p["steps"] for p in runs],
                "steps_done": [p.get("steps_done", p["steps"]) for p in runs],
                "start_success": [p["curve"][0][1] for p in runs],
                "final_success": [p["curve"][-1][1] for p in runs],
                "final_success_mean": float(np.mean([p["curve"][-1][1] for p in runs])),
                "tasks_to_threshold": [t for t, _ in reached],
                "steps_to_threshold": [s for _, s in reached],
                "final_wm_token_accuracy": [p["final_eval"].get("eval/wm_token_accuracy") for p in runs],
                "final_wm_exact_match_by_type": [
                    {k[len("eval/wm_"):-len("/exact_match")]: v for k, v in p["final_eval"].items()
                     if k.startswith("eval/wm_") and k.endswith("/exact_match")} for p in runs],
                "imagined_type_accuracy": [_mean(p.get("imagined_type_accuracy_by_step", [])) for p in runs],
                "imagined_success_confirmed": [imagined_success_confirmed(p) for p in runs],
                "imagined_episodes": [float(sum(p.get("imagined_episodes_by_step", []))) for p in runs],
                "final_success_by_difficulty": by_difficulty,
                "final_success_by_difficulty_mean": {  # over the runs that have it
                    d: float(np.mean([v for v in values if v is not None])) for d, values in by_difficulty.items()},
                "wm_success_correlation": [p["wm_success_correlation"] for p in runs],
                "aux_grad_norm_ratio_range": [p.get("aux_grad_norm_ratio_range") for p in runs],
                "aux_grad_scale_range": [p.get("aux_grad_scale_range") for p in runs],
                "aux_grad_cosine_range": [p.get("aux_grad_cosine_range") for p in runs],
                "final_success_ci95": final_success_interval(runs),  # seeds, then episodes within one
                "finished": [part_finished(p) for p in runs],
                **_final_test_rows(runs),
                "step_time_vs_dapo_by_machine": step_time_by_machine(runs, [p for p in chosen if p["mode"] == "dapo"]),
                "seconds_per_step": float(np.mean(seconds)),
                "wm_warmup_seconds": [p.get("wm_warmup_seconds", 0.0) for p in runs],
                "step_time_vs_dapo": float(np.mean(seconds) / np.mean(dapo_seconds)) if dapo_seconds else None,
                "machines": [machine_label(p.get("machine")) for p in runs],
                "step_time_machines_differ": len(machines) > 1,
                "curves": [p["curve"] for p in runs],
                "wm_accuracy_curves": [p["wm_accuracy_curve"] for p in runs],
                "invalid_call_rate_curves": [p.get("invalid_call_rate_curve") for p in runs],
                "tasks_by_step": [p["tasks_by_step"] for p in runs],
                "second_round_share": [second_round_share(p) for p in runs],
                "commands": [p["command"] for p in runs],
            }
        key = f"{model}-d{difficulty}{temperature_suffix(temperature)}{warm_start_name}"
        summary["runs"][key] = rows
        # every mode timed by `step-time` in this setting, parts or not: {mode: {machine: its step / DAPO's}}
        summary["step_time_vs_dapo_side_by_side"][key] = side_by_side_step_times(results, setting, list(MODES))
    write_json(results / "csr_dual_lora_vs_dapo.json", summary)
    _plot(summary, results / "csr_dual_lora_vs_dapo.png")
    for key, rows in summary["runs"].items():
        for mode, row in rows.items():
            interval = row["final_success_ci95"]
            shown = f" (95% {interval[0]:.3f}-{interval[1]:.3f})" if interval else ""
            print(f"{key} {mode:9s} success {row['start_success']} -> {row['final_success']}{shown} | tasks to "
                  f"{thresholds[key.split('-d')[0]]}: {row['tasks_to_threshold']} | WM acc {row['final_wm_token_accuracy']} | "
                  f"step time x{row['step_time_vs_dapo']}")


def _check_one_setting(parts: list[dict[str, Any]]) -> None:
    """Refuse to compare parts of one model, difficulty and warm start that ran with other settings (steps,
    validation, batch, dropout: :data:`SETTING_FIELDS`): replace the odd ones with runs of the common setting."""
    settings = {json.dumps(run_setting(p["config"]), sort_keys=True) for p in parts}
    if len(settings) > 1:
        by_setting = {s: [f"{p['mode']} seed {p['seed']}" for p in parts
                          if json.dumps(run_setting(p["config"]), sort_keys=True) == s] for s in settings}
        raise SystemExit("these parts compare runs made with other settings: "
                         + "; ".join(f"{', '.join(names)}: {s}" for s, names in sorted(by_setting.items())))


def _plot(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(summary["runs"])
    palette = plt.get_cmap("tab20").colors  # one colour per mode, the same in every panel (10 repeat too soon)
    fig, axes = plt.subplots(len(keys), 2, figsize=(11, 3.6 * len(keys)), squeeze=False)
    for (success_ax, wm_ax), key in zip(axes, keys):
        for mode, row in summary["runs"][key].items():
            color = palette[list(MODES).index(mode) % len(palette)]
            for ax, curves in ((success_ax, row["curves"]), (wm_ax, row["wm_accuracy_curves"])):
                length = min(len(c) for c in curves)
                tasks = np.array([row["tasks_by_step"][i][int(c[j][0])] for i, c in enumerate(curves)
                                  for j in range(length)]).reshape(len(curves), length).mean(0)
                values = np.array([[v if v is not None else np.nan for _, v in c[:length]] for c in curves])
                with warnings.catch_warnings():  # a collapsed policy makes no call: no world-model figure
                    warnings.simplefilter("ignore", RuntimeWarning)
                    low, mean, high = np.nanmin(values, 0), np.nanmean(values, 0), np.nanmax(values, 0)
                ax.plot(tasks, mean, marker="o", label=mode, color=color)
                ax.fill_between(tasks, low, high, color=color, alpha=0.15)
        success_ax.axhline(summary["thresholds"][key.split("-d")[0]], color="grey", linestyle=":")
        success_ax.set(xlabel="real training tasks", ylabel="validation success (greedy)", title=key)
        wm_ax.set(xlabel="real training tasks", ylabel="world-model token accuracy (validation calls)", title=key)
        success_ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _apply_quick(args: argparse.Namespace) -> None:
    """``--quick`` step counts and episode numbers (batch sizes: :data:`QUICK_CONFIG`)."""
    if not args.quick:
        return
    if args.stage in ("run", "evaluate-aside", "warm-start", "step0", "step-time"):
        args.steps, args.max_turns = 2, 4
    if args.stage == "imagined-replies":
        args.max_turns = 4
    if args.stage in ("run", "evaluate-aside", "warm-start", "step0"):
        args.eval_every, args.episodes, args.iwm_steps = 2, 4, 1
    if args.stage == "final-eval":
        args.episodes = 4


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line of a stage, with ``--quick``'s sizes applied."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="stage", required=True)
    common = [results_parser()]
    chosen = warm_start_flags()  # which warm start the runs start from
    for stage, description in (("run", "train one mode from the warm start (resumable)"),
                               ("evaluate-aside", ("evaluate the checkpoints of `run --evaluate-aside` of the same "
                                                  "flags as they appear, beside its trainer")),
                               ("warm-start", "only train (or load) the warm start a run with these flags uses"),
                               ("step0", "the step-0 validation every run of these flags shares (computed once)")):
        one = sub.add_parser(stage, help=description, parents=[*common, chosen])
        one.add_argument("--model", choices=["tiny", "smollm2-135m"], default="tiny")
        if stage != "step0":
            one.add_argument("--mode", choices=sorted(MODES), required=True)
        one.add_argument("--seed", type=int, default=0)
        one.add_argument("--difficulty", type=int, default=1)
        one.add_argument("--steps", type=int, default=16)
        one.add_argument("--max-turns", type=int, default=8)
        one.add_argument("--eval-every", type=int, default=4)
        one.add_argument("--episodes", type=int, default=64, help="validation episodes per evaluation")
        one.add_argument("--iwm-steps", type=int, default=4, help="world-model-only steps of the iwm mode")
        one.add_argument("--lora-dropout", type=float,
                         help="dropout on both adapters' inputs while training (default: DualLoRAConfig's)")
        one.add_argument("--device", default="cpu", help="where the run (and a warm start it trains) computes")
        add_batch_flags(one)
        if stage in ("run", "evaluate-aside"):
            one.add_argument("--final-test", type=int, nargs="+", choices=DIFFICULTIES, metavar="D",
                             help="after the last step, evaluate the last weights on test-split companies at "
                                  "these difficulties (--episodes each); the part is finished once they are in")
        if stage == "run":
            one.add_argument("--evaluate-aside", action="store_true",
                             help="validate and test aside: train without validating (a checkpoint every step), "
                                  "leaving the evaluations to `evaluate-aside` workers, then help them")
            one.add_argument("--train-only", action="store_true",
                             help="with --evaluate-aside: exit once trained instead of helping the workers (a "
                                  "process that trained holds memory a fresh worker does not: the sweep starts "
                                  "one in its place)")
            one.add_argument("--restart", action="store_true",
                             help="start afresh: drop the run folder's checkpoints and replace a part made with "
                                  "other settings")
    timing = sub.add_parser("step-time", help="seconds per training step of one mode (no validation)",
                            parents=[*common, chosen])
    timing.add_argument("--model", choices=["tiny", "smollm2-135m"], default="tiny")
    timing.add_argument("--mode", choices=sorted(MODES), required=True)
    timing.add_argument("--seed", type=int, default=0)
    timing.add_argument("--difficulty", type=int, default=1)
    timing.add_argument("--steps", type=int, default=4)
    timing.add_argument("--max-turns", type=int, default=8)
    timing.add_argument("--lora-dropout", type=float,
                        help="dropout on both adapters' inputs while training (default: DualLoRAConfig's)")
    timing.add_argument("--from-checkpoint", type=Path,
                        help="start from this checkpoint of a run of the mode and seed instead of the warm start "
                             "(a warm-up's checkpoint-0: the steps are timed without the warm-up before them)")
    add_batch_flags(timing)
    replies = sub.add_parser("imagined-replies", help=("one round of an imagined mode's imagined groups, its "
                                                       "replies' KV reused between calls and not"),
                             parents=[*common, chosen])
    replies.add_argument("--model", choices=["tiny", "smollm2-135m"], default="tiny")
    replies.add_argument("--mode", choices=sorted(m for m, s in MODES.items() if s.get("imagined_fraction")),
                         required=True)
    replies.add_argument("--seed", type=int, default=0)
    replies.add_argument("--difficulty", type=int, default=1)
    replies.add_argument("--max-turns", type=int, default=8)
    replies.add_argument("--replay-order", nargs=2, choices=["plain", "reuse"], default=["plain", "reuse"],
                         help="which reply engine replays the round's calls first")
    add_batch_flags(replies)
    sub.add_parser("demo-time", help="wall time of `make demo` (run it on an otherwise idle machine)",
                   parents=common)
    final = sub.add_parser("final-eval", help="evaluate every finished run's last checkpoint at more difficulties",
                           parents=[*common, chosen])
    final.add_argument("--model", choices=["tiny", "smollm2-135m"], default="tiny")
    final.add_argument("--difficulties", type=int, nargs="+", default=[2])
    final.add_argument("--episodes", type=int, default=64)
    summary = sub.add_parser("report", help="merge the runs into the results JSON and PNG", parents=common)
    summary.add_argument("--threshold", type=float, default=THRESHOLDS["tiny"],
                         help="the tiny model's validation success to reach (default: THRESHOLDS, fixed before "
                              "its runs)")
    summary.add_argument("--threshold-smollm2", type=float, default=THRESHOLDS["smollm2-135m"],
                         help="SmolLM2's validation success to reach (default: THRESHOLDS, fixed before its "
                              "runs)")
    summary.add_argument("--at-step", type=int, help="compare the runs of --at-step-model as if each had stopped "
                                                      "after its validation at this step (runs cut short by a "
                                                      "deadline: the same budget for every mode)")
    summary.add_argument("--at-step-model", default="smollm2-135m")
    summary.add_argument("--leave-out", nargs="+", default=[], metavar="PART",
                         help="part names (file names without .json; shell-style patterns) to leave out: the "
                              "runs still in flight, for the comparison of the others")
    args = parser.parse_args(argv)
    _apply_quick(args)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    set_torch_threads(1)
    stages = {"run": run, "evaluate-aside": evaluate_aside_stage, "warm-start": lambda args: warm_start(args, args.model), "step0": step0,
              "step-time": step_time, "imagined-replies": imagined_replies,
              "demo-time": demo_time, "final-eval": final_eval, "report": report}
    stages[args.stage](args)


if __name__ == "__main__":
    main()
