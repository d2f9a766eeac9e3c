"""ReasoningGym-v0: check_env, graded by the dataset's own score_answer, info["success"] on completion only,
disjoint train/test splits, and model text that never raises; a short GRPO run through examples/train_grpo.py."""

from __future__ import annotations

import re

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

pytest.importorskip("reasoning_gym", reason="needs the interop extra (reasoning-gym)")

import reasoning_gym

import worldgym  # noqa: F401  (registers the env ids)
from worldgym.envs.reasoning_gym import ReasoningGymEnv, build_split
from worldgym.errors import ConfigError


@pytest.fixture(scope="module")
def env() -> gym.Env:
    return gym.make("ReasoningGym-v0", dataset="leg_counting", size=200, seed=0)


def test_passes_check_env(env):
    check_env(env.unwrapped, skip_render_check=True)


def test_a_correct_answer_succeeds_and_a_wrong_one_does_not(env):
    question, info = env.reset(seed=3)
    entry = env.unwrapped.entry
    assert question == entry["question"] and info["dataset"] == "leg_counting" and "<answer>" in info["system_prompt"]
    grader = reasoning_gym.create_dataset("leg_counting", size=1, seed=0)
    text, reward, terminated, truncated, info = env.step(f"I count... <answer>{entry['answer']}</answer>")
    assert (text, reward, terminated, truncated) == ("Correct.", 1.0, True, False)
    assert info["success"] is True and reward == grader.score_answer(entry["answer"], entry)
    env.reset(seed=3)
    wrong = str(int(entry["answer"]) + 1)
    _, reward, _, _, info = env.step(f"<answer>{wrong}</answer>")
    assert (reward, info["success"], info["predicted"], info["answer"]) == (0.0, False, wrong, entry["answer"])


@pytest.mark.parametrize(("action", "error"), [
    ("The answer is 12.", "no <answer>...</answer> in the reply"),
    (12, "expected the answer as a string, got int"),
    (None, "expected the answer as a string, got NoneType"),
])
def test_unusable_answers_score_zero_with_the_reason(env, action, error):
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(action)
    assert (reward, terminated, info["success"], info["errors"]) == (0.0, True, False, [error])
    with pytest.raises(gym.error.ResetNeeded):
        env.step("<answer>1</answer>")


def test_a_grader_that_fails_on_model_text_scores_zero(monkeypatch):
    env = ReasoningGymEnv("leg_counting", size=10)
    env.reset(seed=0)

    def broken(answer, entry):
        raise ValueError("cannot parse")

    monkeypatch.setattr(env._grader, "score_answer", broken)
    _, reward, _, _, info = env.step("<answer>zebra</answer>")
    assert reward == 0.0 and info["errors"] == ["the leg_counting grader failed on the answer: ValueError: cannot parse"]


def test_splits_are_disjoint_and_seeded():
    train = build_split("basic_arithmetic", 300, 0, "train", {})
    test = build_split("basic_arithmetic", 300, 0, "test", {})
    assert not {e["question"] for e in train} & {e["question"] for e in test} and len(test) > 250
    a, b = (gym.make("ReasoningGym-v0", dataset="basic_arithmetic", size=300, split="test") for _ in range(2))
    assert a.reset(seed=4) == b.reset(seed=4)
    assert a.reset(options={"index": 7})[0] == test[7]["question"]


def test_arguments_are_checked():
    with pytest.raises(ConfigError, match="dataset='leg_countin' is invalid: use a reasoning-gym dataset name"):
        ReasoningGymEnv("leg_countin")
    with pytest.raises(ConfigError, match="size=0 is invalid: use an integer >= 1"):
        ReasoningGymEnv(size=0)
    with pytest.raises(ConfigError, match=re.escape("split='validation' is invalid: use one of ['train', 'test']")):
        ReasoningGymEnv(split="validation")
    with pytest.raises(ValueError, match=r"options\['index'\] must be an int in \[0, 5\), got 5"):
        ReasoningGymEnv(size=5).reset(options={"index": 5})


def test_grpo_runs_on_a_reasoning_gym_task_through_the_example(load_example, tmp_path):
    example = load_example("train_grpo")
    out = tmp_path / "run"
    curve = example.main(["reasoning-gym", "--grpo.num-steps", "2", "--grpo.prompts-per-step", "2",
                          "--grpo.group-size", "2", "--grpo.minibatch-size", "4", "--grpo.eval-every", "2",
                          "--grpo.eval-episodes", "2", "--grpo.max-new-tokens", "12", "--grpo.no-progress",
                          "--grpo.env-kwargs.size", "100", "--grpo.eval-env-kwargs.size", "20",
                          "--expert.episodes", "16", "--expert.epochs", "1", "--grpo.output-dir", str(out)])
    assert curve["env"] == "ReasoningGym-v0" and [step for step, _ in curve["eval_success"]] == [0, 2]
    assert (out / "checkpoint-last" / "manifest.json").is_file()
