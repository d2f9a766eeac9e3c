"""Every agent has one shape (worldgym.agents.base): a config dataclass and a trainer with train / evaluate(env)
/ save / load / close, and the trainers keep their promises through it. They also share one set of names: the
budget ``num_steps``, the run folder ``output_dir``, the rate ``learning_rate``, the history rows' ``step`` and the
losses' ``loss/`` prefix; the old names still work, with a DeprecationWarning."""

from __future__ import annotations

import dataclasses
import inspect
import json
import typing
import warnings
from typing import Any

import gymnasium as gym
import pytest

import worldgym  # noqa: F401  (registers the env ids)
from worldgym.agents.base import BUDGET, LEARNING_RATE, LOSS_PREFIX, RUN_FOLDER, STEP_KEY, AgentTrainer
from worldgym.agents.cartridge import CartridgeDistillConfig, CartridgeDistillTrainer
from worldgym.agents.dreamer_v3 import (
    DreamerConfig,
    DreamerTrainer,
    OptimConfig,
    ReplayConfig,
    ScheduleConfig,
    model_size,
)
from worldgym.agents.dual_lora import DualLoRAConfig, DualLoRATrainer
from worldgym.agents.grpo import GRPOConfig, GRPOTrainer
from worldgym.agents.llm import build_tiny_model, train_chat_tokenizer
from worldgym.agents.llm.rollout import make_vector_env
from worldgym.agents.ztoken_ppo import (
    ZTokenModelConfig,
    ZTokenPPOConfig,
    ZTokenPPOTrainer,
    ZTokenWarmStartConfig,
)
from worldgym.cli import parse_run
from worldgym.config import renamed_fields_of
from worldgym.config_types import config_from_dict
from worldgym.envs.longhealth import generate_panel
from worldgym.errors import CheckpointError, ConfigError

AGENTS = [(GRPOConfig, GRPOTrainer), (DualLoRAConfig, DualLoRATrainer), (ZTokenPPOConfig, ZTokenPPOTrainer),
          (DreamerConfig, DreamerTrainer), (CartridgeDistillConfig, CartridgeDistillTrainer)]
CONFIGS = [config for config, _ in AGENTS]

# every renamed field: class -> {old name: contract name}; each old name works for one release, with a warning
RENAMED = {
    DreamerConfig: {"total_steps": "num_steps", "run_dir": "output_dir"},
    OptimConfig: {"world_lr": "world_learning_rate", "actor_lr": "actor_learning_rate",
                  "critic_lr": "critic_learning_rate"},
    ZTokenPPOConfig: {"num_rollouts": "num_steps", "lr": "learning_rate"},
    ZTokenWarmStartConfig: {"lr": "learning_rate"},
}
OLD_NAMES = [(cls, old, new) for cls, names in RENAMED.items() for old, new in names.items()]
NEW_VALUES = {"num_steps": 7, "output_dir": "runs/renamed", "learning_rate": 0.25, "world_learning_rate": 0.25,
              "actor_learning_rate": 0.25, "critic_learning_rate": 0.25}
NOT_CONTRACT_NAMES = {"total_steps", "num_rollouts", "run_dir", "lr"}


@pytest.mark.parametrize("config_class, trainer_class", AGENTS, ids=lambda c: c.__name__)
def test_every_agent_has_a_config_dataclass_and_the_trainer_methods(config_class, trainer_class):
    assert dataclasses.is_dataclass(config_class)
    first = list(inspect.signature(trainer_class.__init__).parameters)[1]
    assert first == "config"
    for method in ("train", "evaluate", "save", "load", "close"):
        assert callable(getattr(trainer_class, method, None)), f"{trainer_class.__name__}.{method}"
    env = inspect.signature(trainer_class.evaluate).parameters.get("env")
    assert env is not None and env.default is None, f"{trainer_class.__name__}.evaluate(env=None)"


def _nested_fields(cls: type, prefix: str = "") -> dict[str, Any]:
    """``{"optim.actor_learning_rate": annotation, ...}``: the fields of config ``cls`` and of its nested configs."""
    hints, fields = typing.get_type_hints(cls), {}
    for field in dataclasses.fields(cls):
        fields[prefix + field.name] = hints[field.name]
        if dataclasses.is_dataclass(hints[field.name]):
            fields |= _nested_fields(hints[field.name], f"{prefix}{field.name}.")
    return fields


@pytest.mark.parametrize("config_class", CONFIGS, ids=lambda c: c.__name__)
def test_every_config_has_the_contract_names(config_class):
    fields = _nested_fields(config_class)
    assert fields[BUDGET] is int and fields[RUN_FOLDER] is str
    rates = [name for name in fields if name.rsplit(".", 1)[-1].endswith(LEARNING_RATE)]
    assert LEARNING_RATE in fields or rates, f"{config_class.__name__} names no learning rate"
    for name, annotation in fields.items():  # no rate named "..._lr" (a switch such as anneal_lr is not a rate)
        short = name.rsplit(".", 1)[-1]
        rate = short.endswith("_lr") and annotation is not bool
        assert short not in NOT_CONTRACT_NAMES and not rate, f"{config_class.__name__}.{name}"
    if LEARNING_RATE not in fields:  # Dreamer: one rate per network, all in its optimiser settings
        assert rates == ["optim.world_learning_rate", "optim.actor_learning_rate", "optim.critic_learning_rate"]


@pytest.mark.parametrize("cls", [*CONFIGS, OptimConfig, ZTokenWarmStartConfig], ids=lambda c: c.__name__)
def test_the_renamed_fields_are_these(cls):
    assert renamed_fields_of(cls) == RENAMED.get(cls, {})


@pytest.mark.parametrize("cls, old, new", OLD_NAMES, ids=lambda v: getattr(v, "__name__", v))
def test_an_old_name_still_works_with_a_deprecation_warning_naming_the_new_one(cls, old, new):
    value = NEW_VALUES[new]
    with pytest.warns(DeprecationWarning, match=f"{cls.__name__}.{old} is deprecated: use {cls.__name__}.{new}"):
        config = cls(**{old: value})
    assert getattr(config, new) == value and old not in dataclasses.asdict(config)
    with pytest.warns(DeprecationWarning, match=f"run.yaml: {cls.__name__}.{old} is deprecated"):
        from_file = config_from_dict(cls(), {old: value}, source="run.yaml")  # a settings file, --resume
    assert from_file == config
    with pytest.warns(DeprecationWarning, match=f"use {cls.__name__}.{new}"):
        assert getattr(config, old) == value  # the attribute too
    with pytest.raises(ConfigError, match=f"got both '{old}' and '{new}'"):
        cls(**{old: value, new: value})


def test_old_names_load_from_checkpoints_and_command_lines():
    saved = DreamerConfig().to_dict()  # a config.json written before the rename
    saved["total_steps"], saved["run_dir"] = saved.pop("num_steps"), saved.pop("output_dir")
    saved["optim"]["actor_lr"] = saved["optim"].pop("actor_learning_rate")
    with pytest.warns(DeprecationWarning):
        assert DreamerConfig.from_dict(json.loads(json.dumps(saved))) == DreamerConfig()

    @dataclasses.dataclass
    class Run:
        dreamer: DreamerConfig
        ppo: ZTokenPPOConfig

    presets = {"a": ("A run.", Run(DreamerConfig(), ZTokenPPOConfig()))}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = parse_run(presets, ["--dreamer.total-steps", "64", "--dreamer.run_dir=x", "--dreamer.optim.actor-lr",
                                  "0.5", "--ppo.num-rollouts", "3", "--ppo.lr", "0.1"]).run
    renamed = [("--dreamer.total-steps", "--dreamer.num-steps"), ("--dreamer.run_dir", "--dreamer.output-dir"),
               ("--dreamer.optim.actor-lr", "--dreamer.optim.actor-learning-rate"),
               ("--ppo.num-rollouts", "--ppo.num-steps"), ("--ppo.lr", "--ppo.learning-rate")]
    assert [(w.category, str(w.message)) for w in caught] == [
        (DeprecationWarning, f"the flag {old} is deprecated: use {new}") for old, new in renamed]
    assert (run.dreamer.num_steps, run.dreamer.output_dir, run.dreamer.optim.actor_learning_rate) == (64, "x", 0.5)
    assert (run.ppo.num_steps, run.ppo.learning_rate) == (3, 0.1)


def _check_history_names(history: list[dict[str, Any]], steps: list[int]) -> None:
    """Every row has the step key, counting the budget; every loss is logged under ``loss/``."""
    assert [row[STEP_KEY] for row in history] == steps
    keys = {key for row in history for key in row}
    assert any(key.startswith(LOSS_PREFIX) for key in keys), sorted(keys)
    for key in keys:
        last = key.rsplit("/", 1)[-1]
        is_loss = last == "loss" or last.endswith("_loss") or key.split("/")[0] in ("losses", "train")
        assert not is_loss or key.startswith(LOSS_PREFIX), key


def _dreamer_config(output_dir, num_steps: int) -> DreamerConfig:
    return DreamerConfig(
        num_steps=num_steps, model=model_size("tiny"), progress=False, log_every=16, eval_episodes=2,
        replay=ReplayConfig(capacity=256, seq_len=8, batch_size=2, min_ready_steps=8, safety_margin=8),
        schedule=ScheduleConfig(replay_ratio=0.1, learning_starts=16), output_dir=str(output_dir))


def test_dreamer_trainer_trains_evaluates_saves_and_loads(tmp_path):
    trainer = DreamerTrainer(_dreamer_config(tmp_path / "a", 32))
    assert isinstance(trainer, AgentTrainer)
    history = trainer.train()
    _check_history_names(history, [16, 32])  # policy steps
    assert [row["policy_step"] for row in history] == [16, 32]
    own = trainer.evaluate()
    given = trainer.evaluate(gym.make_vec("CartPole-v1", num_envs=1, vectorization_mode="sync"))
    assert own == given and own["eval/episodes"] == 2.0  # same seeds, same env: the same episodes
    checkpoint = trainer.save(tmp_path / "checkpoint")
    trainer.close()

    longer = DreamerTrainer(_dreamer_config(tmp_path / "a", 48))
    resumed = longer.resume_latest()  # the run's own end-of-run checkpoint
    assert resumed.parent == tmp_path / "a" and resumed.name.startswith("checkpoint-")
    assert [row["step"] for row in longer.train()] == [16, 32, 48]  # continued, nothing repeated
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
    _check_history_names(trainer.train(), [1])
    trainer.close()


def test_dual_lora_history_uses_the_contract_names(tmp_path):
    config = DualLoRAConfig(env_id="CSRPhone-v1", env_kwargs={"difficulty": 1}, max_turns=2, num_steps=1,
                            prompts_per_step=2, group_size=2, max_new_tokens=8, minibatch_size=4, eval_every=0,
                            eval_episodes=0, progress=False, output_dir=str(tmp_path))
    trainer = DualLoRATrainer(config)
    _check_history_names(trainer.train(), [1])
    trainer.close()


def test_ztoken_ppo_history_uses_the_contract_names(tmp_path):
    config = ZTokenPPOConfig(env_kwargs={"num_z_tokens": 4, "max_new_tokens": 4, "operand_digits": 1},
                             model=ZTokenModelConfig(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
                                                     head_dim=16, intermediate_size=64),
                             num_envs=4, episodes_per_rollout=8, num_steps=2, eval_episodes=4, progress=False,
                             output_dir=str(tmp_path))
    trainer = ZTokenPPOTrainer(config)
    _check_history_names(trainer.train(), [0, 1, 2])  # the warm-start evaluation, then one row per rollout
    trainer.close()


def test_cartridge_history_uses_the_contract_names(tmp_path):
    panel = generate_panel(3, 0)
    corpus = [text for patient in panel.values() for text in patient["texts"].values()]
    tokenizer = train_chat_tokenizer(corpus, vocab_size=600)
    config = CartridgeDistillConfig(env_kwargs={"num_patients": 3, "task": 1}, num_tokens=8, num_steps=2,
                                    questions_per_step=1, samples_per_question=2, max_new_tokens=4, eval_every=0,
                                    output_dir=str(tmp_path), progress=False)
    trainer = CartridgeDistillTrainer(config, model=build_tiny_model(tokenizer, seed=0), tokenizer=tokenizer)
    _check_history_names(trainer.train(), [0, 1, 2])  # the evaluation before training, then one row per step
    trainer.close()

