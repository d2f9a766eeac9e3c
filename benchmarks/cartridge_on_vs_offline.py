"""Cartridge distillation on LongHealthQA-v0: on-policy vs offline vs hybrid, real-KV (text) vs random init.

Every run distils the documents of one patient (the first held-out patient of a 20-patient synthetic panel:
the tiny teacher's warm-up never saw them) into a 64-token cartridge with the same budget: ``--steps`` Adam steps
of ``--questions-per-step`` training questions x ``--samples-per-question`` answers. ``on_policy``: the student
(cartridge, no documents) samples the answers; ``offline``: the teacher (documents in context) samples them once
per question; ``hybrid``: offline for ``--offline-steps``, then on-policy. Every ``--eval-every`` steps the
patient's held-out questions (never trained on) give the KL(teacher ‖ student) on the teacher's greedy answers,
with the cartridge and with neither documents nor cartridge, and greedy accuracy with no documents, with the
cartridge and with the documents.

    python benchmarks/cartridge_on_vs_offline.py run --mode on_policy --init text --seed 0      # resumable
    python benchmarks/cartridge_on_vs_offline.py run --mode offline --init text --seed 0
    python benchmarks/cartridge_on_vs_offline.py run --model smollm2-135m --mode on_policy --seed 0 --steps 40
    python benchmarks/cartridge_on_vs_offline.py run --model smollm2-135m --teacher-warmup --warmup-episodes 64 \
        --warmup-epochs 1 --mode on_policy --seed 0 --steps 40
    python benchmarks/cartridge_on_vs_offline.py report

The tiny model is a 0.8M Qwen3 taught the answer format by SFT on the training patients' questions with their
documents (:func:`teacher_warm_start_config` at seed 0, shared by every seed's run; cached in
``runs/warm_starts``, ~20 min to train once). It does not read: greedy accuracy with the documents is at chance
(20% / 11% on training / held-out patients, 64 questions each, chance 20%), so its accuracy and recovery figures
mean nothing; its held-out KL is a real measurement. SmolLM2-135M-Instruct (``--model smollm2-135m``, ``make
smollm2``) as it is does not answer either: with the documents it echoes the first option (0 of 8 held-out
questions right), so ``--teacher-warmup`` first teaches it the task through a LoRA adapter (the same SFT, merged
in; ``--warmup-episodes`` / ``--warmup-epochs``; its runs are reported as ``smollm2-135m+warmup``).
``--warmup-patients N`` warms it up on the training patients of another panel of N patients (none of them the
cartridge's; runs reported as ``smollm2-135m+warmup-Np``), and ``--warmup-batch-size`` batches one patient's
questions so their documents are read once per step. The report
counts accuracy and recovery only for a teacher that reads (held-out accuracy with the documents 25 points above
chance and above no documents). The documents' KV (~2.6k tokens with SmolLM2's tokenizer) is computed once per
run; the teacher then scores only each question and answer behind it.

Each run writes ``benchmarks/results/cartridge/<model>-<mode>-<init>-s<seed>.json`` (its run folder, with a
checkpoint every ``--eval-every`` steps, is ``runs/cartridge_on_vs_offline/<same name>``: an interrupted run
continues where it stopped); ``report`` merges the parts into ``benchmarks/results/cartridge_on_vs_offline.json``
and ``.png``: per model and mode/init, the held-out KL drop (first vs last evaluation, and vs no documents),
accuracy none / cartridge / teacher, recovery = (cartridge - none) / (teacher - none) (None when the teacher is no
better than no documents), memory ratio (the documents' KV over the cartridge's) and tokens/s ratio, and the
benchmark's goals (``GOALS``) with their status.

``--dtype`` (``run`` and ``teacher``; float32 by default, ``--dtype float32 bfloat16`` runs the stage once per
precision) sets :attr:`CartridgeDistillConfig.dtype`; a run in another precision than float32 is reported as its own
model, ``<model>-<dtype>`` (e.g. ``tiny-bfloat16``), distilled from the same (float32) teacher warm-up.

``--quick`` (every stage): a 5-patient panel, an 8-chat one-epoch warm-up, 2 steps of 1 x 1 answers of 4 tokens,
an 8-token cartridge, run folders and warm-up under ``<results-dir>/runs/``; the figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

import worldgym  # noqa: F401  (registers the ids)
from worldgym.agents.cartridge import CartridgeDistillConfig, CartridgeDistillTrainer
from worldgym.agents.cartridge.trainer import teacher_warm_start_config
from worldgym.agents.cartridge.views import QuestionBySeed, split_patients
from worldgym.agents.llm.envs import make_text_env
from worldgym.agents.llm.evaluation import evaluate_chat_policy
from worldgym.agents.llm.models import TINY_SIZES
from worldgym.envs.longhealth import ANSWER_FORMATS
from worldgym.precision import dtype_name

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: find the benchmarks package
from benchmarks.common import portable, results_dir, results_parser, set_torch_threads, write_json

MODES = ("on_policy", "offline", "hybrid")
DTYPES = ("float32", "bfloat16")
INITS = ("text", "random")
GOALS = {"kl_drop": 0.5, "recovery": 0.7, "memory_ratio": 10.0}
# what the tiny teacher's probe measured (runs/cartridge_probe): it does not read the documents
TINY_NOTE = ("the tiny teacher does not read: greedy accuracy with the documents 20% / 11% on training / held-out "
             "patients (64 questions each, chance 20%), so accuracy and recovery mean nothing here; the KL is real")
# accuracy and recovery are read only where the teacher reads: its held-out accuracy with the documents beats both
# chance (one of 5 options, task 1) and the accuracy without them by this much (2 of 8 questions)
CHANCE, READING_MARGIN = 0.2, 0.25

# --quick: the panel and warm-up (the budget's flags are set in main)
QUICK: dict[str, Any] = {"env_kwargs": {"num_patients": 5}, "warmup_episodes": 8, "warmup_epochs": 1}
WARMUP_FLAGS = ("episodes", "epochs", "batch_size", "patients")  # --warmup-* flags, config fields but patients
WARMUP_PANEL_SEED = 1  # --warmup-patients draws the warm-up's patients from another panel


def runs_dir(args: argparse.Namespace) -> Path:
    """Run folders and warm-up cache: ``runs/`` (relative to the working directory), or inside the results
    folder with ``--quick``."""
    return results_dir(args) / "runs" if args.quick else Path("runs")


def model_label(args: argparse.Namespace) -> str:
    """The model as the report groups runs: a pretrained model with the teacher warm-up is another teacher."""
    text = "-text" if args.answer_format == "text" else ""  # asked for the option's text, not its letter
    text += "" if args.dtype == "float32" else f"-{args.dtype}"  # another precision: reported on its own
    if not args.teacher_warmup or args.model in TINY_SIZES:
        return args.model + text
    return f"{args.model}+warmup" + (f"-{args.warmup_patients}p" if args.warmup_patients else "") + text


def run_name(args: argparse.Namespace) -> str:
    patient = f"-{args.patient}" if args.patient else ""
    return f"{model_label(args)}-{args.mode}-{args.init}{patient}-s{args.seed}"


def teacher_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The model, the panel and the teacher's warm-up: what the ``teacher`` stage and every run share."""
    settings: dict[str, Any] = {
        "model": args.model, "env_kwargs": {"num_patients": 20, **_answer_format(args)},
        "max_new_tokens": args.max_new_tokens,
        "device": args.device, "dtype": args.dtype, "progress": not args.quick,
        "warm_start_dir": str(runs_dir(args) / "warm_starts"),
        "teacher_warmup": True if args.teacher_warmup else None}
    settings |= {f"warmup_{key}": getattr(args, f"warmup_{key}") for key in WARMUP_FLAGS
                 if getattr(args, f"warmup_{key}") is not None and key != "patients"}
    if args.warmup_patients:  # another panel (panel_seed 1): none of its patients is the cartridge's
        settings["warmup_env_kwargs"] = {"num_patients": args.warmup_patients, "panel_seed": WARMUP_PANEL_SEED}
    return settings | (QUICK if args.quick else {})


def distill_config(args: argparse.Namespace) -> CartridgeDistillConfig:
    """The run's settings: the same budget for every mode and init."""
    settings: dict[str, Any] = {
        "num_tokens": args.num_tokens, "init": args.init, "learning_rate": args.learning_rate, "mode": args.mode,
        "offline_steps": args.offline_steps, "num_steps": args.steps, "questions_per_step": args.questions_per_step,
        "samples_per_question": args.samples_per_question, "eval_every": args.eval_every,
        "checkpoint_every": args.eval_every, "seed": args.seed,
        "output_dir": str(runs_dir(args) / "cartridge_on_vs_offline" / run_name(args))}
    return CartridgeDistillConfig(**teacher_settings(args), **settings)


def make_trainer(config: CartridgeDistillConfig, patient: str | None) -> CartridgeDistillTrainer:
    """A trainer on the first held-out patient (or ``patient``); a warmed-up teacher is trained with its own seed
    (``warmup_seed``), so every seed's run distils from the same teacher."""
    patient = patient or split_patients(config.env_id, config.env_kwargs, "test")[0]
    return CartridgeDistillTrainer(replace(config, patient_id=patient))


def run(args: argparse.Namespace) -> None:
    config = distill_config(args)
    trainer = make_trainer(config, args.patient)
    resumed = trainer.resume_latest()
    if resumed is not None:
        print(f"resumed from {portable(resumed)} at step {trainer.step}")
    history = trainer.train()
    evals = [row for row in history if "eval/kl_cartridge" in row]
    steps = [row for row in history if "time/step_s" in row]
    name = run_name(args)
    part = {
        "model": model_label(args), "mode": args.mode, "init": args.init, "seed": args.seed,
        "patient_id": trainer.patient_id, "quick": args.quick, "dtype": dtype_name(trainer.dtype),
        "config": trainer.config.to_dict() | {"output_dir": portable(trainer.config.output_dir),
                                              "warm_start_dir": portable(trainer.config.warm_start_dir)},
        "evals": [{"step": row["step"], **{k.removeprefix("eval/"): v for k, v in row.items() if k.startswith("eval/")}}
                  for row in evals],
        "train_kl": [[row["step"], row["kl/full"]] for row in steps],
        "step_seconds": [row["time/step_s"] for row in steps],
        "command": f"python benchmarks/cartridge_on_vs_offline.py run --model {args.model} --mode {args.mode} "
                   f"--init {args.init} --seed {args.seed} --steps {args.steps} --questions-per-step "
                   f"{args.questions_per_step} --samples-per-question {args.samples_per_question} --eval-every "
                   f"{args.eval_every} --offline-steps {args.offline_steps} --max-new-tokens {args.max_new_tokens} "
                   f"--num-tokens {args.num_tokens} --learning-rate {args.learning_rate:g}"
                   + (f" --patient {args.patient}" if args.patient else "") + _warmup_flags(args)
                   + (" --quick" if args.quick else ""),
    }
    write_json(parts_dir(args) / f"{name}.json", part)
    first, last = evals[0], evals[-1]
    print(f"{name}: held-out KL {first['eval/kl_cartridge']:.4f} -> {last['eval/kl_cartridge']:.4f} (no documents "
          f"{last['eval/kl_none']:.4f}); accuracy none / cartridge / teacher {last['eval/accuracy_none']:.2f} / "
          f"{last['eval/accuracy_cartridge']:.2f} / {last['eval/accuracy_teacher']:.2f}")


def teacher(args: argparse.Namespace) -> None:
    """Whether a run's teacher reads, on more questions than a run's 8 held-out ones: greedy accuracy on the first
    ``--questions`` questions of the panel's test patients (no warm-up trains on them) with and without the
    documents, and with them on the questions the warm-up trained on (its panel's training patients)."""
    config = CartridgeDistillConfig(**teacher_settings(args),
                                    output_dir=str(runs_dir(args) / "cartridge_teacher" / model_label(args)))
    trainer = make_trainer(config, args.patient)  # warms the teacher up (cached) as a run would
    warmup_panel = teacher_warm_start_config(config).env_kwargs
    views = {"held_out_documents": (config.env_kwargs, "test", "full"),
             "held_out_none": (config.env_kwargs, "test", "none"),
             "train_documents": (warmup_panel, "train", "full")}
    accuracy, questions = {}, {}
    start = time.perf_counter()
    for name, (panel, split, documents) in views.items():
        kwargs = {**panel, "split": split, "split_by": "patient", "documents": documents}
        env = make_text_env(config.env_id, kwargs)
        questions[name] = min(args.questions, env.unwrapped.num_questions)
        env.close()
        metrics, _ = evaluate_chat_policy(trainer.plain_engine, trainer.tokenizer,
                                          lambda kwargs=kwargs: QuestionBySeed(make_text_env(config.env_id, kwargs)),
                                          questions[name], 1, config.max_new_tokens, first_seed=0,
                                          max_episode_tokens=config.max_prompt_tokens)
        accuracy[name] = metrics["eval/success_rate"]
        print(f"{model_label(args)} {name}: {accuracy[name]:.3f} ({questions[name]} questions)")
    part = {"model": model_label(args), "accuracy": accuracy, "questions": questions, "chance": CHANCE,
            "seconds": time.perf_counter() - start, "quick": args.quick, "warmup": warmup_summary(config),
            "command": f"python benchmarks/cartridge_on_vs_offline.py teacher --model {args.model} --questions "
                       f"{args.questions} --max-new-tokens {args.max_new_tokens}" + _warmup_flags(args)
                       + (" --quick" if args.quick else "")}
    write_json(results_dir(args) / "cartridge_teacher" / f"{model_label(args)}.json", part)


def warmup_summary(config: CartridgeDistillConfig) -> dict[str, Any] | None:
    """What the teacher's warm-up recorded (chats, tokens, seconds, first and last loss, every loss), or None
    without one."""
    if not config.warms_up_teacher:
        return None
    warm = teacher_warm_start_config(config)
    record = json.loads((Path(config.warm_start_dir) / warm.key() / "warm_start.json").read_text())
    return {"key": warm.key(), **record["summary"]}


def _answer_format(args: argparse.Namespace) -> dict[str, str]:
    """The env's ``answer_format`` when it is not the default (so the letter runs keep their settings and keys)."""
    return {"answer_format": args.answer_format} if args.answer_format != "letter" else {}


def _warmup_flags(args: argparse.Namespace) -> str:
    """The teacher's flags as written: its warm-up, the answer format and a precision other than float32."""
    flags = " --teacher-warmup" if args.teacher_warmup else ""
    flags += "" if args.dtype == "float32" else f" --dtype {args.dtype}"
    flags += "".join(f" --answer-format {value}" for value in _answer_format(args).values())
    return flags + "".join(f" --warmup-{key.replace('_', '-')} {getattr(args, f'warmup_{key}')}"
                           for key in WARMUP_FLAGS if getattr(args, f"warmup_{key}") is not None)


def parts_dir(args: argparse.Namespace) -> Path:
    return results_dir(args) / "cartridge"


# ---------------------------------------------------------------- report
def recovery(none: float, cartridge: float, teacher: float) -> float | None:
    """(cartridge - none) / (teacher - none); None when the teacher is no better than no documents."""
    return (cartridge - none) / (teacher - none) if teacher > none else None


def _mean(values: list[float]) -> float:
    return float(np.mean(values))


def summarize(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One mode/init's runs (one per seed): first-vs-last held-out figures per seed and their means."""
    parts = sorted(parts, key=lambda p: p["seed"])
    first = [p["evals"][0] for p in parts]
    last = [p["evals"][-1] for p in parts]
    accuracy = {name: [row[f"accuracy_{name}"] for row in last] for name in ("none", "cartridge", "teacher")}
    means = {name: _mean(values) for name, values in accuracy.items()}
    return {
        "seeds": [p["seed"] for p in parts],
        "steps": parts[0]["config"]["num_steps"],
        "kl_first": [row["kl_cartridge"] for row in first],
        "kl_last": [row["kl_cartridge"] for row in last],
        "kl_none": [row["kl_none"] for row in last],
        "kl_drop": [1 - b["kl_cartridge"] / a["kl_cartridge"] for a, b in zip(first, last, strict=True)],
        "kl_drop_mean": _mean([1 - b["kl_cartridge"] / a["kl_cartridge"] for a, b in zip(first, last, strict=True)]),
        "kl_vs_none": [1 - row["kl_cartridge"] / row["kl_none"] for row in last],
        "kl_vs_none_mean": _mean([1 - row["kl_cartridge"] / row["kl_none"] for row in last]),
        "accuracy": accuracy,
        "accuracy_mean": means,
        "recovery": [recovery(*(accuracy[n][i] for n in ("none", "cartridge", "teacher"))) for i in range(len(parts))],
        "recovery_of_means": recovery(means["none"], means["cartridge"], means["teacher"]),
        "held_out_questions": int(last[0]["questions"]),
        "memory_ratio": _mean([row["memory_ratio"] for row in last]),
        "cartridge_bytes": last[0]["cartridge_bytes"],
        "documents_kv_bytes": last[0]["documents_kv_bytes"],
        "tokens_per_s_ratio": _mean([row["tokens_per_s_cartridge"] / row["tokens_per_s_documents"] for row in last]),
        "seconds_per_step": _mean([s for p in parts for s in p["step_seconds"]]),
        "kl_drop_mean_by_step": _drop_by_step(parts),
        "kl_curves": [[[row["step"], row["kl_cartridge"]] for row in p["evals"]] for p in parts],
        "kl_none_curves": [[[row["step"], row["kl_none"]] for row in p["evals"]] for p in parts],
        "commands": [p["command"] for p in parts],
    }


def _drop_by_step(parts: list[dict[str, Any]]) -> list[list[float]]:
    """[step, mean over seeds of 1 - KL(step) / KL(0)] at every evaluation step all runs share."""
    steps = sorted(set.intersection(*({row["step"] for row in p["evals"]} for p in parts)))
    drops = [[1 - row["kl_cartridge"] / p["evals"][0]["kl_cartridge"] for row in p["evals"] if row["step"] in steps]
             for p in parts]
    return [[step, _mean([d[i] for d in drops])] for i, step in enumerate(steps)]


def reads_documents(rows: Any, model: str, measured: dict[str, Any] | None = None) -> tuple[bool, str | None]:
    """Whether a model's teacher reads (held-out accuracy with the documents >= ``READING_MARGIN`` above both
    chance and the accuracy without them) and, when it does not, the note that says so. Judged on the ``teacher``
    stage's figures (``measured``: more questions) when there are some, else on the mean of every run's last
    evaluation."""
    rows = list(rows)
    if measured is not None:
        teacher, none = measured["accuracy"]["held_out_documents"], measured["accuracy"]["held_out_none"]
        questions = measured["questions"]["held_out_documents"]
    else:
        teacher = _mean([a for row in rows for a in row["accuracy"]["teacher"]])
        none = _mean([a for row in rows for a in row["accuracy"]["none"]])
        questions = rows[0]["held_out_questions"]
    if teacher >= max(none, CHANCE) + READING_MARGIN:
        return True, None
    if model in TINY_SIZES:
        return False, TINY_NOTE
    return False, (f"the teacher does not read: greedy held-out accuracy {teacher:.0%} with the documents vs {none:.0%} "
                   f"without ({questions} questions, chance 20%), so accuracy and recovery mean nothing here; the KL "
                   "is real")


def goals(rows: dict[str, dict[str, Any]], accuracy_meaningful: bool) -> dict[str, Any]:
    """The benchmark's goals (``GOALS``), read from the on-policy text-init runs (and offline's for the last)."""
    main = rows.get("on_policy/text")
    if main is None:
        return {"status": "no on_policy/text runs"}
    offline = rows.get("offline/text")
    unmeasurable = None if accuracy_meaningful else "not measurable: the teacher does not read"

    def verdict(met: bool) -> str:
        return "met" if met else "NOT met"

    accuracy_gap = (main["accuracy_mean"]["cartridge"] - offline["accuracy_mean"]["cartridge"]
                    if offline is not None else None)
    result = {
        "kl_drop>=50%": {"value": main["kl_drop_mean"], "status": verdict(main["kl_drop_mean"] >= GOALS["kl_drop"])},
        "memory_ratio>=10": {"value": main["memory_ratio"],
                             "status": verdict(main["memory_ratio"] >= GOALS["memory_ratio"])},
        "recovery>=70%": {"value": main["recovery_of_means"], "status": unmeasurable or (
            "not measurable: the teacher is no better than no documents" if main["recovery_of_means"] is None
            else verdict(main["recovery_of_means"] >= GOALS["recovery"]))},
        "on_policy_ahead_of_offline_on_accuracy": {
            "value": accuracy_gap, "status": unmeasurable or ("no offline/text runs" if accuracy_gap is None
                                                              else verdict(accuracy_gap > 0))},
    }
    if offline is not None:
        result["on_policy_vs_offline_kl_last"] = {"on_policy": _mean(main["kl_last"]),
                                                  "offline": _mean(offline["kl_last"])}
    return result


def report(args: argparse.Namespace) -> None:
    parts = [json.loads(p.read_text()) for p in sorted(parts_dir(args).glob("*.json"))]
    teachers = {part["model"]: part for part in map(json.loads, map(Path.read_text, sorted(
        (results_dir(args) / "cartridge_teacher").glob("*.json"))))}
    summary: dict[str, Any] = {"quick": args.quick, "goals": GOALS, "teachers": teachers, "models": {}}
    for model in sorted({p["model"] for p in parts}):
        chosen = [p for p in parts if p["model"] == model]
        rows = {f"{mode}/{init}": summarize([p for p in chosen if (p["mode"], p["init"]) == (mode, init)])
                for mode in MODES for init in INITS if any((p["mode"], p["init"]) == (mode, init) for p in chosen)}
        meaningful, note = reads_documents(rows.values(), model, teachers.get(model))
        summary["models"][model] = {
            "patients": sorted({p["patient_id"] for p in chosen}),
            "budget": {key: chosen[0]["config"][key] for key in ("num_steps", "questions_per_step",
                                                                 "samples_per_question", "max_new_tokens",
                                                                 "num_tokens", "learning_rate", "offline_steps")},
            "same_budget": len({(p["config"]["num_steps"], p["config"]["questions_per_step"],
                                 p["config"]["samples_per_question"]) for p in chosen}) == 1,
            "accuracy_meaningful": meaningful,
            "note": note,
            "runs": rows,
            "goal_status": goals(rows, meaningful),
        }
    write_json(results_dir(args) / "cartridge_on_vs_offline.json", summary)
    _plot(summary, results_dir(args) / "cartridge_on_vs_offline.png")
    for model, part in teachers.items():
        print(f"teacher {model}: greedy accuracy {part['accuracy']} on {part['questions']} questions")
    for model, entry in summary["models"].items():
        for key, row in entry["runs"].items():
            print(f"{model} {key:17s} KL drop {100 * row['kl_drop_mean']:.1f}% (vs no documents "
                  f"{100 * row['kl_vs_none_mean']:.1f}%), accuracy none/cartridge/teacher "
                  f"{' / '.join(f'{v:.2f}' for v in row['accuracy_mean'].values())}, recovery "
                  f"{row['recovery_of_means']}, memory x{row['memory_ratio']:.1f}, seeds {row['seeds']}")
        print(model, "goals:", {k: v["status"] for k, v in entry["goal_status"].items() if "status" in v})


def _plot(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(summary["models"])
    fig, axes = plt.subplots(max(1, len(models)), 2, figsize=(12, 4 * max(1, len(models))), squeeze=False)
    for (kl_ax, acc_ax), model in zip(axes, models):
        entry = summary["models"][model]
        for key, row in entry["runs"].items():
            length = min(len(c) for c in row["kl_curves"])
            steps = [step for step, _ in row["kl_curves"][0][:length]]
            values = np.array([[v for _, v in c[:length]] for c in row["kl_curves"]])
            (line,) = kl_ax.plot(steps, values.mean(0), marker="o", label=f"{key} ({len(row['seeds'])} seeds)")
            kl_ax.fill_between(steps, values.min(0), values.max(0), color=line.get_color(), alpha=0.15)
        none = [v for row in entry["runs"].values() for c in row["kl_none_curves"] for _, v in c]
        kl_ax.axhline(float(np.mean(none)), color="grey", linestyle="--", label="no documents, no cartridge")
        top = max([*none, *(v for row in entry["runs"].values() for c in row["kl_curves"] for _, v in c)])
        kl_ax.set(xlabel="step", ylabel="held-out KL(teacher ‖ student) per token", ylim=(0, 1.08 * top),
                  title=f"{model}: held-out KL (mean, min-max over seeds)")
        kl_ax.legend(fontsize=7)
        keys = list(entry["runs"])
        width = 0.27
        for i, name in enumerate(("none", "cartridge", "teacher")):
            acc_ax.bar(np.arange(len(keys)) + (i - 1) * width, [entry["runs"][k]["accuracy_mean"][name] for k in keys],
                       width, label=name)
        acc_ax.set_xticks(np.arange(len(keys)), keys, fontsize=7)
        acc_ax.set(ylabel="final held-out greedy accuracy (mean)", ylim=(0, 1),
                   title=f"{model}: accuracy" + ("" if entry["accuracy_meaningful"] else " (meaningless: see note)"))
        acc_ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="stage", required=True)
    common = [results_parser()]
    model = argparse.ArgumentParser(add_help=False)  # the model, its teacher and the patient
    model.add_argument("--model", default="tiny", help="tiny, smollm2-135m, or another load_chat_model name")
    model.add_argument("--patient", default=None, help="patient id (default: the panel's first held-out patient)")
    model.add_argument("--max-new-tokens", type=int, default=16)
    model.add_argument("--answer-format", choices=ANSWER_FORMATS, default="letter",
                       help="ask for the option's letter or its text copied out (LongHealthQA-v0 answer_format; "
                            "text answers need --max-new-tokens ~40)")
    model.add_argument("--device", default="cpu")
    model.add_argument("--dtype", nargs="+", choices=DTYPES, default=["float32"],
                       help="the distiller's precision; several: the stage once per dtype (default float32)")
    model.add_argument("--teacher-warmup", action="store_true",
                       help="teach a pretrained model the task first (LoRA SFT with documents, cached; a tiny model "
                            "always gets it): SmolLM2-135M does not answer without it")
    model.add_argument("--warmup-episodes", type=int, help="teacher warm-up SFT questions (default: the config's)")
    model.add_argument("--warmup-epochs", type=int, help="teacher warm-up passes (default: the config's)")
    model.add_argument("--warmup-batch-size", type=int,
                       help="teacher warm-up questions per step (default: the config's; a pretrained model's "
                            "batches hold one patient's questions and read the documents once)")
    model.add_argument("--warmup-patients", type=int,
                       help="warm the teacher up on the training patients of another panel of this many patients "
                            f"(panel_seed {WARMUP_PANEL_SEED}; default: the distillation panel's training patients)")
    one = sub.add_parser("run", help="distil one cartridge (resumable); writes its part JSON",
                         parents=[*common, model])
    one.add_argument("--mode", choices=MODES, required=True)
    one.add_argument("--init", choices=INITS, default="text")
    one.add_argument("--seed", type=int, default=0)
    one.add_argument("--steps", type=int, default=80)
    one.add_argument("--questions-per-step", type=int, default=4)
    one.add_argument("--samples-per-question", type=int, default=2)
    one.add_argument("--eval-every", type=int, default=10)
    one.add_argument("--offline-steps", type=int, default=20, help="hybrid: offline steps before going on-policy")
    one.add_argument("--num-tokens", type=int, default=64, help="cartridge length")
    one.add_argument("--learning-rate", type=float, default=2e-2)
    reads = sub.add_parser("teacher", help="the teacher's greedy accuracy with and without the documents",
                           parents=[*common, model])
    reads.add_argument("--questions", type=int, default=64, help="questions per view (at most all of them)")
    sub.add_parser("report", help="merge the part JSONs into the results JSON and PNG", parents=common)
    args = parser.parse_args(argv)
    if args.stage == "run" and args.quick:
        args.steps, args.eval_every, args.offline_steps, args.num_tokens = 2, 1, 1, 8
        args.questions_per_step, args.samples_per_question, args.max_new_tokens = 1, 1, 4
    if args.stage == "teacher" and args.quick:
        args.questions, args.max_new_tokens = 2, 4
    set_torch_threads(1)
    stage = {"run": run, "teacher": teacher, "report": report}[args.stage]
    if args.stage == "report":
        stage(args)
        return
    for dtype in dict.fromkeys(args.dtype):
        stage(argparse.Namespace(**{**vars(args), "dtype": dtype}))


if __name__ == "__main__":
    main()
