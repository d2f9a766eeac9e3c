"""RolloutCollector on gymnasium vector envs: the episodes of the single-env pool, in every autoreset mode."""

from collections.abc import Callable
from contextlib import closing

import gymnasium as gym
import pytest

import worldgym  # noqa: F401  (registers the env ids)
from worldgym.agents.grpo import GRPOConfig, GRPOTrainer
from worldgym.agents.llm.engines import HFEngine, SamplingParams
from worldgym.agents.llm.models import build_tiny_model
from worldgym.agents.llm.rollout import Episode, RolloutCollector, make_vector_env
from worldgym.wrappers import ParseToolCall

AutoresetMode = gym.vector.AutoresetMode
TURN_LIMITS = [2, 1, 3, 1]  # env-side turn limits of the 4 CSRPhone episodes: they end at different turns
CSR_SEEDS, CSR_PARAMS = [1, 2], SamplingParams(max_new_tokens=5, seed=7)
CSR_LIMITS = {"max_turns": 6, "max_episode_tokens": 100_000}


@pytest.fixture(scope="module")
def engine(tokenizer) -> HFEngine:
    """One sampling engine for the module (the model is only read, so every test sees the same weights)."""
    return HFEngine(build_tiny_model(tokenizer, seed=0), tokenizer.pad_token_id, [tokenizer.eos_token_id])


def _math_env() -> gym.Env:
    return gym.make("MathQA-v1", num_problems=20)


def _csr_env(max_turns: int) -> Callable[[], gym.Env]:
    return lambda: ParseToolCall(gym.make("CSRPhone-v1", max_turns=max_turns))


def _csr_factories() -> list[Callable[[], gym.Env]]:
    return [_csr_env(limit) for limit in TURN_LIMITS]


def _vector_env(factories: list[Callable[[], gym.Env]], mode: str, **kwargs) -> gym.vector.VectorEnv:
    if mode == "sync":
        return gym.vector.SyncVectorEnv(factories, **kwargs)
    return gym.vector.AsyncVectorEnv(factories, shared_memory=False, **kwargs)


@pytest.fixture(scope="module")
def csr_single_env_episodes(engine, tokenizer) -> list[Episode]:
    """The reference: the single-env pool, whose i-th env is built by ``_csr_factories()[i]``."""
    remaining = iter(_csr_factories())
    collector = RolloutCollector(engine, tokenizer, lambda: next(remaining)(), **CSR_LIMITS)
    return collector.collect(CSR_SEEDS, 2, CSR_PARAMS)


def test_make_vector_env_builds_collector_ready_vector_envs():
    for mode in ("sync", "async"):
        with closing(make_vector_env(_math_env, 2, mode)) as vector_env:
            assert vector_env.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
            assert vector_env.num_envs == 2
    with pytest.raises(ValueError, match="mode must be 'sync' or 'async'"):
        make_vector_env(_math_env, 2, "threads")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_math_vector_env_matches_single_envs(engine, tokenizer, mode):
    params = SamplingParams(max_new_tokens=6, seed=3)
    expected = RolloutCollector(engine, tokenizer, _math_env).collect([11, 12], 2, params, first_group_id=4)
    vector_kwargs = {}
    if mode == "async":
        vector_kwargs = {"shared_memory": False, "autoreset_mode": AutoresetMode.SAME_STEP}
    vector_env = gym.make_vec(
        "MathQA-v1", num_envs=4, vectorization_mode=mode, vector_kwargs=vector_kwargs, num_problems=20
    )
    with closing(vector_env):
        collector = RolloutCollector(engine, tokenizer, vector_env=vector_env)
        episodes = collector.collect([11, 12], 2, params, first_group_id=4)
    assert episodes == expected
    assert [e.group_id for e in episodes] == [4, 4, 5, 5]
    assert [e.env_seed for e in episodes] == [11, 11, 12, 12]
    assert all(e.terminated and len(e.turns) == 1 for e in episodes)
    assert isinstance(episodes[0].turns[0].info["success"], bool)  # numpy scalars come back as Python ones


@pytest.mark.parametrize(
    ("mode", "autoreset"),
    [
        ("sync", AutoresetMode.NEXT_STEP),
        ("sync", AutoresetMode.SAME_STEP),
        ("sync", AutoresetMode.DISABLED),
        ("async", AutoresetMode.SAME_STEP),
        ("async", AutoresetMode.DISABLED),
    ],
)
def test_multi_turn_tool_episodes_of_different_lengths_match(
    engine, tokenizer, csr_single_env_episodes, mode, autoreset
):
    with closing(_vector_env(_csr_factories(), mode, autoreset_mode=autoreset)) as vector_env:
        collector = RolloutCollector(engine, tokenizer, vector_env=vector_env, **CSR_LIMITS)
        episodes = collector.collect(CSR_SEEDS, 2, CSR_PARAMS)
        again = collector.collect(CSR_SEEDS, 2, CSR_PARAMS)  # sub-envs were autoreset, stepped past their end
    assert episodes == csr_single_env_episodes and again == csr_single_env_episodes
    assert [len(e.turns) for e in episodes] == TURN_LIMITS
    for episode in episodes:  # no row picked up a turn of the next (autoreset) episode
        assert episode.truncated and not episode.terminated
        assert [turn.info["turn"] for turn in episode.turns] == list(range(1, len(episode.turns) + 1))
    assert [e.env_seed for e in episodes] == [1, 1, 2, 2]


def test_vector_env_size_must_match_the_episodes(engine, tokenizer):
    with closing(make_vector_env(_math_env, num_envs=3)) as vector_env:
        collector = RolloutCollector(engine, tokenizer, vector_env=vector_env)
        with pytest.raises(ValueError, match=r"num_envs=3.*2 env seeds x group_size 2 = 4"):
            collector.collect([1, 2], 2, SamplingParams(max_new_tokens=4))


def test_bad_env_arguments_are_rejected(engine, tokenizer):
    with pytest.raises(ValueError, match="exactly one of make_env"):
        RolloutCollector(engine, tokenizer)
    with closing(gym.make_vec("MathQA-v1", num_envs=2, num_problems=20)) as vector_env:
        with pytest.raises(ValueError, match="exactly one of make_env"):
            RolloutCollector(engine, tokenizer, _math_env, vector_env=vector_env)
    with pytest.raises(TypeError, match="gymnasium VectorEnv"):
        RolloutCollector(engine, tokenizer, vector_env=_math_env())
    with closing(gym.vector.AsyncVectorEnv([_math_env] * 2)) as shared:  # shared memory garbles Text
        with pytest.raises(ValueError, match="shared_memory=False"):
            RolloutCollector(engine, tokenizer, vector_env=shared)
    with closing(gym.vector.AsyncVectorEnv([_math_env] * 2, shared_memory=False)) as next_step:
        with pytest.raises(ValueError, match="SAME_STEP"):  # gymnasium 1.4 keeps pending autoresets
            RolloutCollector(engine, tokenizer, vector_env=next_step)


def test_grpo_trainer_vector_env_option_gives_the_same_step(tmp_path, tokenizer):
    metrics = []
    for mode in ("none", "sync"):
        config = GRPOConfig(
            num_steps=1,
            prompts_per_step=2,
            group_size=2,
            max_new_tokens=6,
            eval_every=0,
            progress=False,
            output_dir=str(tmp_path / mode),
            vectorization_mode=mode,
        )
        model = build_tiny_model(tokenizer, seed=0)
        trainer = GRPOTrainer(config, model, tokenizer, make_env=_math_env, make_eval_env=_math_env)
        vector_env = trainer.collector.vector_env
        assert vector_env is None if mode == "none" else vector_env.num_envs == 4
        metrics.append(trainer.train_step())
        trainer.close()
        assert vector_env is None or vector_env.closed
    pooled, vectorized = metrics
    for key, value in pooled.items():
        if key.startswith(("rollout/", "loss/")):
            assert vectorized[key] == pytest.approx(value, abs=1e-6), key
    with pytest.raises(ValueError, match="vectorization_mode"):
        GRPOConfig(vectorization_mode="threads")
