"""CSRPhoneEnv: Gymnasium API conformance, determinism, arguments, rewards and rendering."""

import os
import re
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import worldgym  # noqa: F401  (registers CSRPhone-v1)
from worldgym.envs.csr_phone.env import CSRPhoneEnv
from worldgym.envs.csr_phone.evaluation import run_episode
from worldgym.envs.csr_phone.policies import ExpertPolicy, RandomPolicy, TextPolicy
from worldgym.errors import ConfigError
from worldgym.spaces import ToolCall
from worldgym.wrappers import ParseToolCall, format_tool_call


def test_check_env_unwrapped_and_wrapped():
    check_env(gym.make("CSRPhone-v1").unwrapped, skip_render_check=True)
    check_env(CSRPhoneEnv(difficulty=5, render_mode="ansi"))
    check_env(ParseToolCall(CSRPhoneEnv(difficulty=3)), skip_render_check=True)


def transcript(seed: int, policy_seed: int | None = None, wrapped: bool = False) -> str:
    env = CSRPhoneEnv(render_mode="ansi")
    policy = ExpertPolicy() if policy_seed is None else RandomPolicy(policy_seed)
    if wrapped:
        env, policy = ParseToolCall(env), TextPolicy(policy)
    run_episode(env, policy, seed=seed)
    return env.render()


@pytest.mark.parametrize("policy_seed", [None, 5])
def test_same_seed_same_transcript_including_paraphrases(policy_seed):
    for seed in range(5):
        assert transcript(seed, policy_seed) == transcript(seed, policy_seed)
    assert len({transcript(seed, policy_seed) for seed in range(5)}) == 5
    assert transcript(3, policy_seed, wrapped=True) == transcript(3, policy_seed)


def test_reset_info_and_prompt():
    env = gym.make("CSRPhone-v1", difficulty=1, split="test")
    prompt, info = env.reset(seed=0)
    assert {"tools", "difficulty", "company", "goal", "split", "turn"} <= set(info)
    assert info["difficulty"] == 1 and info["split"] == "test"
    assert f"Company: {info['company']}" in prompt and f"Goal: {info['goal']}" in prompt
    assert "Department: " in prompt
    names = [tool["function"]["name"] for tool in info["tools"]]
    assert names == ["search_company", "auth_info_form", "make_phone_call"]
    _, info = env.reset(seed=0, options={"difficulty": 4})
    assert info["difficulty"] == 4
    hidden, _ = env.reset(seed=0, options={"difficulty": 4})
    assert "Department: " not in hidden


def test_splits_draw_from_disjoint_companies():
    seen = {}
    for split in ("train", "validation", "test"):
        env = CSRPhoneEnv(split=split)
        seen[split] = {env.reset(seed=s)[1]["company"] for s in range(60)}
    assert not seen["train"] & seen["test"] and not seen["train"] & seen["validation"]
    assert not seen["validation"] & seen["test"]


@pytest.mark.parametrize("kwargs, message", [
    ({"difficulty": 6}, "difficulty=6 is invalid: use one of [1, 2, 3, 4, 5, None]"),
    ({"split": "dev"}, "split='dev' is invalid: use one of ['train', 'validation', 'test']"),
    ({"world_seed": -1}, "world_seed=-1 is invalid: use an integer >= 0"),
    ({"step_penalty": -0.1}, "step_penalty=-0.1 is invalid: use a finite number >= 0 (0 disables it)"),
    ({"render_mode": "human"}, "render_mode='human' is invalid: use one of [None, 'ansi']"),
])
def test_bad_arguments_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        CSRPhoneEnv(**kwargs)


def test_rewards_termination_and_shaping():
    env = CSRPhoneEnv(difficulty=5)
    policy = ExpertPolicy()
    result = run_episode(env, policy, seed=11)
    assert result.success and result.episode_return == 1.0
    shaped = CSRPhoneEnv(difficulty=5, prerequisite_bonus=0.1, step_penalty=0.01)
    shaped_result = run_episode(shaped, ExpertPolicy(), seed=11)
    assert shaped_result.turns == result.turns
    assert shaped_result.episode_return == pytest.approx(1.0 + 2 * 0.1 - 0.01 * result.turns)


def test_truncated_after_sixteen_calls_and_observations_keep_the_query_as_written():
    env = CSRPhoneEnv(difficulty=2)
    observation, _ = env.reset(seed=0)
    call = ToolCall("search_company", {"company": "N\u00f6rth \u2603 Bank"})
    for turn in range(1, 17):
        observation, reward, terminated, truncated, info = env.step(call)
        assert 'No company named "N\u00f6rth \u2603 Bank"' in observation and observation in env.observation_space
        assert info["turn"] == turn and info["response_type"] == "company_not_found"
        assert (reward, terminated, truncated) == (0.0, False, turn == 16)
        assert info["task_complete"] is False


_TRANSCRIPT_DIGEST = """
import hashlib
from worldgym.envs.csr_phone.env import CSRPhoneEnv
from worldgym.envs.csr_phone.evaluation import run_episode
from worldgym.envs.csr_phone.policies import ExpertPolicy, RandomPolicy
from worldgym.spaces import ToolCall
digest, env = hashlib.sha256(), CSRPhoneEnv(render_mode="ansi")
for seed in range(6):
    run_episode(env, ExpertPolicy() if seed % 2 else RandomPolicy(seed), seed=seed)
    digest.update(env.render().encode())
env.reset(seed=0)
for query in ["Norford Bnk", "stone gate air", "Quinford", "x"]:
    digest.update(env.step(ToolCall("search_company", {"company": query}))[0].encode())
print(digest.hexdigest())
"""


def test_transcripts_do_not_depend_on_the_process_hash_seed():
    root = Path(__file__).parents[3]
    digests = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(root)}
        result = subprocess.run([sys.executable, "-c", _TRANSCRIPT_DIGEST], env=env, capture_output=True,
                                text=True, check=True, cwd=root)
        digests.add(result.stdout.strip())
    assert len(digests) == 1


def test_observed_values_list_the_copyable_strings_each_observation_shows():
    from worldgym.envs.csr_phone import ExpertPolicy

    env = CSRPhoneEnv(difficulty=3)
    observation, info = env.reset(seed=4)
    assert info["observed_values"] == [info["company"]] and info["company"] in observation
    policy, seen = ExpertPolicy(), []
    policy.reset(observation, info)
    terminated = truncated = False
    while not (terminated or truncated):
        observation, _, terminated, truncated, info = env.step(policy.act(observation, info))
        assert all(value in observation for value in info["observed_values"])
        seen += info["observed_values"]
    assert any(value.startswith("1-8") for value in seen) and terminated  # phone numbers and form values


def _unicode_env(company_name: str, customer_name: str, monkeypatch) -> CSRPhoneEnv:
    """A d1 train env whose only company and customer carry the given (non-ASCII) names."""
    import dataclasses

    from worldgym.envs.csr_phone import env as env_module
    from worldgym.envs.csr_phone.profiles import CustomerProfile, generate_profile
    from worldgym.envs.csr_phone.world import World, generate_world, normalize_name, phone_digits

    base = generate_world(0)
    company = dataclasses.replace(base.by_split_tier[("train", 1)][0], name=company_name, cluster=(company_name,))
    world = World(0, {normalize_name(company_name): company},
                  {phone_digits(d.phone_number): (company, d) for d in company.departments},
                  {("train", 1): (company,)})

    def profile(rng):
        return CustomerProfile({**generate_profile(rng).values, "full_name": customer_name})

    monkeypatch.setattr(env_module, "generate_profile", profile)
    env = CSRPhoneEnv(difficulty=1, render_mode="ansi")
    env.world = world
    return env


@pytest.mark.parametrize(("company", "customer"), [("Crème Brûlée Bänk", "José Núñez-Øster"),
                                                   ("Überfluß Telekom", "Zoë Ångström"),
                                                   ("東京 Wireless", "Дмитрий Соколов")])
def test_non_ascii_names_round_trip_through_every_tool(company, customer, monkeypatch):
    env = _unicode_env(company, customer, monkeypatch)
    text_env = ParseToolCall(env)
    prompt, info = text_env.reset(seed=0)
    assert f"Company: {company}" in prompt and f"Customer: {customer}" in prompt and prompt in env.observation_space
    assert info["company"] == company and info["observed_values"] == [company]
    search = format_tool_call(ToolCall("search_company", {"company": company}))
    observation, *_, info = text_env.step(search)
    assert info["response_type"] == "search_results" and observation.splitlines()[1].startswith(f"[1] {company} (")
    department = env.task.company.by_name[env.task.department]
    assert department.phone_number in observation and company in info["observed_values"]
    form = format_tool_call(ToolCall("auth_info_form", {"fields": ["full_name"]}))
    observation, *_, info = text_env.step(form)
    assert f"full_name: {customer}" in observation and info["values"]["full_name"] == customer
    assert customer in info["observed_values"]
    auth = {field: env.task.profile.values[field] for field in department.auth_fields}
    assert auth.get("full_name", customer) == customer
    call = format_tool_call(ToolCall("make_phone_call", {"phone_number": department.phone_number,
                                                         "auth_info": {**auth, "full_name": customer}}))
    observation, reward, terminated, _, info = text_env.step(call)
    assert (reward, terminated, info["success"], info["company"]) == (1.0, True, True, company)
    assert env.render().count(company) >= 3 and customer in env.render()  # nothing became '?' on the way
    # the scripted expert, reading and copying the Unicode text through the text wrapper, succeeds too
    assert run_episode(text_env, TextPolicy(ExpertPolicy()), seed=1).success


def test_company_names_in_other_scripts_are_searched_by_their_letters(monkeypatch):
    env = _unicode_env("Crème Brûlée Bänk", "Ada", monkeypatch)
    env.reset(seed=0)
    assert env.step(ToolCall("search_company", {"company": "crème  brûlée BÄNK!"}))[4]["response_type"] == \
        "search_results"
    observation, *_, info = env.step(ToolCall("search_company", {"company": "Creme Brulee Bank"}))
    assert info["response_type"] == "company_not_found"  # other letters, another name
    observation, *_, info = env.step(ToolCall("search_company", {"company": "Crème Brulée Bänk"}))
    assert info["response_type"] == "company_not_found" and "Did you mean: Crème Brûlée Bänk?" in observation


def test_a_bool_is_not_a_difficulty():
    with pytest.raises(ConfigError, match=re.escape("difficulty=True is invalid: use one of [1, 2, 3, 4, 5, None]")):
        CSRPhoneEnv(difficulty=True)
    with pytest.raises(ValueError, match=r"options\['difficulty'\] must be one of"):
        CSRPhoneEnv().reset(seed=0, options={"difficulty": True})
