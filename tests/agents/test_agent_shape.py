"""Every agent has one shape (worldgym.agents.base): a config dataclass and a trainer with train / evaluate(env)
/ save / load / close, and the trainers keep their promises through it."""

from __future__ import annotations

import dataclasses
import inspect

import gymnasium as gym
import pytest

import worldgym  # noqa: F401  (registers the env ids)
from worldgym.agents.base import AgentTrainer
from worldgym.agents.cartridge import CartridgeDistillConfig, CartridgeDistillTrainer
from worldgym.agents.dreamer_v3 import DreamerConfig, DreamerTrainer, ReplayConfig, ScheduleConfig, model_size
from worldgym.agents.dual_lora import DualLoRAConfig, DualLoRATrainer
from worldgym.agents.grpo import GRPOConfig, GRPOTrainer
from worldgym.agents.llm.rollout import make_vector_env
from worldgym.agents.ztoken_ppo import ZTokenPPOConfig, ZTokenPPOTrainer
from worldgym.errors import CheckpointError

AGENTS = [(GRPOConfig, GRPOTrainer), (DualLoRAConfig, DualLoRATrainer), (ZTokenPPOConfig, ZTokenPPOTrainer),
          (DreamerConfig, DreamerTrainer), (CartridgeDistillConfig, CartridgeDistillTrainer)]


@pytest.mark.parametrize("config_class, trainer_class", AGENTS, ids=lambda c: c.__name__)
def test_every_agent_has_a_config_dataclass_and_the_trainer_methods(config_class, trainer_class):
    assert dataclasses.is_dataclass(config_class)
    first = list(inspect.signature(trainer_class.__init__).parameters)[1]
    assert first == "config"
    for method in ("train", "evaluate", "save", "load", "close"):
        assert callable(getattr(trainer_class, method, None)), f"{trainer_class.__name__}.{method}"
    env = inspect.signature(trainer_class.evaluate).parameters.get("env")
    assert env is not None and env.default is None, f"{trainer_class.__name__}.evaluate(env=None)"


def _dreamer_config(run_dir, total_steps: int) -> DreamerConfig:
    return DreamerConfig(
        total_steps=total_steps, model=model_size("tiny"), progress=False, log_every=16, eval_episodes=2,
        replay=ReplayConfig(capacity=256, seq_len=8, batch_size=2, min_ready_steps=8, safety_margin=8),
        schedule=ScheduleConfig(replay_ratio=0.1, learning_starts=16), run_dir=str(run_dir))


def test_dreamer_trainer_trains_evaluates_saves_and_loads(tmp_path):
    trainer = DreamerTrainer(_dreamer_config(tmp_path / "a", 32))
    assert isinstance(trainer, AgentTrainer)
    history = trainer.train()
    assert [row["policy_step"] for row in history] == [16, 32]
    own = trainer.evaluate()
    given = trainer.evaluate(gym.make_vec("CartPole-v1", num_envs=1, vectorization_mode="sync"))
    assert own == given and own["eval/episodes"] == 2.0  # same seeds, same env: the same episodes
    checkpoint = trainer.save(tmp_path / "checkpoint")
    trainer.close()

    longer = DreamerTrainer(_dreamer_config(tmp_path / "a", 48))
    resumed = longer.resume_latest()  # the run's own end-of-run checkpoint
    assert resumed.parent == tmp_path / "a" and resumed.name.startswith("checkpoint-")
    assert [row["policy_step"] for row in longer.train()] == [16, 32, 48]  # continued, nothing repeated
    longer.close()
    other = DreamerTrainer(dataclasses.replace(_dreamer_config(tmp_path / "b", 32), num_envs=2,
                                               checkpoint_every=0))
    with pytest.raises(CheckpointError, match="ring expects"):
        other.load(checkpoint)
    other.close()


def test_grpo_trainer_evaluates_on_a_given_env_or_vector_env(tmp_path):
    config = GRPOConfig(num_steps=1, prompts_per_step=2, group_size=2, max_new_tokens=8, eval_every=0,
                        eval_episodes=2, progress=False, output_dir=str(tmp_path))
    trainer = GRPOTrainer(config)
    assert isinstance(trainer, AgentTrainer)
    default = trainer.evaluate()
    single = trainer.evaluate(gym.make("MathQA-v1", split="test"))
    vector = trainer.evaluate(make_vector_env(lambda: gym.make("MathQA-v1", split="test"), 2, "sync"))
    assert default == single == vector  # the eval env is MathQA's test split: same seeds, same episodes
    train_split = trainer.evaluate(gym.make("MathQA-v1", split="train"), num_episodes=2)
    assert set(train_split) == set(default)
    trainer.close()

