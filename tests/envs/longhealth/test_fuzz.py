"""Fuzz LongHealthQA-v0 with hostile replies and wrong-typed actions (hypothesis, CI-bounded): ``step``
never raises, stays in the observation space, grades 0/1 with ``success`` matching, and says how it read the
reply."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import worldgym  # noqa: F401  (registers LongHealthQA-v0)
from worldgym.envs.longhealth import PARSE_METHODS, generate_panel

FUZZ = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
PANEL = generate_panel(3, seed=0)
ENVS = {task: gym.make("LongHealthQA-v0", panel=PANEL, task=task, num_distractors=3, render_mode="ansi")
        for task in (1, 2, 3)}

hostile_text = st.one_of(
    st.text(max_size=60),
    st.text(st.characters(categories=["Cc", "Cs", "Co", "Zl", "Zp"]), max_size=40),
    st.binary(max_size=80).map(lambda raw: raw.decode("utf-8", errors="surrogateescape")),
    st.tuples(st.text(min_size=1, max_size=4), st.integers(0, 50_000)).map(lambda t: t[0] * t[1]),
)
replies = st.one_of(
    hostile_text,
    st.tuples(hostile_text, st.sampled_from(["<answer>", "</answer>", "<ANSWER>", "Answer: ", "option "]),
              st.sampled_from(list("ABCDEFGabcdef") + ["", "(C)", "C:", "morphine", "The"]), hostile_text)
    .map("".join),
)
non_strings = st.one_of(st.none(), st.integers(), st.floats(), st.lists(st.text(max_size=3), max_size=3),
                        st.sampled_from([b"<answer>A</answer>", np.array(["A"]), {"answer": "A"}, object()]))


@FUZZ
@given(action=replies | non_strings, task=st.sampled_from([1, 2, 3]), seed=st.integers(0, 50))
def test_any_action_is_graded_without_raising(action: Any, task: int, seed: int) -> None:
    env = ENVS[task]
    _, reset_info = env.reset(seed=seed)
    observation, reward, terminated, truncated, info = env.step(action)
    assert env.observation_space.contains(observation)
    assert reward in (0.0, 1.0) and terminated and not truncated
    assert info["success"] is (reward == 1.0) and info["parse"] in PARSE_METHODS
    assert info["predicted"] is None or info["predicted"] in reset_info["options"]
    assert (info["predicted"] == reset_info["answer"]) is (reward == 1.0)
    if info["predicted"] is None:
        assert info["errors"] and all(isinstance(e, str) for e in info["errors"])
    assert isinstance(env.render(), str)
