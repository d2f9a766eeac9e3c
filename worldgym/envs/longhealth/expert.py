"""LongHealthQA-v0's expert: the right option of each question, the demonstrations a warm start imitates."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

__all__ = ["MultipleChoiceExpert"]


class MultipleChoiceExpert:
    """Answers a multiple-choice env's question with the right option from its reset info, in the
    ``<answer>...</answer>`` form the env reads first: its letter (``info["answer"]``), or its text
    (``info["answer_text"]``) when the env asks for text (``info["answer_format"] == "text"``)."""

    def __call__(self, env: gym.Env, observation: str, info: dict[str, Any]) -> str:
        answer = info["answer_text"] if info.get("answer_format") == "text" else info["answer"]
        return f"<answer>{answer}</answer>"
