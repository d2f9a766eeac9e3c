"""Debugging tools for dual-LoRA runs as subcommands: ``python -m worldgym.agents.dual_lora.debug --help``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import re
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from worldgym.agents.dual_lora.config import DualLoRAConfig
from worldgym.agents.dual_lora.trainer import DualLoRATrainer
from worldgym.agents.dual_lora.world_model import (
    PhoneCallExample,
    WorldModelScores,
    phone_call_examples,
    phone_call_turns,
    score_in_chunks,
    wm_token_ids,
)
from worldgym.agents.grpo.presets import GRPOPreset, grpo_preset
from worldgym.agents.llm.adapters import of_adapter, using_adapters
from worldgym.agents.llm.checkpoint import CheckpointError, load_checkpoint
from worldgym.agents.llm.engines import GenerationEngine, HFEngine, SamplingParams
from worldgym.agents.llm.envs import make_text_env
from worldgym.agents.llm.evaluation import evaluate_chat_policy
from worldgym.agents.llm.rollout import Episode, RolloutCollector, collate_episodes
from worldgym.agents.llm.warm_start import WarmStartConfig, load_or_train_warm_start, read_warm_start_config
from worldgym.checkpointing import MANIFEST, latest_checkpoint, resolve_checkpoint
from worldgym.env_training import default_preset
from worldgym.envs.csr_phone.phrases import RESPONSE_TYPES
from worldgym.errors import CheckpointNotFoundError, ConfigError, WorldgymError
from worldgym.jsonl import read_jsonl
from worldgym.spaces import ToolCallError
from worldgym.wrappers import parse_tool_call

__all__ = [
    "Base", "Result", "UserError", "analyze_responses", "check_gradients", "compare_losses", "find_checkpoint",
    "inspect_predictions", "load_trainer", "main", "read_metrics", "validate_trajectories",
]

logger = logging.getLogger(__name__)

MakeEngine = Callable[[PreTrainedModel], GenerationEngine]
_WM_FIGURES = ("token_accuracy", "exact_match", "perplexity", "calls")


class UserError(WorldgymError):
    """A wrong path or argument: :func:`main` prints the message and exits with status 2, no traceback."""


@dataclass
class Result:
    """A subcommand's findings: JSON-able ``figures`` (what ``--json`` writes), the tables showing them, and
    the exit status (1: a problem was found)."""

    figures: dict[str, Any]
    tables: list[RenderableType]
    exit_code: int = 0


@dataclass
class Base:
    """What a checkpoint's trainer is rebuilt on: ``model`` + ``tokenizer`` (+ ``make_engine``) when given
    (tests), else the warm-start folder ``warm_start``, else the preset's warm start cached under
    ``warm_starts``. ``preset``: the run's preset among its env's registered ones
    (:func:`worldgym.env_training.default_preset` of the run's env and model when None), which also gives the
    rollout engine."""

    model: PreTrainedModel | None = None
    tokenizer: PreTrainedTokenizerBase | None = None
    make_engine: MakeEngine | None = None
    warm_start: str | None = None
    warm_starts: str = "runs/warm_starts"
    preset: str | None = None

    def resolve(self, config: DualLoRAConfig) -> tuple[PreTrainedModel, PreTrainedTokenizerBase,
                                                       MakeEngine | None]:
        """The base model, its tokenizer and the rollout engine factory for a run with ``config``."""
        if self.model is not None:
            return self.model, self.tokenizer, self.make_engine
        preset = self.preset_of(config)
        settings = self._warm_start_settings(config, preset)
        ws = load_or_train_warm_start(settings, cache_dir=self._cache_dir(), progress=False)
        make_engine = self.make_engine or (lambda policy: preset.engine(policy, ws.tokenizer))
        return ws.model, ws.tokenizer, make_engine

    def preset_of(self, config: DualLoRAConfig) -> GRPOPreset:
        """The run's preset: ``preset``, else the one its env registered for its model."""
        return grpo_preset(config.env_id, self.preset or default_preset(config.env_id, config.model))

    def _cache_dir(self) -> Path:
        return Path(self.warm_start).parent if self.warm_start else Path(self.warm_starts)

    def _warm_start_settings(self, config: DualLoRAConfig, preset: GRPOPreset) -> WarmStartConfig:
        if self.warm_start:
            try:
                return read_warm_start_config(self.warm_start)
            except CheckpointNotFoundError as error:
                raise UserError(str(error)) from error
        settings = dataclasses.replace(preset.warm_start, model=config.model)
        if not (self._cache_dir() / settings.key() / "warm_start.json").is_file():
            raise UserError(f"no cached warm start {self._cache_dir() / settings.key()} for model "
                            f"{config.model!r} (preset {preset.name!r}); pass --warm-start with the folder the "
                            "run started from, or --preset")
        return settings


# ---------------------------------------------------------------- reading runs and checkpoints
def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """The records of a run's ``metrics.jsonl`` (``run_dir`` may also be the file itself)."""
    path = Path(run_dir)
    log = path if path.is_file() else path / "metrics.jsonl"
    if not log.is_file():
        raise UserError(f"{run_dir} is not a run directory: {log} does not exist")
    records = read_jsonl(log)
    if not records:
        raise UserError(f"{log} holds no metrics yet")
    return records


def find_checkpoint(path: str | Path) -> Path:
    """``path`` when it is a checkpoint folder, else the newest checkpoint of the run directory ``path``."""
    path = Path(path)
    if not resolve_checkpoint(path).exists():
        raise UserError(f"{path} does not exist")
    if path.is_dir() and not (path / MANIFEST).exists() and not (path / "state.json").exists():
        newest = latest_checkpoint(path)
        if newest is None and (path / "metrics.jsonl").is_file():
            raise UserError(f"run directory {path} holds no checkpoint yet")
        return newest or path  # else load_checkpoint says what the folder lacks
    return path


def checkpoint_state(checkpoint: Path) -> dict[str, Any]:
    """The JSON state of a dual-LoRA checkpoint (checksums verified; :class:`CheckpointError` names a bad
    file)."""
    _, state, _ = load_checkpoint(checkpoint, check_run_files=False)  # its replay is not needed here
    if "transfer" not in state.get("config", {}):
        raise UserError(f"{checkpoint} is not a dual-LoRA checkpoint: its state.json holds no DualLoRAConfig")
    return state


def config_from_dict(data: dict[str, Any], **overrides: Any) -> DualLoRAConfig:
    """A :class:`DualLoRAConfig` from ``to_dict()`` data (fields this version does not know are dropped)."""
    names = {field.name for field in dataclasses.fields(DualLoRAConfig)}
    unknown = sorted(set(data) - names)
    if unknown:
        logger.warning("ignoring config fields this worldgym version does not know: %s", unknown)
    return DualLoRAConfig(**{**{k: v for k, v in data.items() if k in names}, **overrides})


def load_trainer(checkpoint: str | Path, base: Base, **overrides: Any) -> DualLoRATrainer:
    """The checkpoint's trainer: its stored config (with ``overrides``) on ``base``, adapters, replay buffer
    and λ state restored."""
    checkpoint = find_checkpoint(checkpoint)
    state = checkpoint_state(checkpoint)
    # load() trims <output_dir>/metrics.jsonl to the checkpoint's step: point it at a scratch folder, never at
    # the run's own log (the run may still be writing it)
    with tempfile.TemporaryDirectory(prefix="worldgym-debug-") as scratch:
        config = config_from_dict(state["config"], **{"output_dir": scratch, "progress": False, **overrides})
        model, tokenizer, make_engine = base.resolve(config)
        trainer = DualLoRATrainer(config, model=model, tokenizer=tokenizer, make_engine=make_engine)
        trainer.load(checkpoint)
    return trainer


def validation_episodes(trainer: DualLoRATrainer, count: int, difficulty: int | None = None) -> list[Episode]:
    """Greedy episodes on the run's validation env (at ``difficulty`` when given), seeded as validation is."""
    config = trainer.config
    kwargs = {**config.env_kwargs, **config.eval_env_kwargs}
    if difficulty is not None:
        kwargs["difficulty"] = difficulty
    _, episodes = evaluate_chat_policy(
        trainer.engine, trainer.tokenizer, lambda: make_text_env(config.env_id, kwargs),
        count, config.max_turns, config.max_new_tokens, config.decoding)
    return episodes


@contextmanager
def _world_model_active(trainer: DualLoRATrainer) -> Iterator[None]:
    """The world model's adapter active and the model in eval mode (no dropout) for the block."""
    config, model = trainer.config, trainer.policy
    was_training = model.training
    model.eval()
    try:
        with using_adapters(model, [config.world_model_adapter], config.adapter_names):
            yield
    finally:
        model.train(was_training)


# ---------------------------------------------------------------- formatting
def _number(value: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:.{digits}g}" if abs(value) >= 1000 else f"{value:.{digits}f}"


def _arrow(first: float | None, last: float | None, digits: int = 3) -> str:
    return f"{_number(first, digits)} → {_number(last, digits)}"


def _count_arrow(first: float | None, last: float | None) -> str:
    return " → ".join("—" if value is None else str(int(value)) for value in (first, last))


def _call_text(action: str) -> str:
    """A tool call as ``name(arguments)`` (the raw reply when it does not parse)."""
    call = parse_tool_call(action)
    if isinstance(call, ToolCallError):
        return _one_line(action, 80)
    return f"{call.name}({', '.join(str(v) for v in call.arguments.values())})"


def _one_line(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


# ---------------------------------------------------------------- analyze-responses
def _wm_figures(record: dict[str, Any], response_type: str | None) -> dict[str, float | None]:
    prefix = f"eval/wm_{response_type}/" if response_type else "eval/wm_"
    return {name: record.get(prefix + name) for name in _WM_FIGURES}


def analyze_responses(run_dir: str | Path) -> Result:
    """The world model's validation token accuracy, exact match, perplexity and call count by CSR response
    type, at the run's first and last evaluation."""
    evaluations = [record for record in read_metrics(run_dir) if "eval/wm_calls" in record]
    if not evaluations:
        raise UserError(f"{run_dir}: no evaluation in metrics.jsonl has world-model figures (eval/wm_*)")
    first, last = evaluations[0], evaluations[-1]
    found = {match.group(1) for record in (first, last) for key in record
             if (match := re.fullmatch(r"eval/wm_(.+)/calls", key))}
    types = [*RESPONSE_TYPES, *sorted(found - set(RESPONSE_TYPES))]
    by_type = {t: {"first": _wm_figures(first, t), "last": _wm_figures(last, t)} for t in types}
    overall = {"first": _wm_figures(first, None), "last": _wm_figures(last, None)}
    figures = {"run": str(run_dir), "evaluations": len(evaluations), "first_step": first.get("step"),
               "last_step": last.get("step"), "response_types": by_type, "overall": overall}
    table = Table(title=f"world model by CSR response type: {run_dir} (validation, step {first.get('step')} → "
                        f"{last.get('step')})")
    for column in ("response type", "calls", "token accuracy", "exact match", "perplexity"):
        table.add_column(column, justify="left" if column == "response type" else "right",
                         no_wrap=column == "response type")
    for name, row in [*by_type.items(), ("all", overall)]:
        table.add_row(name, _count_arrow(row["first"]["calls"], row["last"]["calls"]),
                      *(_arrow(row["first"][f], row["last"][f])
                        for f in ("token_accuracy", "exact_match", "perplexity")),
                      end_section=name == types[-1])
    return Result(figures, [table])


# ---------------------------------------------------------------- compare-losses
def _run_config(run_dir: Path) -> tuple[DualLoRAConfig | None, Path | None]:
    """The config stored in the run's newest checkpoint (None before the first save)."""
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        return None, None
    return config_from_dict(checkpoint_state(checkpoint)["config"]), checkpoint


def _summary(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"first": None, "last": None, "mean": None}
    return {"first": values[0], "last": values[-1], "mean": float(np.mean(values))}


def run_losses(run_dir: str | Path, band: tuple[float, float] | None = None) -> dict[str, Any]:
    """One run's L_policy, L_wm, λ, L_wm / |L_policy| (steps outside the band: the config's
    ``loss_ratio_band`` unless ``band`` is given) and validation success, first → last."""
    records = [{"loss/world_model" if key == "wm/loss" else key: value for key, value in record.items()}
               for record in read_metrics(run_dir)]  # runs logged before the key's rename wrote "wm/loss"
    config, checkpoint = _run_config(Path(run_dir))
    band = tuple(band or (config.loss_ratio_band if config else DualLoRAConfig.loss_ratio_band))
    steps = [r for r in records if "loss/policy" in r]
    world_model_only = config.iwm_steps if config is not None and config.transfer == "iwm" else 0
    ratios = [r["loss/world_model"] / max(abs(r["loss/policy"]), 1e-8) for r in steps  # as the trainer logs it
              if "loss/world_model" in r and r["loss/policy"] and r["step"] > world_model_only]
    evaluations = [r for r in records if "eval/success_rate" in r]
    return {
        "run": str(run_dir), "config_from": str(checkpoint) if checkpoint else None, "band": list(band),
        "steps": len(steps),
        "policy_loss": _summary([r["loss/policy"] for r in steps]),
        "wm_loss": _summary([r["loss/world_model"] for r in steps if "loss/world_model" in r]),
        "lambda": _summary([r["wm/lambda"] for r in steps if "wm/lambda" in r]),
        "grad_norm": _summary([r["loss/grad_norm"] for r in steps if "loss/grad_norm" in r]),
        "ratio": {**_summary(ratios), "steps": len(ratios),
                  "outside_band": sum(not band[0] <= ratio <= band[1] for ratio in ratios)},
        "success": {"first": evaluations[0]["eval/success_rate"] if evaluations else None,
                    "last": evaluations[-1]["eval/success_rate"] if evaluations else None,
                    "first_step": evaluations[0]["step"] if evaluations else None,
                    "last_step": evaluations[-1]["step"] if evaluations else None},
        "wm_token_accuracy": _summary([r["eval/wm_token_accuracy"] for r in evaluations
                                       if "eval/wm_token_accuracy" in r]),
    }


def compare_losses(run_dirs: Sequence[str | Path], band: tuple[float, float] | None = None) -> Result:
    """:func:`run_losses` of each run, side by side."""
    runs = [run_losses(run_dir, band) for run_dir in run_dirs]
    table = Table(title="losses (first → last step; mean in brackets)")
    table.add_column("")
    for run in runs:
        table.add_column(Path(run["run"]).name or run["run"], justify="right")

    def first_last_mean(key: str) -> list[str]:
        return [f"{_arrow(r[key]['first'], r[key]['last'])} ({_number(r[key]['mean'])})" for r in runs]

    table.add_row("training steps", *(str(r["steps"]) for r in runs))
    table.add_row("L_policy", *first_last_mean("policy_loss"))
    table.add_row("L_wm", *first_last_mean("wm_loss"))
    table.add_row("λ", *(_arrow(r["lambda"]["first"], r["lambda"]["last"]) for r in runs))
    table.add_row("grad norm", *first_last_mean("grad_norm"))
    table.add_row("L_wm / |L_policy|", *first_last_mean("ratio"))
    table.add_row("steps outside band", *(f"{r['ratio']['outside_band']}/{r['ratio']['steps']} outside "
                                          f"[{r['band'][0]:g}, {r['band'][1]:g}]" for r in runs))
    table.add_row("validation success", *(f"{_arrow(r['success']['first'], r['success']['last'])} (step "
                                          f"{r['success']['first_step']} → {r['success']['last_step']})"
                                          for r in runs))
    table.add_row("WM token accuracy", *(_arrow(r["wm_token_accuracy"]["first"], r["wm_token_accuracy"]["last"])
                                         for r in runs))
    return Result({"runs": runs}, [table])


# ---------------------------------------------------------------- inspect-predictions
def greedy_replies(trainer: DualLoRATrainer, examples: Sequence[PhoneCallExample],
                   max_new_tokens: int) -> list[list[int]]:
    """The world model's greedy reply to each call: generated with its adapter from the context and
    ``<|predict_csr|> <|csr|>`` until ``<|/csr|>`` (included when reached)."""
    if not examples:
        return []
    _, _, end = wm_token_ids(trainer.tokenizer)
    engine = HFEngine(trainer.policy, trainer.tokenizer.pad_token_id, [end], batch_size=8)
    with _world_model_active(trainer):
        generations = engine.generate([list(e.token_ids[: e.target_start]) for e in examples],
                                      SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens))
    return [generation.token_ids for (generation,) in generations]


@torch.no_grad()
def teacher_forced_scores(trainer: DualLoRATrainer, examples: Sequence[PhoneCallExample]) -> WorldModelScores:
    """The world model's teacher-forced scores of ``examples`` (what validation's ``eval/wm_*`` average)."""
    with _world_model_active(trainer):
        return score_in_chunks(trainer.policy, examples, trainer.tokenizer.pad_token_id, chunk_size=8)


def _position_match(predicted: Sequence[int], targets: Sequence[int]) -> float:
    """Share of target positions (reply and ``<|/csr|>``) where the free-running prediction has that token."""
    return sum(p == t for p, t in zip(predicted, targets)) / len(targets)


def inspect_predictions(checkpoint: str | Path, base: Base | None = None, episodes: int = 4,
                        difficulty: int | None = None, max_new_tokens: int = 80) -> Result:
    """For each phone call of a few greedy validation episodes: the call, the CSR's real reply and the world
    model's greedy prediction, with teacher-forced token accuracy and the prediction's position match."""
    trainer = load_trainer(checkpoint, base or Base())
    played = validation_episodes(trainer, episodes, difficulty)
    examples = phone_call_examples(played, trainer.tokenizer, trainer.config.wm_max_context_tokens)
    flat = [example for row in examples for example in row]
    predictions = iter(greedy_replies(trainer, flat, max_new_tokens))
    scores = teacher_forced_scores(trainer, flat) if flat else None
    tokenizer, index, rows = trainer.tokenizer, 0, []
    for number, (episode, episode_examples) in enumerate(zip(played, examples)):
        calls = []
        for turn, example in zip(phone_call_turns(episode), episode_examples):
            predicted, targets = next(predictions), example.token_ids[example.target_start:]
            calls.append({
                "call": turn.action, "response_type": example.response_type, "reply": turn.observation,
                "prediction": tokenizer.decode([t for t in predicted if t != targets[-1]]),
                "token_accuracy": float(scores.token_accuracy[index]),
                "position_match": _position_match(predicted, targets),
                "exact": list(predicted) == list(targets)})
            index += 1
        rows.append({"episode": number, "env_seed": episode.env_seed, "success": episode.success, "calls": calls})
    all_calls = [call for row in rows for call in row["calls"]]
    figures = {"checkpoint": str(find_checkpoint(checkpoint)), "step": trainer.step, "episodes": rows,
               "calls": len(all_calls),
               "mean_token_accuracy": float(np.mean([c["token_accuracy"] for c in all_calls]))
               if all_calls else None,
               "exact_predictions": sum(c["exact"] for c in all_calls)}
    table = Table(title=f"world-model predictions, {figures['checkpoint']} (step {trainer.step}): "
                        f"{len(all_calls)} calls, mean token accuracy {_number(figures['mean_token_accuracy'])}",
                  show_lines=True)
    for column in ("ep", "type", "call", "real reply", "prediction", "acc", "match"):
        table.add_column(column, justify="right" if column in ("ep", "acc", "match") else "left",
                         ratio=3 if column in ("real reply", "prediction") else None)
    for row in rows:
        for call in row["calls"]:
            table.add_row(f"{row['episode']}{'✓' if row['success'] else ''}", call["response_type"],
                          _call_text(call["call"]), _one_line(call["reply"]), _one_line(call["prediction"]),
                          _number(call["token_accuracy"]), _number(call["position_match"]))
    return Result(figures, [table])


# ---------------------------------------------------------------- check-gradients
def _adapter_of(name: str, adapters: Sequence[str]) -> str | None:
    return next((adapter for adapter in adapters if of_adapter(name, adapter)), None)


def _expected_to_train(config: DualLoRAConfig, policy_weight: float, wm_lambda: float,
                       wm_calls: int) -> dict[str, bool]:
    """Which adapters this step's loss should reach: the policy loss (weight > 0) the policy's adapters, the
    world-model loss (λ > 0 and some phone call) the world model's."""
    policy_trains = policy_weight > 0
    wm_trains = wm_lambda > 0 and wm_calls > 0
    return {adapter: (policy_trains and adapter in config.policy_adapters)
            or (wm_trains and adapter == config.world_model_adapter) for adapter in config.adapter_names}


def check_gradients(checkpoint: str | Path, base: Base | None = None, prompts: int = 2, group_size: int = 2,
                    seed: int = 0) -> Result:
    """One training minibatch's forward and backward (the trainer's own step, gradients unclipped) on freshly
    sampled episodes with ±1 advantages: per adapter its gradient norm and its LoRA tensors without gradient;
    base weights must get none. Exit status 1 when an adapter that should train gets no gradient (or one that
    should not gets some)."""
    trainer = load_trainer(checkpoint, base or Base(), grad_clip=math.inf)
    config, objective = trainer.config, trainer.world_model
    rng = np.random.default_rng(seed)
    params = SamplingParams(config.temperature, config.top_p, config.max_new_tokens, seed=seed)
    collector = RolloutCollector(trainer.engine, trainer.tokenizer, trainer.make_env, config.max_turns,
                                 config.max_episode_tokens, decoding=config.decoding)  # any batch size
    episodes = collector.collect(rng.integers(0, 2**31 - 1, size=prompts).tolist(), group_size, params)
    objective.begin_step(episodes, trainer.step)
    calls, source = sum(len(row) for row in objective._rows), "rollouts"
    if calls == 0 and objective.replay is not None and len(objective.replay):
        # the episodes made no phone call: give the world model replayed ones, as a later step would
        objective._rows[0] = objective.replay.sample(config.minibatch_size, trainer.step + 1, rng)
        calls, source = len(objective._rows[0]), "replay buffer"
    batch = collate_episodes(episodes, trainer.tokenizer.pad_token_id)
    # a plumbing check: real group advantages are often all 0 in so small a batch, which would zero L_policy
    advantages = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(len(episodes))])
    trainer.policy.train()
    metrics = trainer.minibatch_step(batch, advantages, torch.arange(len(episodes)))
    expected = _expected_to_train(config, objective.policy_weight, objective.schedule.value(trainer.step), calls)
    adapters, problems = {}, []
    for adapter in config.adapter_names:
        tensors = {n: p for n, p in trainer.trainable.items() if _adapter_of(n, config.adapter_names) == adapter}
        grads = [p.grad for p in tensors.values() if p.grad is not None]
        norm = float(torch.sqrt(sum((g.float() ** 2).sum() for g in grads))) if grads else 0.0
        adapters[adapter] = {"tensors": len(tensors), "grad_none": len(tensors) - len(grads),
                             "grad_zero": sum(int(not g.any()) for g in grads), "grad_norm": norm,
                             "should_train": expected[adapter]}
        if expected[adapter] and norm == 0:
            problems.append(f"adapter {adapter!r} should train at this step but got no gradient")
        if not expected[adapter] and norm > 0:
            problems.append(f"adapter {adapter!r} should not train at this step but got gradient {norm:.3g}")
    frozen = {n: p for n, p in trainer.policy.named_parameters() if n not in trainer.trainable}
    stray = [n for n, p in frozen.items() if p.grad is not None]
    untracked = [n for n in trainer.trainable if _adapter_of(n, config.adapter_names) is None]
    problems += [f"base weight {n} got a gradient" for n in stray]
    problems += [f"trainable tensor {n} belongs to no adapter" for n in untracked]
    figures = {"checkpoint": str(find_checkpoint(checkpoint)), "step": trainer.step, "transfer": config.transfer,
               "episodes": len(episodes), "wm_calls": calls, "wm_calls_from": source,
               "wm_lambda": objective.schedule.value(trainer.step),
               "loss": {k: v for k, v in metrics.items() if k in ("loss/total", "loss/policy", "loss/world_model")},
               "adapters": adapters, "base_tensors_with_grad": len(stray), "problems": problems}
    table = Table(title=f"gradients of one minibatch, {figures['checkpoint']} (step {trainer.step}, transfer "
                        f"{config.transfer}, λ {figures['wm_lambda']:g}, {calls} phone calls from {source})")
    for column in ("adapter", "should train", "grad norm", "LoRA tensors", "None grad", "zero grad"):
        table.add_column(column, justify="left" if column == "adapter" else "right")
    for adapter, row in adapters.items():
        table.add_row(adapter, "yes" if row["should_train"] else "no", f"{row['grad_norm']:.4g}",
                      str(row["tensors"]), str(row["grad_none"]), str(row["grad_zero"]))
    table.add_row("base weights", "no", "—" if not stray else "> 0", str(len(frozen)),
                  str(len(frozen) - len(stray)), "—")
    return Result(figures, [table, _problems_table(problems)], exit_code=1 if problems else 0)


def _problems_table(problems: Sequence[str]) -> RenderableType:
    if not problems:
        return Text("no problems found", style="green")
    table = Table(title=f"{len(problems)} problems", title_style="bold red")
    table.add_column("#", justify="right")
    table.add_column("problem")
    for number, problem in enumerate(problems, 1):
        table.add_row(str(number), problem)
    return table


# ---------------------------------------------------------------- validate-trajectories
def example_problems(example: PhoneCallExample, tokenizer: PreTrainedTokenizerBase) -> list[str]:
    """What is wrong with a world-model example: its markers, targets, reply or response type."""
    predict, start, end = wm_token_ids(tokenizer)
    ids, target_start, problems = example.token_ids, example.target_start, []
    if ids.count(predict) != 1:
        problems.append(f"holds {ids.count(predict)} <|predict_csr|> tokens, not 1")
    if not 2 <= target_start <= len(ids) or ids[target_start - 2 : target_start] != (predict, start):
        problems.append(f"target_start {target_start} is not preceded by <|predict_csr|> <|csr|>")
    if not ids or ids[-1] != end:
        problems.append("does not end with <|/csr|>")
    if example.num_targets <= 0:
        problems.append(f"has {example.num_targets} target tokens")
    elif not tokenizer.decode(ids[target_start:-1]).strip():
        problems.append("decodes to an empty reply")
    if example.response_type not in RESPONSE_TYPES:
        problems.append(f"has unknown response type {example.response_type!r}")
    return problems


def episode_problems(episode: Episode, tokenizer: PreTrainedTokenizerBase) -> list[str]:
    """What is wrong with an episode's token bookkeeping: each turn's spans must index its own reply and
    observation tokens, model tokens carry action mask 1 and every other token 0."""
    ids, mask, eos, problems = episode.token_ids, episode.action_mask, tokenizer.eos_token_id, []
    if not len(ids) == len(mask) == len(episode.old_logprobs):
        lengths = f"{len(ids)}, {len(mask)}, {len(episode.old_logprobs)}"
        return [f"token_ids, action_mask, old_logprobs have lengths {lengths}"]
    expected_mask, cursor = [0] * len(ids), episode.prompt_length
    for number, turn in enumerate(episode.turns):
        (start, end), (obs_start, obs_end) = turn.action_span, turn.observation_span
        where = f"turn {number}"
        if start != cursor or not start < end <= len(ids):
            problems.append(f"{where}: action span {turn.action_span} does not follow the previous tokens "
                            f"(expected to start at {cursor}, within {len(ids)} tokens)")
            break
        closed = ids[end - 1] == eos and mask[end - 1] == 0  # the collector's eos closing a cut-off reply
        model_end = end - 1 if closed else end
        expected_mask[start:model_end] = [1] * (model_end - start)
        reply = ids[start:end - 1] if ids[end - 1] == eos else ids[start:end]
        if tokenizer.decode(reply, skip_special_tokens=False) != turn.action:
            problems.append(f"{where}: the tokens of its action span do not decode to its action")
        if turn.finish_reason == "length" and not closed:
            problems.append(f"{where}: a cut-off reply without the closing context eos")
        if obs_start != end or obs_end < obs_start or obs_end > len(ids):
            problems.append(f"{where}: observation span {turn.observation_span} does not follow its action")
            break
        if obs_end > obs_start and turn.observation not in tokenizer.decode(ids[obs_start:obs_end]):
            problems.append(f"{where}: its observation span does not hold its observation")
        if obs_end == obs_start and number < len(episode.turns) - 1:
            problems.append(f"{where}: an empty observation span before a later turn")
        cursor = obs_end
    if cursor != len(ids) and not problems:
        problems.append(f"{len(ids) - cursor} tokens after the last turn's spans")
    wrong = [i for i, (m, e) in enumerate(zip(mask, expected_mask)) if m != e]
    if wrong and not problems:
        problems.append(f"action_mask differs from the turns' spans at {len(wrong)} tokens (first: {wrong[0]})")
    return problems


def validate_trajectories(path: str | Path, base: Base | None = None, episodes: int = 4,
                          difficulty: int | None = None) -> Result:
    """Check the replay buffer's phone-call examples and a few greedy episodes' spans and masks; exit status 1
    listing every problem."""
    trainer = load_trainer(path, base or Base())
    tokenizer, problems = trainer.tokenizer, []
    replay = trainer.world_model.replay
    # every stored call (sample() of all of them, in buffer order)
    stored = replay.sample(len(replay), sys.maxsize, np.random.default_rng(0)) if replay is not None else []
    for index, example in enumerate(stored):
        problems += [f"replay[{index}] ({example.response_type}): {p}"
                     for p in example_problems(example, tokenizer)]
    played = validation_episodes(trainer, episodes, difficulty)
    for number, episode in enumerate(played):
        problems += [f"episode {number} (seed {episode.env_seed}): {p}"
                     for p in episode_problems(episode, tokenizer)]
    per_episode = phone_call_examples(played, tokenizer, trainer.config.wm_max_context_tokens)
    fresh = [example for row in per_episode for example in row]
    for index, example in enumerate(fresh):
        problems += [f"episode call {index} ({example.response_type}): {p}"
                     for p in example_problems(example, tokenizer)]
    figures = {"checkpoint": str(find_checkpoint(path)), "step": trainer.step, "replay_examples": len(stored),
               "replay_types": dict(sorted(Counter(e.response_type for e in stored).items())),
               "episodes": len(played), "turns": sum(len(e.turns) for e in played), "episode_calls": len(fresh),
               "problems": problems}
    table = Table(title=f"trajectories of {figures['checkpoint']} (step {trainer.step})")
    table.add_column("checked")
    table.add_column("count", justify="right")
    table.add_row("replay-buffer phone calls", str(len(stored)))
    for response_type, count in figures["replay_types"].items():
        table.add_row(f"  {response_type}", str(count))
    table.add_row("greedy episodes / turns", f"{len(played)} / {figures['turns']}")
    table.add_row("their phone calls", str(len(fresh)))
    return Result(figures, [table, _problems_table(problems)], exit_code=1 if problems else 0)


# ---------------------------------------------------------------- command line
def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", metavar="PATH", help="also write the figures to this JSON file")
    rebuild = argparse.ArgumentParser(add_help=False)
    rebuild.add_argument("--warm-start", metavar="DIR",
                         help="the warm-start folder the run started from (default: its preset's, cached)")
    rebuild.add_argument("--warm-starts", metavar="DIR", default="runs/warm_starts",
                         help="where the preset warm starts are cached (default: runs/warm_starts)")
    rebuild.add_argument("--preset", metavar="NAME",
                         help="the run's preset among its env's (default: the one the env registered for the "
                              "run's model)")
    episodes = argparse.ArgumentParser(add_help=False)
    episodes.add_argument("--episodes", type=int, default=4, help="greedy validation episodes (default: 4)")
    episodes.add_argument("--difficulty", type=int, default=None,
                          help="validation difficulty (default: the run's)")
    parser = argparse.ArgumentParser(prog="python -m worldgym.agents.dual_lora.debug", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("analyze-responses", parents=[common], help=analyze_responses.__doc__.split("\n")[0])
    p.add_argument("run_dir")
    p = sub.add_parser("inspect-predictions", parents=[common, rebuild, episodes],
                       help="the world model's greedy predictions of the CSR replies in validation episodes")
    p.add_argument("checkpoint", help="a checkpoint folder or a run directory (its newest checkpoint)")
    p.add_argument("--max-new-tokens", type=int, default=80, help="tokens per predicted reply (default: 80)")
    p = sub.add_parser("compare-losses", parents=[common], help="L_policy, L_wm, λ and their ratio, per run")
    p.add_argument("run_dirs", nargs="+")
    p.add_argument("--band", type=float, nargs=2, metavar=("LOW", "HIGH"),
                   help="the L_wm/|L_policy| band (default: each run's loss_ratio_band)")
    p = sub.add_parser("check-gradients", parents=[common, rebuild],
                       help="per-adapter gradients of one training minibatch (exit 1 if one is missing)")
    p.add_argument("checkpoint", help="a checkpoint folder or a run directory (its newest checkpoint)")
    p.add_argument("--prompts", type=int, default=2, help="tasks sampled (default: 2)")
    p.add_argument("--group-size", type=int, default=2, help="samples per task (default: 2)")
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("validate-trajectories", parents=[common, rebuild, episodes],
                       help="replay-buffer examples and episode spans/masks are well-formed (exit 1 if not)")
    p.add_argument("checkpoint", help="a checkpoint folder or a run directory (its newest checkpoint)")
    return parser


def _run(args: argparse.Namespace) -> Result:
    if args.command == "analyze-responses":
        return analyze_responses(args.run_dir)
    if args.command == "compare-losses":
        return compare_losses(args.run_dirs, tuple(args.band) if args.band else None)
    base = Base(warm_start=args.warm_start, warm_starts=args.warm_starts, preset=args.preset)
    if args.command == "inspect-predictions":
        return inspect_predictions(args.checkpoint, base, args.episodes, args.difficulty, args.max_new_tokens)
    if args.command == "check-gradients":
        return check_gradients(args.checkpoint, base, args.prompts, args.group_size, args.seed)
    return validate_trajectories(args.checkpoint, base, args.episodes, args.difficulty)


def main(argv: Sequence[str] | None = None, console: Console | None = None) -> int:
    """Run a subcommand; returns the exit status (2: a wrong path, argument or checkpoint, printed)."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        result = _run(args)
    except (UserError, CheckpointError, ConfigError) as error:
        (console or Console(stderr=True)).print(f"[red]error:[/red] {error}", highlight=False, markup=True,
                                                soft_wrap=True)
        return 2
    console = console or Console()
    for table in result.tables:
        console.print(table)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result.figures, indent=1) + "\n")
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
