"""Distil one patient's clinical documents into a cartridge (a trainable KV prefix) on LongHealthQA-v0.

    python examples/train_cartridge.py                          # tiny model, synthetic panel: a few min on 2 CPU cores
    python examples/train_cartridge.py tiny --distill.mode offline --distill.num-steps 40
    python examples/train_cartridge.py smollm2                  # SmolLM2-135M-Instruct (`make smollm2`); slow on CPU
    python examples/train_cartridge.py smollm2 --distill.model Qwen/Qwen3-0.6B --distill.device cuda \\
        --data-path benchmark_v5.json --distill.patient-id patient_01          # a real model and LongHealth file
    python examples/train_cartridge.py tiny --help              # every setting, with its help
    python examples/train_cartridge.py --resume runs/train_cartridge       # continue a run

The student is the frozen model with the cartridge and no documents; the teacher is the same model with the
patient's documents in context. Each step the student answers training questions about the patient (on-policy;
``--distill.mode offline`` learns the teacher's own answers instead, ``hybrid`` starts offline), and the cartridge
takes an Adam step on the per-token KL(teacher ‖ student) of those answers. Every ``--distill.eval-every`` steps
the held-out questions of the same patient (never trained on) measure the KL with and without the cartridge and
the greedy accuracy with no documents, with the cartridge and with the documents (the teacher).

``tiny`` builds a 0.8M Qwen3 and teaches it the answer format first (SFT on the training patients' questions with
their documents, cached in ``--distill.warm-start-dir``: made once, reused afterwards); the
cartridge then learns a held-out patient. The warm-up is seeded by ``--distill.seed`` (another seed trains
another teacher). That tiny teacher does not read (about chance accuracy with the documents), so its accuracy
figures mean nothing; the held-out KL is a real measurement. ``smollm2`` as it is does not answer either (with the
documents it echoes the first option: 0 of 8 held-out questions); ``--distill.teacher-warmup True`` (with e.g.
``--distill.warmup-episodes 64 --distill.warmup-epochs 1``) teaches it the task first through a LoRA adapter
merged into it (cached); ``--distill.warmup-env-kwargs num_patients 60 panel_seed 1`` draws the warm-up's
questions from the training patients of another, larger panel. The KV of its ~2.6k tokens of documents is computed once, and the teacher scores only
each question and answer behind it.

``--data-path FILE`` reads a LongHealth JSON file (the benchmark's ``benchmark_v5.json``, 20 patients with
5-7k words each) instead of the synthetic panel; its prompts need a model with a long context (and a GPU).

Writes config.json, metrics.jsonl, checkpoint-last, cartridge/, results.json and curves.png to
``--distill.output-dir``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

import worldgym  # noqa: F401  (registers the env ids)
from worldgym.agents.cartridge import CartridgeDistillConfig, CartridgeDistillTrainer
from worldgym.cli import parse_run, save_run_config
from worldgym.config import check_positive_int


@dataclass
class CartridgeRun:
    """One cartridge distilled for one patient.

    Attributes:
        distill: the distiller's settings.
        data_path: a LongHealth JSON file to read the patients from (set as ``distill.env_kwargs["data_path"]``);
            None: the synthetic panel of ``distill.env_kwargs``.
        threads: torch CPU threads.
    """

    distill: CartridgeDistillConfig
    data_path: str | None = None
    threads: int = 2

    def __post_init__(self) -> None:
        check_positive_int("threads", self.threads)

    def resolved(self) -> CartridgeDistillConfig:
        """``distill`` reading ``data_path`` when one is given."""
        if self.data_path is None:
            return self.distill
        return replace(self.distill, env_kwargs={**self.distill.env_kwargs, "data_path": self.data_path})


def tiny_run(**distill: Any) -> CartridgeRun:
    """The tiny model on a 20-patient synthetic panel (the panel its cached teacher warm-up was trained on)."""
    settings = {"model": "tiny", "env_kwargs": {"num_patients": 20}, "num_steps": 80, "eval_every": 10,
                "checkpoint_every": 10, "output_dir": "runs/train_cartridge", **distill}
    return CartridgeRun(CartridgeDistillConfig(**settings))


PRESETS: dict[str, tuple[str, CartridgeRun]] = {
    "tiny": ("Tiny model (cached teacher warm-up), 20-patient synthetic panel, 80 on-policy steps.", tiny_run()),
    "smollm2": ("SmolLM2-135M-Instruct (`make smollm2`), 20-patient synthetic panel, 40 on-policy steps.",
                CartridgeRun(CartridgeDistillConfig(
                    model="smollm2-135m", env_kwargs={"num_patients": 20}, num_steps=40, eval_every=10,
                    max_new_tokens=24, checkpoint_every=5, output_dir="runs/train_cartridge_smollm2"))),
}


# ---------------------------------------------------------------- figures
def recovery(accuracy: dict[str, float]) -> float | None:
    """(cartridge - none) / (teacher - none): the share of what the documents add that the cartridge recovers;
    None when the teacher is no better than no documents (nothing to recover)."""
    gain = accuracy["teacher"] - accuracy["none"]
    return (accuracy["cartridge"] - accuracy["none"]) / gain if gain > 0 else None


def summarize(history: list[dict[str, Any]]) -> dict[str, Any]:
    """Held-out curves and the first-vs-last figures of a run's evaluation rows."""
    evals = [row for row in history if "eval/kl_cartridge" in row]
    first, last = evals[0], evals[-1]
    accuracy = {name: last[f"eval/accuracy_{name}"] for name in ("none", "cartridge", "teacher")}
    return {
        "steps": [row["step"] for row in evals],
        "kl_cartridge": [row["eval/kl_cartridge"] for row in evals],
        "kl_none": [row["eval/kl_none"] for row in evals],
        "accuracy": {name: [row[f"eval/accuracy_{name}"] for row in evals] for name in accuracy},
        "kl_drop": 1 - last["eval/kl_cartridge"] / first["eval/kl_cartridge"],
        "kl_vs_none": 1 - last["eval/kl_cartridge"] / last["eval/kl_none"],
        "final_accuracy": accuracy,
        "recovery": recovery(accuracy),
        "held_out_questions": int(last["eval/questions"]),
        "memory_ratio": last["eval/memory_ratio"],
        "tokens_per_s_ratio": last["eval/tokens_per_s_cartridge"] / last["eval/tokens_per_s_documents"],
    }


def plot(summary: dict[str, Any], title: str, path: Path) -> None:
    """Held-out KL with and without the cartridge, and held-out accuracies, by step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = summary["steps"]
    fig, (kl_ax, acc_ax) = plt.subplots(1, 2, figsize=(11, 3.8))
    kl_ax.plot(steps, summary["kl_cartridge"], marker="o", label="with the cartridge")
    kl_ax.plot(steps, summary["kl_none"], linestyle="--", label="no documents, no cartridge")
    kl_ax.set(xlabel="step", ylabel="KL(teacher ‖ student) per answer token", title="held-out KL", ylim=(0, None))
    for name, marker in (("none", "v"), ("cartridge", "o"), ("teacher", "^")):
        acc_ax.plot(steps, summary["accuracy"][name], marker=marker, label=name)
    acc_ax.set(xlabel="step", ylabel="greedy accuracy", ylim=(-0.02, 1.02),
               title=f"held-out accuracy ({summary['held_out_questions']} questions)")
    for ax in (kl_ax, acc_ax):
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> dict[str, Any]:
    argv = sys.argv[1:] if argv is None else argv
    parsed = parse_run(PRESETS, argv, description=__doc__)
    run = parsed.run
    config = run.resolved()
    torch.set_num_threads(max(1, min(run.threads, os.cpu_count() or 1)))
    start = time.perf_counter()
    out = Path(config.output_dir)
    save_run_config(out, parsed.preset, run)
    trainer = CartridgeDistillTrainer(config)
    if parsed.resume:
        resumed = trainer.resume_latest()
        print(f"resumed from {resumed} at step {trainer.step}" if resumed else "no checkpoint yet: a fresh run")
    print(f"patient {trainer.patient_id}: {len(trainer.documents):,} characters of documents, "
          f"{trainer.train_questions} training questions; cartridge of {config.num_tokens} tokens ({config.init} init)")
    history = trainer.train()
    trainer.close()
    summary = summarize(history)
    results = {"command": " ".join(["python examples/train_cartridge.py", *argv]), "preset": parsed.preset,
               "config": config.to_dict(), "patient_id": trainer.patient_id, **summary,
               "seconds": time.perf_counter() - start}
    (out / "results.json").write_text(json.dumps(results, indent=1))
    plot(summary, f"cartridge for {trainer.patient_id} ({config.model}, {config.mode}, {config.init} init)",
         out / "curves.png")
    gain = results["recovery"]
    print(f"held-out KL {summary['kl_cartridge'][0]:.4f} -> {summary['kl_cartridge'][-1]:.4f} "
          f"({-100 * summary['kl_drop']:+.1f}%; no documents {summary['kl_none'][-1]:.4f}); accuracy none / "
          f"cartridge / teacher {' / '.join(f'{v:.2f}' for v in summary['final_accuracy'].values())} (recovery "
          f"{'n/a: the teacher is no better than no documents' if gain is None else f'{gain:.2f}'}); "
          f"{summary['memory_ratio']:.1f}x less KV memory than the documents; {results['seconds']:.0f} s; wrote {out}")
    return results


if __name__ == "__main__":
    main()
