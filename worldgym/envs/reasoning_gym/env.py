"""ReasoningGym-v0: one reasoning-gym task per episode, graded by that dataset's own ``score_answer``."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from typing import Any, Literal

import gymnasium as gym

from worldgym.config import check_choice, check_field, check_positive_int
from worldgym.text import UnicodeText, stored_action_text

try:
    import reasoning_gym
    from reasoning_gym.factory import DATASETS
    from reasoning_gym.utils import SYSTEM_PROMPTS, extract_answer
except ImportError as error:  # exercised by tests/test_interop_extra.py
    raise ImportError(
        "ReasoningGym-v0 needs reasoning-gym: install worldgym with the `interop` extra "
        "(pip install 'worldgym[interop]')"
    ) from error

__all__ = ["SPLIT_SEED_OFFSET", "ReasoningGymEnv", "build_split"]

Split = Literal["train", "test"]
# The test split's generator seed is the train split's plus this, so the two splits draw different tasks.
SPLIT_SEED_OFFSET = 1_000_003


def build_split(dataset: str, size: int, seed: int, split: Split, config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The entries (``question``, ``answer``, ``metadata``) of one split of a reasoning-gym dataset.

    The train split is the dataset generated from ``seed``; the test split is generated from ``seed +``
    :data:`SPLIT_SEED_OFFSET`, less every question the train split of the same size also holds (small task
    spaces repeat questions), so it may hold fewer than ``size`` entries. Splits are built once per process and
    shared (read-only) by every env of the same settings.
    """
    return list(_cached_split(dataset, size, seed, split, json.dumps(dict(config), sort_keys=True)))


@functools.lru_cache(maxsize=16)
def _cached_split(dataset: str, size: int, seed: int, split: Split, config_json: str) -> tuple[dict[str, Any], ...]:
    return tuple(_generate_split(dataset, size, seed, split, json.loads(config_json)))


def _generate_split(dataset: str, size: int, seed: int, split: Split, config: dict[str, Any]) -> list[dict[str, Any]]:
    if split == "train":
        return list(reasoning_gym.create_dataset(dataset, size=size, seed=seed, **config))
    train_questions = {entry["question"] for entry in build_split(dataset, size, seed, "train", config)}
    test = reasoning_gym.create_dataset(dataset, size=size, seed=seed + SPLIT_SEED_OFFSET, **config)
    return [entry for entry in test if entry["question"] not in train_questions]


class ReasoningGymEnv(gym.Env[str, str]):
    """A single-turn text env over any reasoning-gym dataset (``leg_counting``, ``basic_arithmetic``, ...).

    ## Description
    ``reset`` returns a question of the dataset; ``step(text)`` reads the answer inside the reply's last
    ``<answer>...</answer>`` (reasoning-gym's convention, stated in ``info["system_prompt"]``), grades it with
    the dataset's own ``score_answer`` and ends the episode.

    ## Spaces
    Observation: ``Text`` over printable ASCII and every character of the split's questions. Action: ``Text``
    over printable ASCII (``max_answer_chars``); any string is graded, whatever its characters or length.
    A non-string action is an invalid answer: reward 0, the reason in ``info["errors"]``.

    ## Rewards
    The dataset's score of the answer, in [0, 1] (some datasets give partial credit); 0 without an answer tag.

    ## Episode end
    Always ``terminated`` after one step.

    ## Info
    reset: ``system_prompt``, ``index``, ``dataset``, ``split``. step: ``predicted`` (the tagged answer or
    None), ``answer`` (the reference), ``score``, ``success`` (the score is 1); ``errors`` when there is no
    tagged answer, the action is not a string, or the dataset's grader failed on the answer.

    ## Arguments
    dataset: a reasoning-gym dataset name (``leg_counting``, ``basic_arithmetic``, ...).
    size: tasks in the split.
    seed: the dataset generator's seed.
    split: "train" or "test" (see :func:`build_split`).
    config: the dataset's own settings, e.g. ``{"min_animals": 2}``.
    system_prompt: a name of ``reasoning_gym.utils.SYSTEM_PROMPTS`` or the prompt's text.
    max_answer_chars: longest answer in the action space (longer text is graded anyway).
    render_mode: None or "ansi".

    ``reset(options={"index": i})`` picks task ``i``; otherwise the env's seeded RNG draws one.

    ## Version History
    * v0: initial version.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, dataset: str = "leg_counting", size: int = 1000, seed: int = 0, split: Split = "train",
                 config: Mapping[str, Any] | None = None, system_prompt: str = "default",
                 max_answer_chars: int = 4096, render_mode: str | None = None):
        check_field(isinstance(dataset, str) and dataset in DATASETS, "dataset", dataset,
                    f"use a reasoning-gym dataset name (e.g. {sorted(DATASETS)[:5]}; all: "
                    "reasoning_gym.factory.DATASETS)")
        check_positive_int("size", size)
        check_field(isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0, "seed", seed,
                    "use an integer >= 0")
        check_choice("split", split, ["train", "test"])
        check_choice("render_mode", render_mode, [None, "ansi"])
        self.dataset = dataset
        self.split: Split = split
        self.render_mode = render_mode
        self.system_prompt = SYSTEM_PROMPTS.get(system_prompt, system_prompt)
        self.entries = build_split(dataset, size, seed, split, dict(config or {}))
        if not self.entries:
            raise ValueError(f"the {split} split of {dataset!r} (size {size}, seed {seed}) has no task left "
                             "once the train split's questions are removed: use a larger size")
        self._grader = reasoning_gym.create_dataset(dataset, size=1, seed=seed, **dict(config or {}))
        longest = max(len(entry["question"]) for entry in self.entries)
        self.observation_space = UnicodeText(longest)  # any text: questions are passed on unchanged
        self.action_space = UnicodeText(max_answer_chars)
        self.entry: dict[str, Any] | None = None  # the running task (read by scripted experts)
        self._last = ""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        index = (options or {}).get("index")
        if index is None:
            index = int(self.np_random.integers(len(self.entries)))
        elif isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self.entries):
            raise ValueError(f"options['index'] must be an int in [0, {len(self.entries)}), got {index!r}")
        self.entry = self.entries[index]
        self._last = f"Q: {self.entry['question']}"
        info = {"system_prompt": self.system_prompt, "index": index, "dataset": self.dataset, "split": self.split}
        return self.entry["question"], info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.entry is None:
            raise gym.error.ResetNeeded("Call reset() before step(); ReasoningGym episodes end after one step.")
        entry, self.entry = self.entry, None
        info: dict[str, Any] = {"predicted": None, "answer": str(entry["answer"]), "score": 0.0, "success": False}
        if not isinstance(action, str):
            info["errors"] = [f"expected the answer as a string, got {type(action).__name__}"]
            self._last += f"\nA: <invalid: {info['errors'][0]}>\nscore=0.0"
            return "Invalid answer: expected text.", 0.0, True, False, info
        predicted = extract_answer(action)
        info["predicted"] = predicted
        if predicted is None:
            info["errors"] = ["no <answer>...</answer> in the reply"]
        else:
            info["score"] = self._score(predicted, entry, info)
        info["success"] = info["score"] >= 1.0
        self._last += f"\nA: {stored_action_text(action)}\nscore={info['score']}"
        return ("Correct." if info["success"] else "Incorrect."), info["score"], True, False, info

    def _score(self, predicted: str, entry: dict[str, Any], info: dict[str, Any]) -> float:
        """The dataset's score of ``predicted``; a grader that fails on model text scores 0 (reason in info)."""
        try:
            score = float(self._grader.score_answer(predicted, entry))
        except Exception as error:  # noqa: BLE001 - third-party graders parse arbitrary model text
            info["errors"] = [f"the {self.dataset} grader failed on the answer: {type(error).__name__}: {error}"]
            return 0.0
        return min(max(score, 0.0), 1.0) if math.isfinite(score) else 0.0  # NaN scores 0

    def render(self) -> str | None:
        """The last question and answer as text (``render_mode="ansi"``)."""
        return self._last if self.render_mode == "ansi" else None
