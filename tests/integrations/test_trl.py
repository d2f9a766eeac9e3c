"""``worldgym.integrations.trl``: the generated env class plays a CSR episode through its tool methods, its
schemas survive TRL's (transformers') signature reading, task_dataset rows replay their tasks, and TRL's own
``GRPOTrainer`` trains 2 steps through ``environment_factory`` with a tiny model on CPU."""

from __future__ import annotations

import gymnasium as gym
import pytest

import worldgym  # noqa: F401  (registers the env ids)
from worldgym.envs.csr_phone.env import CSR_TOOLS
from worldgym.envs.csr_phone.policies import ExpertPolicy
from worldgym.integrations.trl import EPISODE_OVER, environment_factory, task_dataset
from worldgym.spaces import ToolCall


def test_the_expert_completes_a_task_through_the_tool_methods():
    env = environment_factory("CSRPhone-v1", difficulty=2)()
    local = gym.make("CSRPhone-v1", difficulty=2)
    prompt, info = local.reset(seed=11)
    assert env.reset(seed=11) == prompt
    expert = ExpertPolicy()
    expert.reset(prompt, info)
    observation, terminated = prompt, False
    while not terminated:
        call = expert.act(observation, info)
        observation, _, terminated, _, info = local.step(call)
        assert getattr(env, call.name)(**call.arguments) == observation
    assert env.get_reward() == 1.0 and env.success
    assert env.search_company(company="Acme") == EPISODE_OVER
    env.reset(seed=11)
    assert (env.get_reward(), env.success) == (0.0, False)
    local.reset(seed=11)
    expected = local.step(ToolCall("search_company", {"company": 5}))  # the env's error observation
    assert env.search_company(company=5) == expected[0] and expected[4]["response_type"] == "invalid_call"


def test_tool_methods_carry_the_schema_trl_reads():
    pytest.importorskip("transformers")
    from transformers.utils import get_json_schema

    env = environment_factory("CSRPhone-v1")()
    for tool in CSR_TOOLS:
        schema = get_json_schema(getattr(env, tool.name))["function"]
        assert schema["name"] == tool.name and schema["description"] == tool.description
        assert schema["parameters"]["required"] == tool.parameters["required"]
        assert set(schema["parameters"]["properties"]) == set(tool.parameters["properties"])
    assert get_json_schema(env.auth_info_form)["function"]["parameters"]["properties"]["fields"]["items"] == {
        "type": "string"}
    math = environment_factory("MathQA-v1", num_problems=5)()  # a text env answers through one tool
    assert get_json_schema(math.answer)["function"]["parameters"]["required"] == ["text"]
    with pytest.raises(TypeError, match="text or tool-call env"):
        environment_factory("ZTokenDigits-v1")


def test_task_dataset_rows_replay_their_tasks():
    pytest.importorskip("datasets")
    rows = task_dataset("CSRPhone-v1", 3, seed=5, split="validation", difficulty=1)
    env = environment_factory("CSRPhone-v1", split="validation", difficulty=1)()
    for index, row in enumerate(rows):
        assert row["seed"] == 5 + index
        assert env.reset(**row) is None  # the row's prompt already holds the task
        assert env._env.unwrapped.task is not None
        assert row["prompt"][-1]["content"] == gym.make("CSRPhone-v1", split="validation", difficulty=1).reset(
            seed=5 + index)[0]
    placeholder = {"prompt": [{"role": "user", "content": ""}]}  # TRL's rows when there is no dataset
    assert env.reset(**placeholder).startswith("You are a phone assistant")
    math_rows = task_dataset("MathQA-v1", 2, num_problems=5)
    assert [m["role"] for m in math_rows[0]["prompt"]] == ["system", "user"]


def test_trl_grpo_trainer_trains_two_steps_through_environment_factory(tmp_path):
    pytest.importorskip("trl")
    import torch
    from transformers import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen3_chat_template

    from worldgym.agents.llm import build_tiny_model, train_chat_tokenizer
    from worldgym.agents.llm.tokenizer import env_text_corpus

    tokenizer = train_chat_tokenizer(env_text_corpus(lambda: gym.make("CSRPhone-v1"), num_resets=20),
                                     vocab_size=1200)
    tokenizer.chat_template = qwen3_chat_template  # a template TRL parses tool calls of
    model = build_tiny_model(tokenizer, seed=0)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    config = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, gradient_checkpointing=False,
                        per_device_train_batch_size=4, num_generations=2, max_completion_length=8, max_steps=2,
                        max_tool_calling_iterations=2, learning_rate=1e-3, logging_steps=1, report_to="none",
                        save_strategy="no", disable_tqdm=True, seed=0, beta=0.0)

    def length_reward(completions, **kwargs):  # varies within a group, so a random model's update is not zero
        return [float(len(str(completion))) % 3 for completion in completions]

    trainer = GRPOTrainer(model=model, args=config, processing_class=tokenizer, reward_funcs=[length_reward],
                          train_dataset=task_dataset("CSRPhone-v1", 4, difficulty=1),
                          environment_factory=environment_factory("CSRPhone-v1", difficulty=1))
    trainer.remove_callback(PrinterCallback)
    with torch.random.fork_rng():
        trainer.train()
    assert trainer.state.global_step == 2
    assert sorted(f.__name__ for f in trainer._env_tools[None]) == sorted(t.name for t in CSR_TOOLS)
    logged = [entry for entry in trainer.state.log_history if "reward" in entry]
    assert len(logged) == 2 and all("rewards/CSRPhone_v1/mean" in entry for entry in logged)
    assert any(not torch.equal(before[name], p) for name, p in trainer.model.named_parameters())
