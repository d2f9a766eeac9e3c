"""MathQA-v1: single-turn math word problems; the answer text is the action, reward 1 if it is right."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from worldgym.config import check_choice, check_field
from worldgym.envs.math_qa.loader import load_gsm8k
from worldgym.envs.math_qa.problems import MathProblem, Split, generate_problems
from worldgym.envs.math_qa.reward import MathRewardModel, extract_answer
from worldgym.text import OBSERVATION_CHANGES, UnicodeText, fit_observation_text, stored_action_text

__all__ = ["SYSTEM_PROMPT", "MathQAEnv"]

SYSTEM_PROMPT = "Solve the math problem step by step. End with the final answer as '#### <number>'."


class MathQAEnv(gym.Env[str, str]):
    """GSM8K-style word problems, one per episode.

    ## Description ``reset`` returns a question; ``step(text)`` grades the text's final answer (``#### 42``,
    "the answer is 42", "Answer: 42", else the last number) with :class:`MathRewardModel` and ends the
    episode. Problems come from the offline template generator (train/test splits never share a question;
    difficulty 1-3) or from a user's GSM8K jsonl/parquet file (``dataset_path``).

    ## Spaces
    Observation and action: :class:`worldgym.text.UnicodeText` (question up to ``max_question_chars``, answer up
    to ``max_answer_chars``). Questions are the file's text character for character (``’``, ``€``, ``¾``,
    non-breaking spaces, any script); a longer one is cut with a marker and ``info["observation_changes"]``
    reports it (:func:`worldgym.text.fit_observation_text`). Whatever text the model writes is graded and
    nothing raises: longer answers, control characters and lone surrogates are graded on their text anyway.
    A non-string action is an invalid answer: reward 0, with the reason in ``info["errors"]``.

    ## Rewards
    1.0 for a correct final answer, else 0.0 (an answer with no number scores 0).

    ## Episode end
    Always ``terminated`` after one step.

    ## Info
    reset: ``system_prompt`` (the instruction a chat agent should use), ``index``, ``difficulty``, ``split``;
    ``observation_changes`` when the question was cut to ``max_question_chars``.
    step: ``predicted`` (extracted text or None), ``answer``, ``success``; and ``errors`` (why the answer
    could not be graded) when there is no number to grade or the action is not a string.

    ## Arguments
    split: "train" or "test"; the generator's splits never share a question.
    difficulty: 1-3, or a list of levels to draw from (generated problems only).
    num_problems: problems the generator makes for the split.
    seed: seed of the generated problem set (episodes are seeded by ``reset``).
    dataset_path: a GSM8K jsonl or parquet file to read problems from instead of the generator.
    problems: an explicit list of :class:`MathProblem`; overrides both the generator and ``dataset_path``.
    max_question_chars: longest question observed; a longer one is cut with a marker.
    max_answer_chars: longest answer in the action space (longer text is graded anyway).
    render_mode: None or "ansi".

    ``reset(options={"index": i})`` picks problem ``i``; otherwise the problem is drawn with the env's
    seeded RNG.

    ## Version History
    * v1: a non-string action is an invalid answer, reward 0 (v0 graded ``str(action)``), and ungradable
      answers report ``info["errors"]``; questions keep every Unicode character (characters outside printable
      ASCII used to become ``?``).
    * v0: initial version, retired: ``gym.make("MathQA-v0")`` raises Gymnasium's ``DeprecatedEnv`` naming
      MathQA-v1.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(
        self,
        split: Split = "train",
        difficulty: int | Sequence[int] = 1,
        num_problems: int = 1000,
        seed: int = 0,
        dataset_path: str | Path | None = None,
        problems: Sequence[MathProblem] | None = None,
        max_question_chars: int = 2048,
        max_answer_chars: int = 4096,
        render_mode: str | None = None,
    ):
        check_choice("render_mode", render_mode, [None, "ansi"])
        if problems is not None:
            self.problems = list(problems)
        elif dataset_path is not None:
            self.problems = load_gsm8k(dataset_path)
        else:
            self.problems = generate_problems(num_problems, split, difficulty, seed)
        check_field(bool(self.problems), "problems", problems, "pass at least one problem")
        self.split = split
        self.render_mode = render_mode
        self.reward_model = MathRewardModel()
        self.observation_space = UnicodeText(max_question_chars)
        self.action_space = UnicodeText(max_answer_chars)
        self._problem: MathProblem | None = None
        self._last: str = ""

    @property
    def num_problems(self) -> int:
        """How many problems the env asks from (``options={"index": i}`` picks problem ``i``)."""
        return len(self.problems)

    def problem(self, index: int) -> MathProblem:
        """Problem ``index``: the one ``reset(options={"index": index})`` asks (a reset's ``info["index"]``
        names it), with its worked solution and answer, for scripted experts and analysis (the agent sees the
        question only)."""
        return self.problems[index]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        index = (options or {}).get("index")
        if index is None:
            index = int(self.np_random.integers(len(self.problems)))
        elif isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"options['index'] must be an integer, got {type(index).__name__} {index!r}")
        elif not 0 <= int(index) < len(self.problems):
            raise ValueError(f"options['index'] must be in [0, {len(self.problems)}), got {index}")
        self._problem = self.problems[int(index)]
        self._last = f"Q: {self._problem.question}"
        question, changes = fit_observation_text(self._problem.question, self.observation_space.max_length)
        info: dict[str, Any] = {
            "system_prompt": SYSTEM_PROMPT,
            "index": int(index),
            "difficulty": self._problem.difficulty,
            "split": self.split,
        }
        if changes:
            info[OBSERVATION_CHANGES] = changes
        return question, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._problem is None:
            raise gym.error.ResetNeeded("Call reset() before step(); MathQA episodes end after one step.")
        problem, self._problem = self._problem, None
        if not isinstance(action, str):
            error = f"expected the answer as a string, got {type(action).__name__}"
            self._last += f"\nA: <invalid: {error}>\nreward=0.0"
            return "Invalid answer: expected text.", 0.0, True, False, {
                "predicted": None, "answer": problem.answer_text, "success": False, "errors": [error]}
        predicted = extract_answer(action)
        reward = self.reward_model(action, problem.answer)
        info: dict[str, Any] = {"predicted": predicted, "answer": problem.answer_text, "success": reward > 0}
        if predicted is None:
            info["errors"] = ["no number found in the answer"]
        self._last += f"\nA: {stored_action_text(action)}\nreward={reward}"
        return ("Correct." if reward > 0 else "Incorrect."), reward, True, False, info

    def render(self) -> str | None:
        """The last question and answer as text (``render_mode="ansi"``)."""
        return self._last if self.render_mode == "ansi" else None
