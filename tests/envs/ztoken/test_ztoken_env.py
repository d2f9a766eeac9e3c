"""Tests for ZTokenDigits-v1: vocabulary, splits, reward rule, env API, vector envs, SB3 compatibility."""

from __future__ import annotations

import doctest
import math
import re
from dataclasses import fields

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import worldgym  # noqa: F401  (registers the ids)
from worldgym.envs.ztoken import (
    ArithmeticProblem,
    FlattenTokenDigitsAction,
    ProblemSampler,
    RewardBreakdown,
    RewardConfig,
    ZTokenDigitsEnv,
    ZTokenVocab,
    score_answer,
)
from worldgym.envs.ztoken import (
    env as env_module,
)
from worldgym.envs.ztoken import (
    problems as problems_module,
)
from worldgym.envs.ztoken import (
    vocab as vocab_module,
)
from worldgym.envs.ztoken import (
    wrappers as wrappers_module,
)

BREAKDOWN_KEYS = {field.name for field in fields(RewardBreakdown)}


@pytest.mark.parametrize("module", [env_module, problems_module, vocab_module, wrappers_module])
def test_docstring_examples_run(module) -> None:
    failures, _ = doctest.testmod(module)
    assert failures == 0


def test_vocab_ids_are_contiguous_and_round_trip() -> None:
    vocab = ZTokenVocab(3)
    assert vocab.action_token_ids() == [vocab.z_id(0), vocab.z_id(1), vocab.z_id(2), vocab.answer_id]
    assert vocab.decode(vocab.encode_question("9*87=") + [vocab.answer_id]) == "9*87=<ANSWER>"
    with pytest.raises(ValueError, match=re.escape("characters outside the vocabulary: ['x']")):
        vocab.encode_question("1x2=")
    with pytest.raises(ValueError, match="num_z_tokens=0 is invalid: use an integer >= 1"):
        ZTokenVocab(0)


def test_answers_are_five_digits_msb_first() -> None:
    assert ArithmeticProblem(999, 99, "*").digits == (9, 8, 9, 0, 1)
    assert ArithmeticProblem(3, 4, "+").digits == (0, 0, 0, 0, 7)


def test_splits_are_disjoint_seeded_and_fit_five_digits() -> None:
    rng = np.random.default_rng(0)
    train = {ProblemSampler(operand_digits=2, split="train").sample(rng) for _ in range(400)}
    test = {ProblemSampler(operand_digits=2, split="test").sample(rng) for _ in range(400)}
    assert train and test and not train & test
    assert all(p.answer <= 99_999 for p in train | test)
    other = {ProblemSampler(operand_digits=2, split="test", split_seed=1).sample(rng) for _ in range(400)}
    assert other - test, "a different split_seed must give a different partition"
    first = ProblemSampler(operand_digits=3).sample(np.random.default_rng(5))
    assert first == ProblemSampler(operand_digits=3).sample(np.random.default_rng(5))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"operand_digits": 5}, "operand_digits=5 is invalid: use an integer in [1, 4]"),
        ({"ops": ("-",)}, "ops=('-',) is invalid"),
        ({"test_fraction": 1.0}, "test_fraction=1.0 is invalid: use a number in (0, 1)"),
    ],
)
def test_sampler_rejects_bad_settings(kwargs, message) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        ProblemSampler(**kwargs)


DEFAULT_REWARD = RewardConfig()


def _score(pred, true, *, n=3, by="answer", config=DEFAULT_REWARD, seed=0):
    return score_answer(np.array(pred), tuple(true), n, by, config, np.random.default_rng(seed))


def test_reward_full_credit_and_length_penalty() -> None:
    result = _score([0, 1, 2, 3, 4], [0, 1, 2, 3, 4], config=RewardConfig(length_penalty=0.01))
    assert result.reward_full == 1.0 and result.length_penalty == pytest.approx(0.03)
    assert result.reward_final == pytest.approx(0.97)


def test_reward_partial_counts_nonzero_positions_always() -> None:
    never_keep_zeros = RewardConfig(partial_scale=0.5, keep_prob=(0.0,) * 5)
    result = _score([0, 1, 9, 3, 9], [0, 1, 2, 3, 4], config=never_keep_zeros)
    assert result.applied_mask == [0, 1, 1, 1, 1]
    assert (result.applied_count, result.correct_count) == (4, 2)
    assert result.reward_final == pytest.approx(0.5 * 2 / 4)


def test_reward_keep_prob_one_applies_zero_positions_and_applied_zero_gives_zero() -> None:
    keep_all = _score([1, 0, 0, 0, 0], [0, 0, 0, 0, 7], config=RewardConfig(keep_prob=(1.0,) * 5))
    assert keep_all.applied_count == 5 and keep_all.correct_count == 3
    nothing = _score([1, 1, 1, 1, 1], [0, 0, 0, 0, 0], config=RewardConfig(keep_prob=(0.0,) * 5))
    assert nothing.applied_count == 0 and nothing.reward_final == 0.0


def test_reward_mask_follows_the_seeded_rng() -> None:
    masks = {
        tuple(_score([0] * 5, [0] * 5, config=RewardConfig(keep_prob=(0.5,) * 5), seed=s).applied_mask)
        for s in range(20)
    }
    assert len(masks) > 1
    same = [
        _score([0] * 5, [0] * 5, config=RewardConfig(keep_prob=(0.5,) * 5), seed=3).applied_mask
        for _ in range(2)
    ]
    assert same[0] == same[1]


def test_truncation_gives_zero_reward_without_a_length_penalty() -> None:
    result = _score([0, 1, 2, 3, 4], [0, 1, 2, 3, 4], by="max_new_tokens")
    assert result.reward_final == 0.0 and result.reward_full == 1.0
    assert math.copysign(1.0, result.reward_final) == 1.0, "logs must show 0.0, not -0.0"


def test_truncation_is_charged_the_length_penalty_so_it_never_beats_answering() -> None:
    config = RewardConfig(length_penalty=0.1)
    truncated = _score([0, 1, 2, 3, 4], [0, 1, 2, 3, 4], n=3, by="max_new_tokens", config=config)
    assert truncated.length_penalty == pytest.approx(0.3)
    assert truncated.reward_final == pytest.approx(-0.3) and truncated.reward_full == 1.0
    all_wrong = _score([9, 9, 9, 9, 9], [0, 1, 2, 3, 4], n=3, config=config)
    assert all_wrong.reward_partial == 0.0 and all_wrong.reward_final >= truncated.reward_final


def test_reward_config_validation() -> None:
    with pytest.raises(ValueError, match="use 5 probabilities"):
        RewardConfig(keep_prob=(0.5,))
    with pytest.raises(ValueError, match="length_penalty=-.* is invalid: use a number >= 0"):
        RewardConfig(length_penalty=-1.0)


def test_env_passes_gymnasium_check_env() -> None:
    env = gym.make("ZTokenDigits-v1", num_z_tokens=4, max_new_tokens=4, render_mode="ansi")
    check_env(env.unwrapped, skip_render_check=False)


def test_registered_env_plays_an_episode_with_breakdown() -> None:
    env = gym.make("ZTokenDigits-v1", num_z_tokens=4, max_new_tokens=5, render_mode="ansi")
    obs, info = env.reset(seed=7)
    assert env.observation_space.contains(obs)
    question = info["question"]
    obs, reward, terminated, truncated, info = env.step({"token": 2, "digits": np.zeros(5, dtype=np.int64)})
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert env.render() == question + "<Z_2>"
    obs, reward, terminated, truncated, info = env.step({"token": 4, "digits": [0, 0, 0, 0, 0]})
    assert terminated and not truncated
    assert BREAKDOWN_KEYS <= set(info)
    assert info["num_generated"] == 2 and info["terminated_by"] == "answer"
    assert reward == info["reward_final"]
    left, right = re.split(r"[+*]", question[:-1])
    true = int(left) + int(right) if "+" in question else int(left) * int(right)
    assert info["digit_true"] == [int(c) for c in f"{true:05d}"]


def test_env_truncates_at_max_new_tokens_with_zero_reward() -> None:
    env = ZTokenDigitsEnv(num_z_tokens=2, max_new_tokens=3)
    env.reset(seed=0)
    for _ in range(3):
        _, reward, terminated, truncated, info = env.step({"token": 0, "digits": [0] * 5})
    assert truncated and not terminated and reward == 0.0
    assert info["terminated_by"] == "max_new_tokens" and info["num_generated"] == 3


def test_env_truncation_with_a_length_penalty_returns_the_penalty() -> None:
    env = ZTokenDigitsEnv(num_z_tokens=2, max_new_tokens=2, length_penalty=0.05)
    env.reset(seed=0)
    env.step({"token": 0, "digits": [0] * 5})
    _, reward, _, truncated, info = env.step({"token": 1, "digits": [0] * 5})
    assert truncated and reward == pytest.approx(-0.1) and reward == info["reward_final"]


def test_env_same_seed_same_problems_and_masks() -> None:
    def play(seed: int) -> list:
        env = ZTokenDigitsEnv()
        infos = []
        env.reset(seed=seed)
        for _ in range(5):
            infos.append(env.step({"token": env.answer_action, "digits": [0] * 5})[4])
            env.reset()
        return [(i["question"], i["applied_mask"]) for i in infos]

    assert play(3) == play(3)
    assert play(3) != play(4)


def test_test_split_env_only_draws_test_problems() -> None:
    env = ZTokenDigitsEnv(split="test", split_seed=2)
    sampler = ProblemSampler(split="test", split_seed=2)
    for seed in range(20):
        _, info = env.reset(seed=seed)
        left, op, right = re.match(r"(\d+)([+*])(\d+)=", info["question"]).groups()
        assert (
            problems_module.split_of(ArithmeticProblem(int(left), int(right), op), 2, sampler.test_fraction)
            == "test"
        )


@pytest.mark.parametrize(
    ("action", "error"),
    [
        ({"token": 9, "digits": [0] * 5}, ValueError),
        ({"token": 0, "digits": [0, 0, 0, 0, 10]}, ValueError),
        ({"token": 0}, ValueError),
        ((0, [0] * 5), TypeError),
        ({"token": 0, "digits": [1.5] * 5}, TypeError),
    ],
)
def test_env_rejects_actions_outside_the_space(action, error) -> None:
    env = ZTokenDigitsEnv(num_z_tokens=8)
    env.reset(seed=0)
    with pytest.raises(error, match="is not in the action space"):
        env.step(action)


def test_env_step_after_episode_end_raises() -> None:
    env = ZTokenDigitsEnv()
    env.reset(seed=0)
    env.step({"token": env.answer_action, "digits": [0] * 5})
    with pytest.raises(RuntimeError, match="call reset"):
        env.step({"token": 0, "digits": [0] * 5})


def test_env_pins_a_problem_through_options() -> None:
    env = ZTokenDigitsEnv()
    _, info = env.reset(seed=0, options={"problem": ArithmeticProblem(12, 34, "*")})
    assert info["question"] == "12*34="
    *_, info = env.step({"token": env.answer_action, "digits": [0, 0, 4, 0, 8]})
    assert info["reward_full"] == 1.0
    with pytest.raises(TypeError, match="must be an ArithmeticProblem"):
        env.reset(options={"problem": "12*34="})


@pytest.mark.parametrize(
    ("problem", "message"),
    [
        (ArithmeticProblem(999, 999, "*"), "'999*999=' has answer 998001, more than 5 digits"),
        (
            ArithmeticProblem(1234, 5, "+"),
            "'1234+5=' is 7 characters long; operand_digits=2 allows at most 6",
        ),
        (ArithmeticProblem(-1, 2, "+"), "'-1+2=' has characters outside the vocabulary"),
    ],
)
def test_env_rejects_a_pinned_problem_it_cannot_pose_without_touching_the_episode(problem, message) -> None:
    env = ZTokenDigitsEnv(operand_digits=2)
    obs, _ = env.reset(seed=0, options={"problem": ArithmeticProblem(12, 34, "*")})
    with pytest.raises(ValueError, match=re.escape(message)):
        env.reset(options={"problem": problem})
    obs_after, _, _, _, _ = env.step({"token": 0, "digits": [0] * 5})
    np.testing.assert_array_equal(obs_after[: len("12*34=")], obs[: len("12*34=")])
    *_, info = env.step({"token": env.answer_action, "digits": [0, 0, 4, 0, 8]})
    assert info["question"] == "12*34=" and info["reward_full"] == 1.0


def test_env_rejects_bad_constructor_arguments() -> None:
    with pytest.raises(ValueError, match="max_new_tokens=.* is invalid: use an integer >= 1"):
        ZTokenDigitsEnv(max_new_tokens=0)
    with pytest.raises(ValueError, match="render_mode=.* is invalid: use one of"):
        ZTokenDigitsEnv(render_mode="human")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_vector_envs_batch_the_dict_action(mode: str) -> None:
    envs = gym.make_vec(
        "ZTokenDigits-v1", num_envs=2, vectorization_mode=mode, num_z_tokens=3, max_new_tokens=2
    )
    obs, _ = envs.reset(seed=1)
    assert obs.shape == (2, envs.single_observation_space.shape[0])
    actions = {"token": np.array([3, 0]), "digits": np.zeros((2, 5), dtype=np.int64)}
    _, _rewards, terminated, truncated, _ = envs.step(actions)
    assert terminated.tolist() == [True, False] and not truncated.any()
    _, _, terminated, truncated, _ = envs.step(
        {"token": np.array([0, 0]), "digits": np.zeros((2, 5), dtype=np.int64)}
    )
    assert truncated[1]
    envs.close()


def test_flatten_wrapper_maps_multidiscrete_to_dict() -> None:
    env = FlattenTokenDigitsAction(ZTokenDigitsEnv(num_z_tokens=4))
    assert env.action_space.nvec.tolist() == [5, 10, 10, 10, 10, 10]
    env.reset(seed=0)
    *_, terminated, _, info = env.step(np.array([4, 1, 2, 3, 4, 5]))
    assert terminated and info["digit_pred"] == [1, 2, 3, 4, 5]
    with pytest.raises(TypeError, match="needs a Dict"):
        FlattenTokenDigitsAction(gym.make("CartPole-v1"))


def test_stable_baselines3_ppo_trains_through_the_flattening_wrapper() -> None:
    torch = pytest.importorskip("torch")
    sb3 = pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = FlattenTokenDigitsAction(ZTokenDigitsEnv(num_z_tokens=4, max_new_tokens=3))
    sb3_check_env(env)
    model = sb3.PPO("MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu")
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(total_timesteps=128)
    assert model.num_timesteps >= 128
    assert any(not torch.equal(a, b) for a, b in zip(before, model.policy.parameters(), strict=True))
