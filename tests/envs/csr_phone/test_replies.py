"""classify_reply reads every reply the env speaks back to its response type."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import worldgym  # noqa: F401
from worldgym.envs.csr_phone import ExpertPolicy, RandomPolicy, classify_reply
from worldgym.envs.csr_phone.phrases import GREETINGS, PARAPHRASES, RESPONSE_TYPES, render_reply

SLOTS = {"fields": "account number and date of birth", "target": "Billing Support", "number": "555-0199",
         "reason": "verified your identity", "next": "Account Services", "router": "Customer Care",
         "prerequisite": "Fraud Prevention", "goal": "cancel the premium plan on your account"}


@pytest.mark.parametrize("response_type", RESPONSE_TYPES)
def test_every_paraphrase_with_every_greeting(response_type):
    for template in PARAPHRASES[response_type]:
        body = template.format(**SLOTS)
        greetings = [""] if response_type == "invalid_number" else GREETINGS
        for greeting in greetings:
            text = greeting.format(company="Northwind Mobile", department="Billing", agent="Dana") + body
            assert classify_reply(text) == response_type, text


def test_rendered_replies_round_trip():
    rng = np.random.default_rng(0)
    for _ in range(400):
        response_type = RESPONSE_TYPES[int(rng.integers(len(RESPONSE_TYPES)))]
        text = render_reply(rng, response_type, "Zenith Bank", "Card Services", **SLOTS)
        assert classify_reply(text) == response_type


def _play(env, policy, seed):
    observation, info = env.reset(seed=seed)
    policy.reset(observation, info)
    replies = []
    for _ in range(16):
        observation, _, terminated, truncated, info = env.step(policy.act(observation, info))
        if info.get("tool") == "make_phone_call":
            replies.append((observation, info["response_type"]))
        if terminated or truncated:
            break
    return replies


def test_env_replies_classified_exactly():
    seen = set()
    for difficulty in (1, 3, 5):
        env = gym.make("CSRPhone-v1", difficulty=difficulty)
        for seed in range(12):
            for policy in (ExpertPolicy(), RandomPolicy(seed=seed)):
                for text, response_type in _play(env, policy, seed):
                    assert classify_reply(text) == response_type, text
                    seen.add(response_type)
    assert {"task_complete", "invalid_number", "auth_request"} <= seen


@pytest.mark.parametrize("text", ["", "Hello?", "Great news, I was able to", "I'll need your  to pull up",
                                  "Their number is 555.\nThat request is handled by X. Their number is 1."])
def test_text_off_the_templates_is_none(text):
    assert classify_reply(text) is None


def test_non_text_is_a_type_error():
    with pytest.raises(TypeError, match="needs a str"):
        classify_reply(None)  # type: ignore[arg-type]
