"""The distiller's two views of one patient's questions: the student's (no documents) and the teacher's (the
documents in context), over the same question for the same seed."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from worldgym.agents.llm.envs import make_text_env

__all__ = ["QuestionBySeed", "make_view", "num_questions", "patient_documents", "split_documents", "split_patients"]


class QuestionBySeed(gym.Wrapper):
    """Reset ``seed`` asks question ``seed % n`` of the env's ``n`` (``options={"index": ...}``), so seeds
    ``0..n-1`` cover every question once and both views of a seed ask the same question."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        if seed is None:
            return self.env.reset(options=options)
        count = self.env.unwrapped.num_questions
        return self.env.reset(seed=seed, options={**(options or {}), "index": seed % count})


def make_view(env_id: str, env_kwargs: dict[str, Any], patient_id: str, split: str, documents: str) -> gym.Env:
    """One patient's questions of ``split`` (a question-level split), as the student (``documents="none"``) or
    the teacher (``"full"``) sees them."""
    kwargs = {**env_kwargs, "split": split, "split_by": "question", "patient_ids": [patient_id],
              "documents": documents}
    return QuestionBySeed(make_text_env(env_id, kwargs))


def num_questions(env_id: str, env_kwargs: dict[str, Any], patient_id: str, split: str) -> int:
    """How many questions of ``split`` the patient has."""
    env = make_view(env_id, env_kwargs, patient_id, split, "none")
    try:
        return env.unwrapped.num_questions
    finally:
        env.close()


def patient_documents(env_id: str, env_kwargs: dict[str, Any], patient_id: str) -> str:
    """The patient's documents as the teacher's prompt shows them (task 1: their own documents, in order)."""
    env = make_view(env_id, env_kwargs, patient_id, "train", "full")
    try:
        _, info = env.reset(seed=0)
        return "\n\n".join(info["documents"])
    finally:
        env.close()


def split_patients(env_id: str, env_kwargs: dict[str, Any], split: str) -> list[str]:
    """The patients of a patient-level ``split``, in panel order."""
    return list(dict.fromkeys(patient.patient_id for patient, _ in _patient_split(env_id, env_kwargs, split)))


def split_documents(env_id: str, env_kwargs: dict[str, Any], split: str) -> set[str]:
    """Every document text of a patient-level ``split``'s patients (``env_kwargs`` may name the patients)."""
    return {text for patient, _ in _patient_split(env_id, env_kwargs, split) for text in patient.texts.values()}


def _patient_split(env_id: str, env_kwargs: dict[str, Any], split: str) -> list[tuple[Any, Any]]:
    """The (patient, question) items of a patient-level ``split``."""
    env = make_text_env(env_id, {**env_kwargs, "split": split, "split_by": "patient"})
    try:
        return env.unwrapped.questions()
    finally:
        env.close()
