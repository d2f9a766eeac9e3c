"""``CartridgeDistillConfig``: every setting of the on-policy cartridge distiller, validated on construction."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from worldgym.agents.cartridge.losses import KLKind
from worldgym.agents.llm.models import TINY_SIZES
from worldgym.config import check_choice, check_device, check_field, check_positive_int, check_range
from worldgym.precision import Precision, check_precision
from worldgym.tracking import check_report_to
from worldgym.transcripts import LogEpisodes, check_log_episodes

__all__ = ["CartridgeDistillConfig", "DistillMode"]

DistillMode = Literal["on_policy", "offline", "hybrid"]


@dataclass
class CartridgeDistillConfig:
    """The distiller's settings: one cartridge for one patient's documents, trained so that the frozen model with
    the cartridge and without the documents (the student) predicts what it predicts with the documents in context
    (the teacher).

    Attributes:
        model: "tiny" (a Qwen3 built from config with a tokenizer trained on the panel, then the documented
            teacher warm-up) or a pretrained model for load_chat_model ("smollm2-135m", a local path, a hub name).
        env_id: the question env (a LongHealth-style env with documents="none" / "full" views).
        env_kwargs: its keyword arguments (the panel or data_path, task); split, split_by, documents and
            patient_ids are set by the distiller.
        patient_id: the patient whose documents the cartridge stands in for (None: the first patient of the
            panel's patient-level test split, never seen by the teacher warm-up).
        num_tokens: cartridge length p (virtual tokens per layer).
        num_frozen_tokens: leading cartridge tokens kept frozen (the attention sink).
        init: "text": the real KV of the first num_tokens tokens of the patient's documents (the cartridges
            paper's best init); "random".
        learning_rate: Adam learning rate of the cartridge.
        mode: "on_policy": the student samples, the teacher scores its tokens; "offline": the teacher samples
            once per question (documents in context) and the student learns the teacher's text; "hybrid":
            offline for offline_steps steps, then on-policy.
        offline_steps: the offline warm start of "hybrid".
        kl: "full" forward KL(teacher ‖ student) over the vocabulary, "topk" over the teacher's top_k tokens,
            "sampled_reverse" reverse KL on the sampled tokens.
        top_k: tokens of the "topk" estimator.
        num_steps: optimizer steps.
        questions_per_step: training questions per step.
        samples_per_question: sampled answers per question.
        max_new_tokens: tokens per answer.
        max_prompt_tokens: the longest teacher prompt (the documents, the question and the chat template) plus
            answer; a patient whose documents do not fit is refused at construction, naming the token count (a
            real LongHealth patient's 5-7k words may exceed 8,192 tokens: raise it, up to the model's context,
            for a model whose context holds them).
        temperature: sampling temperature of the answers that are distilled on.
        eval_every: steps between evaluations (0 = only at the start and the end).
        teacher_warmup: teach the model the task before distilling (SFT on the training patients' questions with
            their documents: a tiny model in full, a pretrained one through a LoRA adapter merged into it
            afterwards; cached). None: a tiny model is warmed up (it cannot answer otherwise), a pretrained one is
            used as it is. SmolLM2-135M-Instruct answers 0 of 8 held-out questions with the documents as it is
            (it echoes the first option): its accuracy figures need the warm-up.
        warmup_episodes: the teacher warm-up's SFT questions (with documents) of the training patients.
        warmup_epochs: the warm-up's passes over them.
        warmup_env_kwargs: the panel whose training patients the warm-up's questions come from (empty:
            env_kwargs). Another panel gives the teacher more patients to learn reading from, e.g.
            ``{"num_patients": 60, "panel_seed": 1, "task": 1}`` (on the command line: ``--distill.warmup-env-kwargs
            num_patients 60 panel_seed 1``); one whose training patients include the cartridge's patient's
            documents is refused.
        warmup_batch_size: questions per warm-up step (None: 8 for a tiny model, 1 for a pretrained one). A
            pretrained model's batches above 1 hold questions about one patient, and their documents run once
            per batch (:class:`SFTConfig` ``shared_prefix_tokens``): without that, SmolLM2 on 4 chats of ~2.8k
            tokens took 11.5 GB and was OOM-killed.
        warmup_seed: the warm-up's seed (its own, so runs of several seeds distil with one teacher).
        warm_start_dir: where warm-ups are cached.
        output_dir: run folder (metrics.jsonl, checkpoints, cartridge).
        checkpoint_every: steps between checkpoints (0 = only at the end).
        seed: seeds the cartridge's random init, sampling and question order (not the warm-up: warmup_seed).
        device: "cpu", "cuda" or "cuda:N".
        dtype: compute precision, "float32", "bfloat16" or "auto" (bfloat16 where the device computes it natively;
            :mod:`worldgym.precision`). Under bfloat16 the frozen model's weights are stored in bfloat16 (in place,
            after any teacher warm-up, which trains in float32), the cartridge and its Adam state stay float32
            (cast to the model's dtype when its KV is handed to the model), the teacher's and the student's
            forwards and sampling run under autocast, and the distillation loss is computed in float32. The
            resolved dtype is logged in every metrics row (``dtype``) and stored in checkpoints.
        cpu_mmap_threshold: on the CPU, the trainer asks glibc to map every allocation of at least this many
            bytes on its own (:func:`worldgym.agents.llm.allocator.map_large_allocations`, process-wide; e.g.
            ``DEFAULT_MMAP_THRESHOLD``): freed activations then leave the process instead of piling up in
            malloc's heap, at the cost of fresh pages for every large tensor (``cpu_allocator_memory.py``: a
            SmolLM2 backward held ~9x less memory, and took longer). None (default) leaves malloc as it is.
        log_episodes: which answers go to transcripts (:mod:`worldgym.transcripts`; ``worldgym runs show``):
            "validation" (every evaluation's held-out questions, each with the answers with no documents, with
            the cartridge and with the documents, to ``episodes/step-<n>.jsonl``), "all" (also a few sampled
            training answers per step, to ``episodes/train-step-<n>.jsonl``) or "none".
        report_to: where metrics also go besides ``metrics.jsonl`` (TRL's name): "none", "tensorboard", "wandb",
            "all" or a list of them (:mod:`worldgym.tracking`; needs the ``tracking`` extra); every evaluation
            also logs a table of its questions there.
        progress: show a progress bar.
    """

    model: str = "tiny"
    env_id: str = "LongHealthQA-v0"
    env_kwargs: dict[str, Any] = field(default_factory=lambda: {"num_patients": 10, "task": 1})
    patient_id: str | None = None
    num_tokens: int = 64
    num_frozen_tokens: int = 1
    init: Literal["text", "random"] = "text"
    learning_rate: float = 2e-2
    mode: DistillMode = "on_policy"
    offline_steps: int = 10
    kl: KLKind = "full"
    top_k: int = 32
    num_steps: int = 40
    questions_per_step: int = 4
    samples_per_question: int = 2
    max_new_tokens: int = 16
    max_prompt_tokens: int = 8192
    temperature: float = 1.0
    eval_every: int = 10
    teacher_warmup: bool | None = None
    warmup_episodes: int = 480
    warmup_epochs: int = 3
    warmup_seed: int = 0
    warmup_env_kwargs: dict[str, int | str] = field(default_factory=dict)
    warmup_batch_size: int | None = None
    warm_start_dir: str = "runs/warm_starts"
    output_dir: str = "runs/cartridge"
    checkpoint_every: int = 0
    seed: int = 0
    device: str = "cpu"
    dtype: Precision = "float32"
    cpu_mmap_threshold: int | None = None
    log_episodes: LogEpisodes = "validation"
    report_to: str | list[str] = "none"
    progress: bool = True

    def __post_init__(self) -> None:
        for name in ("num_tokens", "num_steps", "questions_per_step", "samples_per_question", "max_new_tokens",
                     "top_k", "warmup_episodes", "warmup_epochs", "max_prompt_tokens"):
            check_positive_int(name, getattr(self, name))
        check_range("num_frozen_tokens", self.num_frozen_tokens, 0, self.num_tokens)
        check_choice("init", self.init, ("text", "random"))
        check_choice("mode", self.mode, ("on_policy", "offline", "hybrid"))
        check_choice("kl", self.kl, ("full", "topk", "sampled_reverse"))
        check_range("learning_rate", self.learning_rate, 0, None, low_open=True)
        check_range("temperature", self.temperature, 0, None, low_open=True)
        for name in ("eval_every", "checkpoint_every", "offline_steps"):
            check_range(name, getattr(self, name), 0, None)
        check_report_to(self.report_to)
        check_log_episodes(self.log_episodes)
        check_field(self.mode != "hybrid" or 0 < self.offline_steps < self.num_steps, "offline_steps",
                    self.offline_steps, f"use 1..{self.num_steps - 1} for mode='hybrid' (then on-policy steps)")
        for name in ("env_kwargs", "warmup_env_kwargs"):
            reserved = sorted({"split", "split_by", "documents", "patient_ids"} & set(getattr(self, name)))
            check_field(not reserved, name, getattr(self, name),
                        f"drop {reserved}: the distiller sets them (student and teacher views, splits)")
        if self.warmup_batch_size is not None:
            check_positive_int("warmup_batch_size", self.warmup_batch_size)
        check_device("device", self.device)
        check_precision("dtype", self.dtype)
        if self.cpu_mmap_threshold is not None:
            check_positive_int("cpu_mmap_threshold", self.cpu_mmap_threshold)
        check_field(self.teacher_warmup is not False or self.model not in TINY_SIZES, "teacher_warmup",
                    self.teacher_warmup, f"a tiny model ({self.model!r}) is built from config and needs its warm-up "
                    "(its tokenizer and answers come from it): leave teacher_warmup at None or True")

    @property
    def warms_up_teacher(self) -> bool:
        """Whether the model is taught the task (:attr:`teacher_warmup`, or a tiny model) before distilling."""
        return self.model in TINY_SIZES if self.teacher_warmup is None else self.teacher_warmup

    def to_dict(self) -> dict[str, Any]:
        """The config as JSON-compatible data (stored in checkpoints)."""
        return asdict(self)
