"""classify_reply reads every reply the env speaks back to its response type; nearest_reply_type reads loose
paraphrases of them too."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import worldgym  # noqa: F401
from worldgym.envs.csr_phone import ExpertPolicy, RandomPolicy, classify_reply, nearest_reply_type
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
        assert nearest_reply_type(text) == response_type


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


def _drop_words(text: str, every: int) -> str:
    """``text`` with every ``every``-th word left out."""
    return " ".join(word for index, word in enumerate(text.split()) if index % every != every - 1)


@pytest.mark.parametrize("response_type", RESPONSE_TYPES)
def test_nearest_reads_a_paraphrase_with_words_missing(response_type):
    for template in PARAPHRASES[response_type]:
        text = _drop_words(template.format(**SLOTS), every=6)  # about 1 word in 6 gone
        assert nearest_reply_type(text) == response_type, text
        assert nearest_reply_type(text, min_coverage=1.0) in (None, response_type)  # every fixed word needed


def test_nearest_needs_the_coverage_asked_for():
    text = "Great news, I was able to cancel the plan. Is there anything I can do?"  # "else" left out
    assert classify_reply(text) is None
    assert nearest_reply_type(text) == "task_complete" and nearest_reply_type(text, min_coverage=1.0) is None


OFF_TEMPLATE = "Thank you for calling, I can't access your account without your billing number."


@pytest.mark.parametrize("text", ["", "Hello?", "||||||", OFF_TEMPLATE, "Great news, I was able to"])
def test_nearest_leaves_text_far_from_every_template_unread(text):
    assert nearest_reply_type(text) is None


def test_nearest_leaves_a_tie_between_types_unread():
    complete, failed = PARAPHRASES["task_complete"][1], PARAPHRASES["auth_failed"][1]
    text = complete.format(**SLOTS) + "\n" + failed  # on two lines: no slot takes the other reply in
    assert classify_reply(text) is None and nearest_reply_type(text) is None  # both covered whole


def test_nearest_rejects_a_coverage_outside_0_1():
    with pytest.raises(ValueError, match="min_coverage"):
        nearest_reply_type("Hello?", min_coverage=0.0)
