"""``CartridgeDistillTrainer``: on-policy distillation of a patient's documents into a cartridge.

Each step: (1) the student (the frozen model + the current cartridge, no documents) samples answers to training
questions; (2) the student scores its own tokens, with gradient into the cartridge; (3) the teacher (the same
model, the patient's documents in context) scores the same tokens; (4) the per-token KL(teacher ‖ student),
masked to the answer; (5) an Adam step on the cartridge; (6) the next samples come from the updated cartridge.
``mode="offline"`` distils on answers the teacher sampled once per question instead, ``"hybrid"`` does that for
``offline_steps`` steps and then goes on-policy.
"""

from __future__ import annotations

import os
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from peft import PeftModel
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from worldgym.agents.cartridge.config import CartridgeDistillConfig
from worldgym.agents.cartridge.losses import distillation_loss
from worldgym.agents.cartridge.transcripts import question_record
from worldgym.agents.cartridge.views import (
    make_view,
    num_questions,
    patient_documents,
    split_documents,
    split_patients,
)
from worldgym.agents.llm.allocator import map_large_allocations_on_cpu
from worldgym.agents.llm.cartridge import Cartridge, kv_bytes_per_token
from worldgym.agents.llm.engines import HFEngine
from worldgym.agents.llm.engines.base import SamplingParams
from worldgym.agents.llm.models import TINY_SIZES
from worldgym.agents.llm.pretrained import load_chat_model
from worldgym.agents.llm.rollout import (
    Episode,
    RolloutCollector,
    collate_episodes,
    encode_chat,
    reset_messages,
)
from worldgym.agents.llm.scoring import score_tokens
from worldgym.agents.llm.transcripts import episode_record
from worldgym.agents.llm.warm_start import WarmStartConfig, load_or_train_warm_start
from worldgym.checkpointing import LAST_CHECKPOINT, load_checkpoint, load_latest, save_checkpoint
from worldgym.errors import CartridgeError, CheckpointError
from worldgym.jsonl import append_jsonl, read_jsonl, truncate_jsonl
from worldgym.precision import autocast, cast_for_training, dtype_name, resolve_dtype
from worldgym.tracking import Tracker, make_tracker
from worldgym.transcripts import TRAIN_EPISODES_PER_STEP, write_transcript

__all__ = ["CartridgeDistillTrainer", "teacher_warm_start_config"]

# teacher prompts that open with this many identical tokens are about one patient (the chat template's opening
# is shorter; the documents begin with the patient's name and dates)
DOCUMENTS_OPENING_TOKENS = 256


def teacher_warm_start_config(config: CartridgeDistillConfig) -> WarmStartConfig:
    """The documented teacher warm-up (a tiny model cannot answer until taught, nor can SmolLM2-135M): SFT on the
    panel's training patients' questions with their documents in context, answering ``<answer>X</answer>`` (or
    the option's text, as ``env_kwargs["answer_format"]`` asks; cached by these settings); a tiny model in
    full (lr 3e-3, batches of 8), a pretrained one through a LoRA
    adapter (lr 3e-4, one chat per step: SmolLM2 on batches of 4 chats of ~2.8k tokens took 11.5 GB, more than
    a small machine has to spare). The cartridge's patient is then one of the held-out patients, whose answers it
    never saw."""
    tiny = config.model in TINY_SIZES
    batch_size = config.warmup_batch_size or (8 if tiny else 1)
    panel = dict(config.warmup_env_kwargs or config.env_kwargs)
    if "answer_format" in config.env_kwargs:  # the teacher learns to answer as the distillation env asks
        panel["answer_format"] = config.env_kwargs["answer_format"]
    return WarmStartConfig(
        model=config.model, env_id=config.env_id, env_kwargs={**panel, "split_by": "patient"},
        difficulties=(), episodes_per_difficulty=config.warmup_episodes, epochs=config.warmup_epochs,
        batch_size=batch_size, learning_rate=3e-3 if tiny else 3e-4, max_length=config.max_prompt_tokens,
        seed=config.warmup_seed, shared_prefix_tokens=0 if tiny or batch_size == 1 else DOCUMENTS_OPENING_TOKENS)


class CartridgeDistillTrainer:
    """Distils one patient's documents into a cartridge (the agent shape of :mod:`worldgym.agents.base`).

    Args:
        config: the settings.
        model: the frozen model (default: the teacher warm-up of a tiny ``config.model``, or the pretrained
            ``config.model``); its weights are never trained (under ``config.dtype`` bfloat16 they are stored
            in bfloat16, in place).
        tokenizer: its tokenizer (default: the one that comes with the default model).

    The run folder gets ``metrics.jsonl``, ``checkpoint-last`` (cartridge, Adam state, RNG, step), the
    transcripts ``config.log_episodes`` asks for (``episodes/``) and, at the end of :meth:`train`,
    ``cartridge/`` (:meth:`Cartridge.save`).
    """

    def __init__(
        self,
        config: CartridgeDistillConfig,
        model: PreTrainedModel | None = None,
        tokenizer: PreTrainedTokenizerBase | None = None,
    ) -> None:
        self.config = config
        map_large_allocations_on_cpu(config.device, config.cpu_mmap_threshold)
        self.patient_id = config.patient_id or self._default_patient()
        self.dtype = resolve_dtype(config.dtype, config.device)  # what "auto" means on this machine
        self.model, self.tokenizer = self._model_and_tokenizer(model, tokenizer)
        cast_for_training(self.model.requires_grad_(False).eval().to(config.device), self.dtype)
        self.documents = patient_documents(config.env_id, config.env_kwargs, self.patient_id)
        self._check_documents_fit()
        self.cartridge = self._new_cartridge().to(config.device, torch.float32)  # trained: float32 in any dtype
        self.optimizer = torch.optim.Adam(self.cartridge.parameters(), lr=config.learning_rate)
        pad, eos = self.tokenizer.pad_token_id, [self.tokenizer.eos_token_id]
        self.student_engine = HFEngine(self.model, pad, eos, cartridge=self.cartridge)
        self.plain_engine = HFEngine(self.model, pad, eos)  # the teacher (documents in the prompt), and "none"
        self.train_questions = num_questions(config.env_id, config.env_kwargs, self.patient_id, "train")
        self._student = self._collector(self.student_engine, "train", "none")
        self._teacher = self._collector(self.plain_engine, "train", "full")
        self._prompts: dict[tuple[int, str], list[int]] = {}  # (training question seed, view) -> prompt ids
        self._offline: dict[int, list[Episode]] = {}
        self._references: dict[str, _Reference] = {}  # split -> the frozen model's held-out figures
        # the newest evaluation's (no documents, cartridge, teacher) answers and training step's, for transcripts
        self._evaluated: tuple[list[Episode], list[Episode], list[Episode]] | None = None
        self._sampled: list[Episode] = []
        self.documents_prefix_ids = self._documents_prefix_ids()
        self.documents_prefix = self._documents_prefix()
        self.rng = np.random.default_rng(config.seed)
        self.step = 0
        self.output_dir = Path(config.output_dir)
        self.history: list[dict[str, Any]] = []
        self.tracker: Tracker | None = None  # config.report_to's backends, opened by train()

    # ---------------------------------------------------------------- setup
    def _model_and_tokenizer(self, model, tokenizer):
        if model is not None:
            if tokenizer is None:
                raise ValueError("CartridgeDistillTrainer got a model but no tokenizer; pass the tokenizer the model "
                                 "was trained with")
            return model, tokenizer
        if self.config.warms_up_teacher:
            self._check_warmup_panel()
            warm = load_or_train_warm_start(teacher_warm_start_config(self.config),
                                            cache_dir=self.config.warm_start_dir, progress=self.config.progress)
            # a pretrained model's adapter is merged in: the frozen teacher and student are one plain model
            model = warm.model.merge_and_unload() if isinstance(warm.model, PeftModel) else warm.model
            return model, warm.tokenizer
        loaded = load_chat_model(self.config.model, dtype=self.dtype)  # stored in the compute dtype from the start
        return loaded.model, loaded.tokenizer

    def _default_patient(self) -> str:
        """The first patient of the panel's patient-level test split: one the teacher warm-up (which trains on the
        train split) never saw, whichever model is used, so runs with and without a warm-up distil the same one."""
        return split_patients(self.config.env_id, self.config.env_kwargs, "test")[0]

    def _check_warmup_panel(self) -> None:
        """Refuse a warm-up panel whose training patients include this patient's documents (the teacher would
        have learnt its answers)."""
        c = self.config
        if not c.warmup_env_kwargs:  # the panel's own training patients: the default patient is a test one
            return
        documents = split_documents(c.env_id, {**c.env_kwargs, "patient_ids": [self.patient_id]}, "all")
        if documents & split_documents(c.env_id, c.warmup_env_kwargs, "train"):
            raise CartridgeError(
                f"warmup_env_kwargs={c.warmup_env_kwargs} trains the teacher on patient {self.patient_id}'s "
                "documents: warm up on another panel (another panel_seed) or distil a patient outside its "
                "training split")

    def _check_documents_fit(self) -> None:
        """Refuse a patient whose documents leave no room for the question and the answer in the teacher's
        prompt limit: the rollout would end before the teacher answers, and every KL would be empty."""
        c = self.config
        needed = len(self.tokenizer(self.documents, add_special_tokens=False)["input_ids"]) + c.max_new_tokens
        if needed > c.max_prompt_tokens:
            raise CartridgeError(
                f"patient {self.patient_id}'s documents are {needed - c.max_new_tokens} tokens with this tokenizer; "
                f"with a {c.max_new_tokens}-token answer (and the question) the teacher's prompt exceeds "
                f"max_prompt_tokens={c.max_prompt_tokens}: use a model with a longer context and raise "
                "max_prompt_tokens, or distil a patient with shorter documents")

    def _documents_prefix_ids(self) -> list[int]:
        """The tokens every training question's teacher prompt opens with (the chat template and the patient's
        documents), leaving each prompt at least one token of its own. The model is frozen and the documents
        fixed, so their KV is computed once (:attr:`documents_prefix`, an all-frozen cartridge) and the teacher
        scores only each question and answer behind it: the same logprobs as a full forward, without re-reading
        thousands of document tokens for every answer."""
        prompts = [self._prompt(seed, "full") for seed in range(self.train_questions)]
        return os.path.commonprefix(prompts)[:max(min(len(p) for p in prompts) - 1, 0)]

    def _new_cartridge(self) -> Cartridge:
        c = self.config
        if c.init == "text":
            with self.autocast():
                return Cartridge.from_text(self.model, self.tokenizer, self.documents, c.num_tokens,
                                           c.num_frozen_tokens)
        return Cartridge.random(self.model, c.num_tokens, c.num_frozen_tokens, seed=c.seed)

    def _documents_prefix(self) -> Cartridge | None:
        """The documents' KV as an all-frozen cartridge (kept in the model's dtype), or None without a prefix."""
        if not self.documents_prefix_ids:
            return None
        with self.autocast():
            prefix = Cartridge.from_token_ids(self.model, self.documents_prefix_ids,
                                              num_frozen=len(self.documents_prefix_ids))
        return prefix.to(self.config.device)

    def autocast(self) -> AbstractContextManager:
        """The forward passes' autocast context for ``config.dtype`` (a no-op in float32)."""
        return autocast(self.dtype, self.config.device)

    def _collector(self, engine: HFEngine, split: str, documents: str) -> RolloutCollector:
        c = self.config
        return RolloutCollector(engine, self.tokenizer,
                                lambda: make_view(c.env_id, c.env_kwargs, self.patient_id, split, documents),
                                max_turns=1, max_episode_tokens=c.max_prompt_tokens)

    # ---------------------------------------------------------------- loop
    def train(self) -> list[dict[str, Any]]:
        """Run until ``config.num_steps`` (continuing a loaded run); returns every logged row (also in
        ``metrics.jsonl``), evaluation rows (``eval/*``) at the start, every ``eval_every`` steps and the end."""
        c = self.config
        self.output_dir.mkdir(parents=True, exist_ok=True)
        if self.tracker is None:
            self.tracker = make_tracker(c.report_to, self.output_dir, c.to_dict(), self.step or None)
        if self.step == 0:
            (self.output_dir / "metrics.jsonl").unlink(missing_ok=True)
            self.history = []
            self._log({"step": 0, **self.evaluate()})
            self._write_transcripts(evaluated=True)
        bar = tqdm(total=c.num_steps, initial=self.step, disable=not c.progress, desc="cartridge")
        while self.step < c.num_steps:
            metrics = self.train_step()
            last = self.step == c.num_steps
            evaluated = last or bool(c.eval_every and self.step % c.eval_every == 0)
            if evaluated:
                metrics.update(self.evaluate())
            self._log(metrics)
            self._write_transcripts(evaluated)
            if last or (c.checkpoint_every and self.step % c.checkpoint_every == 0):
                self.save(self.output_dir / LAST_CHECKPOINT)
            bar.update(1)
            bar.set_postfix(kl=f"{metrics['kl/full']:.3f}")
        bar.close()
        self.cartridge.save(self.output_dir / "cartridge")
        return self.history

    def train_step(self) -> dict[str, Any]:
        """One Adam step on the cartridge from fresh (or, offline, the teacher's cached) answers."""
        c = self.config
        start = time.perf_counter()
        seeds = [int(s) for s in self.rng.integers(0, self.train_questions, c.questions_per_step)]
        offline = c.mode == "offline" or (c.mode == "hybrid" and self.step < c.offline_steps)
        answers = self._teacher_answers(seeds) if offline else self._student_answers(seeds)
        episodes = [_behind(e, self._prompt(e.env_seed, "none")) for e in answers] if offline else answers
        self._sampled = answers[:TRAIN_EPISODES_PER_STEP] if c.log_episodes == "all" else []
        sampled_s = time.perf_counter() - start
        loss, figures = self._distillation_loss(episodes)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.step += 1
        return {"step": self.step, **figures, "rollout/offline": float(offline),
                "rollout/answer_tokens": float(sum(e.num_model_tokens for e in episodes)),
                "time/sample_s": sampled_s, "time/step_s": time.perf_counter() - start}

    def _sampling(self, step_seed: int) -> SamplingParams:
        return SamplingParams(temperature=self.config.temperature, max_new_tokens=self.config.max_new_tokens,
                              seed=step_seed)

    def _student_answers(self, seeds: list[int]) -> list[Episode]:
        params = self._sampling(self.config.seed * 100_003 + self.step)
        return self._student.collect(seeds, self.config.samples_per_question, params)

    def _teacher_answers(self, seeds: list[int]) -> list[Episode]:
        """The teacher's answers, sampled once per question (documents in context) and then reused, as sampled
        (behind the teacher's prompts)."""
        missing = sorted(set(seeds) - set(self._offline))
        if missing:
            params = self._sampling(self.config.seed * 100_003 + 50_000)
            for seed, group in zip(missing, _groups(self._teacher.collect(missing, self.config.samples_per_question,
                                                                           params), self.config.samples_per_question)):
                self._offline[seed] = group
        return [episode for seed in seeds for episode in self._offline[seed]]

    # ---------------------------------------------------------------- loss
    def _distillation_loss(self, episodes: list[Episode]) -> tuple[torch.Tensor, dict[str, float]]:
        c = self.config
        student, answers = self._score(episodes, self.cartridge)
        with torch.no_grad():
            teacher = self._score_teacher([_behind(e, self._prompt(e.env_seed, "full")) for e in episodes])
        return distillation_loss(teacher.logits, student.logits, c.kl, c.top_k, answers)

    def _score_teacher(self, episodes: list[Episode]):
        """Teacher-view episodes scored behind :attr:`documents_prefix` where their prompts open with it (only
        their own tokens are run), else in full."""
        prefix = self.documents_prefix_ids
        if prefix and all(e.token_ids[:len(prefix)] == prefix and e.prompt_length > len(prefix) for e in episodes):
            rows = [_behind(e, e.token_ids[len(prefix):e.prompt_length]) for e in episodes]
            return self._score(rows, self.documents_prefix)[0]
        return self._score(episodes, None)[0]

    def _score(self, episodes: list[Episode], cartridge: Cartridge | None):
        """The episodes' answer tokens scored (right-padded batch), and those tokens in the same row-major order.
        The answers to one question share its prompt's forward pass (``group_ids``)."""
        batch = collate_episodes(episodes, self.tokenizer.pad_token_id)
        device = self.config.device
        ids, mask = batch["input_ids"].to(device), batch["action_mask"].to(device)
        with self.autocast():
            scored = score_tokens(self.model, ids, batch["attention_mask"].to(device), mask,
                                  group_ids=batch["group_ids"].to(device), cartridge=cartridge)
        return scored, ids[:, 1:][mask.bool()]

    def _prompt(self, seed: int, documents: str) -> list[int]:
        """The prompt ids of training question ``seed`` in a view (``"full"`` or ``"none"``), built once."""
        key = (seed, documents)
        if key not in self._prompts:
            env = make_view(self.config.env_id, self.config.env_kwargs, self.patient_id, "train", documents)
            observation, info = env.reset(seed=seed)
            env.close()
            self._prompts[key] = encode_chat(self.tokenizer, reset_messages(observation, info))
        return self._prompts[key]

    # ---------------------------------------------------------------- evaluation
    @torch.no_grad()
    def evaluate(self, env: gym.Env | None = None, split: str = "held_out") -> dict[str, float]:
        """Greedy answers to the patient's held-out questions (every question of ``split`` once; by default the
        validation and test questions, as the distiller selects nothing on validation): accuracy
        with no documents, with the cartridge, and with the documents in context (the teacher); the KL between
        teacher and student (with and without the cartridge) on the teacher's greedy answers; the cartridge's
        bytes against the KV of the documents; generation tokens/s with the cartridge and with the documents.

        ``env``: a student-view env (``documents="none"``) to measure the cartridge's accuracy on instead; the
        other figures stay on the patient's ``split``.
        """
        reference = self._reference(split)
        with_cartridge, cartridge_tps = self._greedy_answers(self.student_engine, split, "none", env)
        self._evaluated = None if env is not None else (reference.none, with_cartridge, reference.teacher)
        kl_cartridge = distillation_loss(reference.teacher_logits,
                                         self._score(reference.students, self.cartridge)[0].logits)[1]
        document_tokens = len(self._prompt(0, "full")) - len(self._prompt(0, "none"))
        token_bytes = kv_bytes_per_token(self.model)  # at the model's dtype, which the cartridge is served in
        full_bytes = document_tokens * token_bytes
        return {
            "eval/accuracy_none": _accuracy(reference.none),
            "eval/accuracy_cartridge": _accuracy(with_cartridge),
            "eval/accuracy_teacher": _accuracy(reference.teacher),
            "eval/kl_cartridge": kl_cartridge["kl/full"],
            "eval/kl_none": reference.kl_none,
            "eval/questions": float(len(reference.teacher)),
            "eval/cartridge_bytes": float(self.cartridge.nbytes),
            "eval/documents_kv_bytes": float(full_bytes),
            "eval/memory_ratio": full_bytes / (self.cartridge.num_tokens * token_bytes),
            "eval/tokens_per_s_cartridge": cartridge_tps,
            "eval/tokens_per_s_documents": reference.teacher_tokens_per_s,
        }

    def _reference(self, split: str) -> _Reference:
        """The figures of ``split`` that the cartridge does not change (the model is frozen and answers are
        greedy): measured at the first evaluation, then reused."""
        if split not in self._references:
            none, _ = self._greedy_answers(self.plain_engine, split, "none")
            teacher, teacher_tps = self._greedy_answers(self.plain_engine, split, "full")
            students = [_behind(e, s.token_ids[:s.prompt_length]) for e, s in zip(teacher, none)]
            teacher_logits = self._score_teacher(teacher).logits
            kl_none = distillation_loss(teacher_logits, self._score(students, None)[0].logits)[1]["kl/full"]
            self._references[split] = _Reference(none, teacher, students, teacher_logits, kl_none, teacher_tps)
        return self._references[split]

    def _greedy_answers(self, engine: HFEngine, split: str, documents: str,
                        source: gym.Env | None = None) -> tuple[list[Episode], float]:
        """Greedy answers to every question of ``split`` in a view (or of ``source``), and generation tokens/s."""
        c = self.config
        make = (lambda: source) if source is not None else (
            lambda: make_view(c.env_id, c.env_kwargs, self.patient_id, split, documents))
        collector = RolloutCollector(engine, self.tokenizer, make, max_turns=1, max_episode_tokens=c.max_prompt_tokens)
        start = time.perf_counter()
        count = num_questions(c.env_id, c.env_kwargs, self.patient_id, split)
        episodes = collector.collect(range(count), 1, SamplingParams(temperature=0.0, max_new_tokens=c.max_new_tokens))
        seconds = time.perf_counter() - start
        return episodes, sum(e.num_model_tokens for e in episodes) / max(seconds, 1e-9)

    # ---------------------------------------------------------------- logging and checkpoints
    def _log(self, metrics: dict[str, Any]) -> None:
        metrics["dtype"] = dtype_name(self.dtype)
        self.history.append(metrics)
        append_jsonl(self.output_dir / "metrics.jsonl", metrics)
        if self.tracker is not None:
            self.tracker.log(metrics, metrics["step"])
        if self.config.progress and "eval/accuracy_cartridge" in metrics:
            tqdm.write(f"step {metrics['step']:4d}  held-out accuracy: none {metrics['eval/accuracy_none']:.3f}, "
                       f"cartridge {metrics['eval/accuracy_cartridge']:.3f}, teacher "
                       f"{metrics['eval/accuracy_teacher']:.3f}; KL {metrics['eval/kl_cartridge']:.4f} "
                       f"(none {metrics['eval/kl_none']:.4f})")

    def _write_transcripts(self, evaluated: bool) -> None:
        """The transcripts ``config.log_episodes`` asks for at this step: the evaluation's questions (when it
        evaluated; also as a table to ``report_to``) and, with "all", the first :data:`TRAIN_EPISODES_PER_STEP`
        of the step's sampled training answers."""
        mode = self.config.log_episodes
        answers, self._evaluated = self._evaluated, None
        if evaluated and answers is not None:
            records = self.transcript_records(*answers)
            if mode != "none":
                write_transcript(self.output_dir, self.step, records)
            if self.tracker is not None:  # the sample-episodes table of report_to
                self.tracker.log_episodes(records, self.step)
        sampled, self._sampled = self._sampled, []
        if mode == "all" and sampled:
            records = [episode_record(e, self.tokenizer, i) for i, e in enumerate(sampled)]
            write_transcript(self.output_dir, self.step, records, training=True)

    def transcript_records(self, none: list[Episode], cartridge: list[Episode], teacher: list[Episode]
                           ) -> list[dict[str, Any]]:
        """The transcript lines of an evaluation: one per held-out question, from its greedy answers with no
        documents, with the cartridge and with the documents (:func:`question_record`)."""
        return [question_record(i, *answers, self.tokenizer) for i, answers in enumerate(zip(none, cartridge, teacher))]

    def save(self, path: str | Path) -> Path:
        """Cartridge + Adam state (safetensors) and step, RNG, patient and config (JSON)."""
        state = {"step": self.step, "rng": self.rng.bit_generator.state, "config": self.config.to_dict(),
                 "patient_id": self.patient_id, "cartridge": self.cartridge.metadata(), "dtype": dtype_name(self.dtype)}
        return save_checkpoint(path, self.cartridge.tensors(), state, self.optimizer, step=self.step)

    def load(self, path: str | Path) -> None:
        """Restore a :meth:`save` checkpoint so the run continues exactly (the same model is required)."""
        weights, state, optimizer_state = load_checkpoint(path)
        if state.get("patient_id") != self.patient_id:
            raise CheckpointError(f"checkpoint {path} holds a cartridge of patient {state.get('patient_id')!r}, "
                                  f"this trainer distils {self.patient_id!r}")
        loaded = Cartridge.from_tensors(weights, state["cartridge"], self.model)
        if loaded.num_tokens != self.cartridge.num_tokens or loaded.num_frozen != self.cartridge.num_frozen:
            raise CheckpointError(f"checkpoint {path} holds a cartridge of {loaded.num_tokens} tokens "
                                  f"({loaded.num_frozen} frozen); the config asks for {self.cartridge.num_tokens} "
                                  f"({self.cartridge.num_frozen} frozen)")
        self.cartridge.load_state_dict(loaded.state_dict())
        if optimizer_state is not None:
            self.optimizer.load_state_dict(optimizer_state)
        self.rng.bit_generator.state = state["rng"]
        self.step = int(state["step"])
        truncate_jsonl(self.output_dir / "metrics.jsonl", "step", self.step)
        self.history = read_jsonl(self.output_dir / "metrics.jsonl")

    def resume_latest(self) -> Path | None:
        """Load the run's newest checkpoint (:func:`~worldgym.checkpointing.latest_checkpoint`);
        returns its path, or None when the folder holds none (a fresh run)."""
        return load_latest(self.output_dir, self.load)

    def close(self) -> None:
        """Close the trackers (the envs live for one collection)."""
        if self.tracker is not None:
            self.tracker.close()
            self.tracker = None


@dataclass(frozen=True)
class _Reference:
    """A split's figures without the cartridge: greedy answers with no documents (``none``) and with them
    (``teacher``), the teacher's answers behind the student's prompts, the teacher's logits on them, KL(teacher
    ‖ no documents), and the teacher's generation tokens/s."""

    none: list[Episode]
    teacher: list[Episode]
    students: list[Episode]
    teacher_logits: torch.Tensor
    kl_none: float
    teacher_tokens_per_s: float


def _accuracy(episodes: list[Episode]) -> float:
    return float(np.mean([e.success for e in episodes])) if episodes else 0.0


def _groups(episodes: list[Episode], size: int) -> list[list[Episode]]:
    return [episodes[i:i + size] for i in range(0, len(episodes), size)]


def _behind(episode: Episode, prompt: list[int]) -> Episode:
    """``episode``'s answer (and what follows it) behind another prompt: the teacher's view of a student's answer,
    or the student's of a teacher's."""
    answer = slice(episode.prompt_length, None)
    return Episode(prompt + episode.token_ids[answer], [0] * len(prompt) + episode.action_mask[answer],
                   [0.0] * len(prompt) + episode.old_logprobs[answer], len(prompt), episode.group_id,
                   episode.env_seed, reward=episode.reward, success=episode.success, reset_info=episode.reset_info)
