"""The per-env registry of experts and presets: a toy env registered here gets a warm start and a GRPO preset
through the generic stack; unknown ids, presets and options fail naming what is registered; the moved names
still import (with a deprecation warning); the registered experts play as the ones they replaced."""

from __future__ import annotations

import string
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import worldgym  # noqa: F401  (registers the env ids)
from worldgym.agents.grpo import GRPOConfig, grpo_preset, grpo_presets
from worldgym.agents.llm.engines import HFEngine
from worldgym.agents.llm.warm_start import (
    WarmStartConfig,
    demonstrations,
    expert_chats,
    is_cached,
    load_or_train_warm_start,
)
from worldgym.env_training import (
    Untrained,
    current_env_id,
    default_preset,
    expert_spec,
    make_expert,
    presets,
    register_expert,
    register_presets,
    warm_start_env_id,
)
from worldgym.errors import ConfigError

TOY_ID = "ToyEcho-v0"


class ToyEchoEnv(gym.Env[str, str]):
    """Asks for a word (one of five per difficulty level); reward 1 for repeating it."""

    observation_space = gym.spaces.Text(64, min_length=0, charset=string.ascii_letters + string.digits + " ")
    action_space = gym.spaces.Text(64, min_length=0, charset=string.ascii_letters + string.digits + " ")

    def __init__(self, split: str = "train", difficulty: int = 1) -> None:
        self.words = [f"{split}{difficulty}w{i}" for i in range(5)]
        self.word = self.words[0]

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self.word = self.words[int(self.np_random.integers(len(self.words)))]
        return f"Say {self.word}", {"word": self.word}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        success = action == self.word
        return "", float(success), True, False, {"success": success}


class ToyExpert:
    """Repeats the word; with probability ``mistake_rate`` says something else first (not trained on)."""

    def __init__(self, seed: int = 0, mistake_rate: float = 0.0) -> None:
        self.rng, self.mistake_rate = np.random.default_rng(seed), mistake_rate

    def __call__(self, env: gym.Env, observation: str, info: dict[str, Any]) -> str:
        if self.rng.random() < self.mistake_rate:
            return Untrained("hmm")
        return info["word"]


@pytest.fixture(scope="module")
def toy_env() -> str:
    """The toy env, registered with Gymnasium and with the registry as a third-party env would be."""
    if TOY_ID not in gym.registry:
        gym.register(TOY_ID, entry_point=ToyEchoEnv)
    register_expert(TOY_ID, ToyExpert, options=("seed", "mistake_rate"), difficulties=(1, 2))
    register_presets(TOY_ID, {"tiny": {
        "warm_start": {"model": "tiny", "env_id": TOY_ID, "episodes_per_difficulty": 6, "epochs": 1},
        "trainer": {"env_id": TOY_ID, "env_kwargs": {"split": "train"}, "eval_env_kwargs": {"split": "test"},
                    "max_turns": 1, "max_new_tokens": 8, "prompts_per_step": 2, "group_size": 2,
                    "minibatch_size": 4},
        "engine": {"batch_size": 4},
    }})
    return TOY_ID


def test_a_registered_toy_env_gets_its_expert_chats_and_warm_start(toy_env, tmp_path):
    config = WarmStartConfig(model="tiny", env_id=toy_env, episodes_per_difficulty=6, epochs=1, batch_size=4)
    assert config.difficulties == (1, 2)  # the levels the env's expert registered
    chats = expert_chats(config)
    assert len(chats) == 12 and all(chat.reward == 1.0 for chat in chats)
    assert {chat.messages[0]["content"][4:6] for chat in chats} == {"tr"}  # the train split only
    warm = load_or_train_warm_start(config, cache_dir=tmp_path, progress=False, log=lambda _: None)
    assert warm.path == tmp_path / config.key() and config.key().startswith(f"tiny-{toy_env}-")
    assert is_cached(config, tmp_path)


def test_a_registered_expert_option_reaches_the_expert(toy_env):
    noisy = WarmStartConfig(model="tiny", env_id=toy_env, difficulties=(1,), episodes_per_difficulty=20,
                            mistake_rate=0.5)
    assert any(chat.messages[-1].get("train") is False for chat in expert_chats(noisy))


def test_a_registered_toy_env_gets_its_grpo_preset(toy_env):
    preset = grpo_preset(toy_env, "tiny")
    assert preset.warm_start == WarmStartConfig(**presets(toy_env)["tiny"]["warm_start"])
    config = preset.grpo_config(2, num_steps=3)
    assert isinstance(config, GRPOConfig) and config.env_id == toy_env and config.num_steps == 3
    assert config.env_kwargs == {"split": "train", "difficulty": 2} and config.finetune == "full"
    assert (preset.max_new_tokens, preset.engine_batch_size) == (8, 4)
    assert default_preset(toy_env, "tiny") == default_preset(toy_env, "another-model") == "tiny"
    assert list(grpo_presets(toy_env)) == ["tiny"]


def test_a_preset_builds_its_engine():
    from worldgym.agents.llm.loading import tiny_chat_model

    tiny = tiny_chat_model(["Call the company at 1-800-555-0100."] * 20, vocab_size=300)
    engine = grpo_preset("CSRPhone-v1", "tiny").engine(tiny.model, tiny.tokenizer)
    assert isinstance(engine, HFEngine) and engine.batch_size == 64


def test_unknown_env_ids_presets_and_options_fail_naming_what_is_registered():
    with pytest.raises(ConfigError, match=r"env_id='Nope-v0' is invalid: no expert .*'CSRPhone-v1'.*'MathQA-v1'"):
        expert_spec("Nope-v0")
    with pytest.raises(ConfigError, match=r"env_id='MathQA-v1' is invalid: no presets .*'CSRPhone-v1'"):
        grpo_presets("MathQA-v1")
    with pytest.raises(ConfigError, match=r"preset='huge' is invalid: CSRPhone-v1 has presets \['tiny', 'smollm2"):
        grpo_preset("CSRPhone-v1", "huge")
    with pytest.raises(ConfigError, match=r"expert options \['noise'\] are invalid: CSRPhone-v1's expert takes"):
        make_expert("CSRPhone-v1", noise=0.1)
    with pytest.raises(ConfigError, match="no expert is registered"):
        expert_chats(WarmStartConfig(model="tiny", env_id="GameBoy-v0", difficulties=()))
    with pytest.raises(ConfigError, match="acts on batched envs"):
        demonstrations("ZTokenDigits-v1", {}, range(2))


def test_envs_register_their_experts_and_presets():
    assert expert_spec("CSRPhone-v1").difficulties == (1, 2, 3) and expert_spec("ZTokenDigits-v1").kind == "vector"
    assert default_preset("CSRPhone-v1", "tiny") == "tiny"
    assert default_preset("CSRPhone-v1", "HuggingFaceTB/SmolLM2-360M-Instruct") == "smollm2-135m"
    assert warm_start_env_id("CSRPhone-v1") == "CSRPhone-v0" and current_env_id("CSRPhone-v0") == "CSRPhone-v1"
    assert warm_start_env_id("LongHealthQA-v0") == "LongHealthQA-v0"


def test_csr_presets_name_the_agents_constants():
    from worldgym.agents.llm.allocator import DEFAULT_MMAP_THRESHOLD
    from worldgym.agents.llm.tokenizer import WORLD_MODEL_TOKENS
    from worldgym.envs.csr_phone.presets import CPU_MMAP_THRESHOLD, WORLD_MODEL_MARKERS

    assert (WORLD_MODEL_MARKERS, CPU_MMAP_THRESHOLD) == (WORLD_MODEL_TOKENS, DEFAULT_MMAP_THRESHOLD)


def test_moved_names_still_import_with_a_deprecation_warning():
    from worldgym.envs.csr_phone import CSRTextExpert
    from worldgym.envs.longhealth import MultipleChoiceExpert

    with pytest.warns(DeprecationWarning, match="grpo_presets"):
        from worldgym.agents.grpo import CSR_PRESETS
    assert CSR_PRESETS["tiny"] == grpo_preset("CSRPhone-v1", "tiny")
    with pytest.warns(DeprecationWarning, match="moved to worldgym.envs.csr_phone"):
        from worldgym.agents.llm.warm_start import CSRTextExpert as moved
    assert moved is CSRTextExpert
    with pytest.warns(DeprecationWarning, match="moved to worldgym.envs.longhealth"):
        from worldgym.agents.llm.warm_start import MultipleChoiceExpert as moved_too
    assert moved_too is MultipleChoiceExpert


def _old_math_expert(seed: int, noise: float):
    """examples/train_grpo.py's MathQA expert before envs registered theirs: the reference it must still match."""
    rng = np.random.default_rng(seed)

    def math_expert(env: gym.Env, observation: str, info: dict) -> str:
        problem = env.unwrapped.problem(info["index"])
        if rng.random() < noise:
            wrong = int(problem.answer) + int(rng.choice([-2, -1, 1, 2]))
            return problem.solution.rsplit("####", 1)[0] + f"#### {wrong}"
        return problem.solution

    return math_expert


def test_the_mathqa_expert_gives_the_demonstrations_of_the_one_it_replaced():
    kwargs = {"difficulty": 1, "num_problems": 50}
    new = demonstrations("MathQA-v1", kwargs, range(40), max_turns=1, seed=3, noise=0.3)
    old = demonstrations("MathQA-v1", kwargs, range(40), expert=_old_math_expert(3, 0.3), max_turns=1)
    assert [chat.messages for chat in new] == [chat.messages for chat in old]
    assert 0 < sum(chat.reward for chat in new) < 40  # some answers corrupted, most kept


def test_the_debug_cli_takes_the_preset_from_the_env_or_the_flag():
    from worldgym.agents.dual_lora import debug
    from worldgym.agents.dual_lora.presets import dual_lora_config

    tiny = dual_lora_config("tiny", 1)
    other = dual_lora_config("smollm2-135m", 1, model="HuggingFaceTB/SmolLM2-360M-Instruct")
    assert debug.Base().preset_of(tiny).name == "tiny" and debug.Base().preset_of(other).name == "smollm2-135m"
    assert debug.Base(preset="tiny").preset_of(other).name == "tiny"
    with pytest.raises(ConfigError, match="preset='huge' is invalid"):
        debug.Base(preset="huge").preset_of(tiny)
