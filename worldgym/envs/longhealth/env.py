"""LongHealthQA-v0: one multiple-choice question about a patient's clinical documents per episode."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import gymnasium as gym

from worldgym.config import check_choice, check_field
from worldgym.envs.longhealth.answers import parse_answer
from worldgym.envs.longhealth.loader import load_longhealth, parse_longhealth
from worldgym.envs.longhealth.prompts import (
    ANSWER_FORMATS,
    CANNOT_ANSWER,
    SYSTEM_PROMPTS,
    AnswerFormat,
    build_prompt,
)
from worldgym.envs.longhealth.schema import OPTION_LETTERS, Patient, Question
from worldgym.envs.longhealth.splits import Split, SplitBy, split_questions
from worldgym.envs.longhealth.synthetic import generate_panel
from worldgym.text import UnicodeText, stored_action_text

__all__ = ["DOCUMENT_VIEWS", "TASKS", "LongHealthQAEnv"]

DocumentView = Literal["none", "full"]
DOCUMENT_VIEWS: tuple[str, ...] = ("none", "full")
TASKS = (1, 2, 3)


@dataclass(frozen=True)
class _Episode:
    patient: Patient
    question: Question
    options: dict[str, str]
    answer: str
    documents: list[str]
    document_ids: list[str]


class LongHealthQAEnv(gym.Env[str, str]):
    """LongHealth-style multiple-choice questions about long clinical documents, one question per episode.

    ## Description
    ``reset`` picks a question (with the env's seeded RNG, or ``options={"index": i}``) and returns the
    prompt: the documents of the episode (``documents="full"``, the teacher's view) or none of them
    (``documents="none"``, the student's view: question and options only, for an agent that carries the
    documents in another form, e.g. a cartridge built from ``info["documents"]``), then the question and its
    lettered options. ``step(text)`` reads the chosen option (:func:`parse_answer`) and ends the episode.

    Tasks, as in the LongHealth benchmark's evaluation (Adams et al. 2024):

    * ``task=1`` (information extraction): the patient's own documents; options A-E.
    * ``task=2`` (identification among distractors): the documents that hold the answer (the question's
      ``answer_location``; all of the patient's documents when it names none) plus ``num_distractors``
      documents of other patients, shuffled; options A-E plus F, ``CANNOT_ANSWER``; the right answer is the
      question's own.
    * ``task=3`` (negation: knowing what the documents do not say): only the other patients' documents; the
      answer's documents are withheld, so F is right.

    Questions come from a LongHealth JSON file (``data_path``: the benchmark's ``benchmark_v5.json`` or
    :func:`write_panel`'s output), from JSON data or patients in memory (``panel``), or else from a synthetic
    panel (``num_patients`` fictional patients generated from ``panel_seed``).

    ## Spaces
    Observation: :class:`worldgym.text.UnicodeText` up to the length of the longest possible prompt, so the
    file's documents, questions and options reach the agent unchanged (any Unicode character). Action:
    ``UnicodeText`` up to ``max_answer_chars``; any text is graded (longer replies included), a non-string
    action is an invalid answer.

    ## Rewards
    1.0 when the chosen option is the right one, else 0.0.

    ## Episode end
    Always ``terminated`` after one step.

    ## Info
    reset: ``system_prompt``, ``answer_format``, ``patient_id``, ``question_no`` (the file's ``No``), ``question``, ``options``
    (letter -> text), ``answer`` (the right letter), ``answer_text``, ``question_type`` (the file's ``type``:
    extraction / negation / ordering in the synthetic panel; None in the real file), ``documents`` (the
    episode's documents in prompt order, whatever ``documents`` is, so a teacher can build its own view),
    ``document_ids`` (``"patient_01/text_0"`` for each), ``task``, ``split``, ``index``.
    step: ``predicted`` (the letter read, or None), ``parse`` (how it was read: ``tag``, ``tag_closest_text``,
    ``letter``, ``option_text``, ``closest_text`` or ``none``), ``answer``, ``success``; and ``errors`` when
    no option could be read or the action is not a string.

    ## Arguments
    data_path: a LongHealth JSON file (the benchmark's ``benchmark_v5.json`` or :func:`write_panel`'s output).
    panel: JSON data or patients in memory, instead of ``data_path``.
    num_patients: patients in the synthetic panel used when neither ``data_path`` nor ``panel`` is given.
    panel_seed: seed of the synthetic panel.
    task: 1 (information extraction), 2 (identification among distractors) or 3 (negation).
    documents: "full" (the documents in the prompt, the teacher's view) or "none" (question and options
        only, the student's view).
    split: "all", "train", "validation", "test" or "held_out" (see :mod:`worldgym.envs.longhealth.splits`).
    split_by: "patient" or "question": what the splits keep apart.
    split_seed: seed of the split.
    patient_ids: only these patients' questions (distractors still come from the whole panel).
    num_distractors: other patients' documents in tasks 2-3.
    shuffle_documents: shuffle task 1's documents too (tasks 2-3 always shuffle).
    answer_format: "letter" (LongHealth's own prompt) or "text" (the option's text copied out); either is
        graded.
    max_answer_chars: longest answer in the action space (longer replies are graded anyway).
    render_mode: None or "ansi".

    ## Vector envs
    Works in ``gymnasium.vector.SyncVectorEnv`` and ``AsyncVectorEnv`` (pass ``shared_memory=False`` to the
    latter, as for every ``Text`` observation).

    ## Version History
    * v0: initial version.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(
        self,
        data_path: str | Path | None = None,
        panel: Mapping[str, Any] | Sequence[Patient] | None = None,
        num_patients: int = 10,
        panel_seed: int = 0,
        task: int = 1,
        documents: DocumentView = "full",
        split: Split = "all",
        split_by: SplitBy = "patient",
        split_seed: int = 0,
        patient_ids: Sequence[str] | None = None,
        num_distractors: int = 10,
        shuffle_documents: bool = False,
        answer_format: AnswerFormat = "letter",
        max_answer_chars: int = 4096,
        render_mode: str | None = None,
    ):
        check_choice("render_mode", render_mode, [None, "ansi"])
        check_field(not isinstance(task, bool) and task in TASKS, "task", task, "use 1, 2 or 3")
        check_field(documents in DOCUMENT_VIEWS, "documents", documents,
                    "use 'none' (the student's view) or 'full' (the teacher's)")
        check_choice("answer_format", answer_format, ANSWER_FORMATS)
        for name, value, low in (("num_distractors", num_distractors, 1 if task > 1 else 0),
                                 ("max_answer_chars", max_answer_chars, 1)):
            check_field(isinstance(value, int) and not isinstance(value, bool) and value >= low, name, value,
                        f"use an integer >= {low}")
        self.patients = self._load(data_path, panel, num_patients, panel_seed)
        check_field(task == 1 or len(self.patients) >= 2, "task", task,
                    f"it shows other patients' documents as distractors, and the panel has only "
                    f"{len(self.patients)} patient: use task=1 or a larger panel")
        self.items = self._select(split, split_by, split_seed, patient_ids)
        self.task, self.documents, self.split, self.answer_format = task, documents, split, answer_format
        self.num_distractors, self.shuffle_documents = num_distractors, shuffle_documents
        self.render_mode = render_mode
        self.observation_space = UnicodeText(self._longest_prompt())
        self.action_space = UnicodeText(max_answer_chars)
        self._episode: _Episode | None = None
        self._last = ""

    @property
    def num_questions(self) -> int:
        """How many questions the env's split holds (``options={"index": i}`` asks question ``i``)."""
        return len(self.items)

    def questions(self) -> list[tuple[Patient, Question]]:
        """The split's (patient, question) pairs, in the order ``options={"index": i}`` picks them, for scripted
        experts, cartridge views and analysis (the agent sees only the prompt)."""
        return list(self.items)

    @staticmethod
    def _load(data_path: str | Path | None, panel: Mapping[str, Any] | Sequence[Patient] | None,
              num_patients: int, panel_seed: int) -> list[Patient]:
        check_field(data_path is None or panel is None, "panel", "<given with data_path>",
                    "pass data_path or panel, not both")
        if data_path is not None:
            return load_longhealth(data_path)
        if panel is None:
            return parse_longhealth(generate_panel(num_patients, panel_seed), source="synthetic panel")
        if isinstance(panel, Mapping):
            return parse_longhealth(panel, source="panel")
        patients = list(panel)
        check_field(bool(patients) and all(isinstance(p, Patient) for p in patients), "panel",
                    f"<{type(panel).__name__} of {len(patients)}>",
                    "use LongHealth JSON data (a dict) or a non-empty list of Patient")
        return patients

    def _select(self, split: Split, split_by: SplitBy, split_seed: int,
                patient_ids: Sequence[str] | None) -> list[tuple[Patient, Question]]:
        items = split_questions(self.patients, split, split_by, split_seed)
        if patient_ids is not None:
            known = {p.patient_id for p in self.patients}
            unknown = [pid for pid in patient_ids if pid not in known]
            check_field(not unknown, "patient_ids", list(patient_ids),
                        f"{unknown} are not in the panel: use some of {sorted(known)}")
            items = [(p, q) for p, q in items if p.patient_id in set(patient_ids)]
        check_field(bool(items), "split", split,
                    f"it holds no questions (split_by={split_by!r}, patient_ids={patient_ids}) of a panel of "
                    f"{len(self.patients)} patients: use more patients, split_by='question' or split='all'")
        return items

    def _longest_prompt(self) -> int:
        """An upper bound on any prompt's length: every document of the panel plus the longest question."""
        documents = [text for patient in self.patients for text in patient.texts.values()]
        letters = [*OPTION_LETTERS, "F"]
        longest_question = max(len(build_prompt(q.question, dict(zip(letters, (*q.options, CANNOT_ANSWER))),
                                                answer_format=self.answer_format)) for _, q in self.items)
        return len(build_prompt("", {}, documents, self.answer_format)) + longest_question

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        index = (options or {}).get("index")
        if index is None:
            index = int(self.np_random.integers(len(self.items)))
        elif isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self.items):
            raise ValueError(f"options['index'] must be an integer in [0, {len(self.items)}), got {index!r}")
        patient, question = self.items[index]
        self._episode = episode = self._make_episode(patient, question)
        shown = episode.documents if self.documents == "full" else None
        observation = build_prompt(question.question, episode.options, shown, self.answer_format)
        self._last = f"{patient.patient_id} No {question.number} (task {self.task}): {question.question}"
        info = {
            "system_prompt": SYSTEM_PROMPTS[self.answer_format],
            "answer_format": self.answer_format,
            "patient_id": patient.patient_id,
            "question_no": question.number,
            "question": question.question,
            "options": dict(episode.options),
            "answer": episode.answer,
            "answer_text": episode.options[episode.answer],
            "question_type": question.kind,
            "documents": list(episode.documents),
            "document_ids": list(episode.document_ids),
            "task": self.task,
            "split": self.split,
            "index": index,
        }
        return observation, info

    def _make_episode(self, patient: Patient, question: Question) -> _Episode:
        options = dict(zip(OPTION_LETTERS, question.options))
        own = [(f"{patient.patient_id}/{text_id}", text) for text_id, text in patient.texts.items()]
        if self.task == 1:
            if self.shuffle_documents:
                own = [own[int(i)] for i in self.np_random.permutation(len(own))]
            return _Episode(patient, question, options, question.correct_letter, [t for _, t in own],
                            [d for d, _ in own])
        options["F"] = CANNOT_ANSWER
        others = [(f"{p.patient_id}/{text_id}", text) for p in self.patients
                  if p.patient_id != patient.patient_id for text_id, text in p.texts.items()]
        chosen = [others[int(i)] for i in self.np_random.permutation(len(others))[: self.num_distractors]]
        if self.task == 2:
            located = [(f"{patient.patient_id}/{t}", patient.texts[t]) for t in question.answer_location]
            chosen += located or own
        chosen = [chosen[int(i)] for i in self.np_random.permutation(len(chosen))]
        answer = question.correct_letter if self.task == 2 else "F"
        return _Episode(patient, question, options, answer, [t for _, t in chosen], [d for d, _ in chosen])

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._episode is None:
            raise gym.error.ResetNeeded("Call reset() before step(); a LongHealthQA episode is one step")
        episode, self._episode = self._episode, None
        info: dict[str, Any] = {"predicted": None, "parse": "none", "answer": episode.answer,
                                "success": False}
        if not isinstance(action, str):
            info["errors"] = [f"expected the answer as a string, got {type(action).__name__}"]
            self._last += f"\nA: <invalid: {info['errors'][0]}>\nreward=0.0"
            return "Invalid answer: expected text.", 0.0, True, False, info
        parsed = parse_answer(action, episode.options)
        reward = 1.0 if parsed.letter == episode.answer else 0.0
        info.update(predicted=parsed.letter, parse=parsed.method, success=reward > 0)
        if parsed.letter is None:
            letters = ", ".join(episode.options)
            info["errors"] = [f"no option ({letters}) could be read; put its letter in <answer></answer>"]
        self._last += f"\nA: {stored_action_text(action, 500)}\nreward={reward}"
        return ("Correct." if reward > 0 else "Incorrect."), reward, True, False, info

    def render(self) -> str | None:
        """The last question and answer as text (``render_mode="ansi"``)."""
        return self._last if self.render_mode == "ansi" else None
