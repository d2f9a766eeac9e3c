"""Tests for worldgym.text: a Text space of any Unicode string, and the documented changes to observation text."""

import pickle

import gymnasium as gym
import pytest

import worldgym  # noqa: F401  (registers the env ids)
from worldgym.text import SAMPLE_CHARSET, TRUNCATION_MARKER, UnicodeText, fit_observation_text

REAL_TEXT = "Janet’s ducks: 16 €, £3, 5¢, café, niño, ¾ cup, 2³ =\u00a08\u2028中文 🙂 \x00\x7f"


def test_unicode_text_admits_any_string_up_to_its_length():
    space = UnicodeText(len(REAL_TEXT), min_length=1)
    assert REAL_TEXT in space and "\ud800" in space  # membership never depends on the characters
    assert "" not in space and REAL_TEXT + "x" not in space
    assert all(x not in space for x in (None, 3, b"abc", ["a"]))
    assert gym.spaces.Text(64).contains("Janet’s") is False  # what Gymnasium's ASCII Text space would say


def test_unicode_text_samples_from_its_documented_charset_and_pickles():
    space = UnicodeText(12, seed=0)
    samples = [space.sample() for _ in range(200)]
    assert all(s in space and set(s) <= set(SAMPLE_CHARSET) for s in samples)
    assert any(not s.isascii() for s in samples)  # non-ASCII characters are drawn too
    again = pickle.loads(pickle.dumps(space))
    assert again == space and repr(again) == "UnicodeText(0, 12)" and again != UnicodeText(13)


def test_fit_observation_text_keeps_every_character_and_reports_its_changes():
    assert fit_observation_text(REAL_TEXT, 1000) == (REAL_TEXT, {})
    text, changes = fit_observation_text("a\ud800b" + "c" * 100, 50)
    assert text == "a\ufffdb" + "c" * (50 - 3 - len(TRUNCATION_MARKER)) + TRUNCATION_MARKER and len(text) == 50
    assert changes == {"surrogates_replaced": 1, "truncated_from": 103}
    assert fit_observation_text("abcdef", 4)[0] == TRUNCATION_MARKER[:4]  # never longer than the space


@pytest.mark.parametrize("env_id", ["CSRPhone-v1", "MathQA-v1", "LongHealthQA-v0"])
def test_text_envs_declare_unicode_spaces_and_pass_check_env(env_id):
    from gymnasium.utils.env_checker import check_env

    env = gym.make(env_id)
    assert isinstance(env.observation_space, UnicodeText)
    check_env(env.unwrapped, skip_render_check=True)
