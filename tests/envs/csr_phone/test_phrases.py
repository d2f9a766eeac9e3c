"""CSR replies never repeat a phrase back to back ("... on your account on your account")."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from worldgym.envs.csr_phone import phrases
from worldgym.envs.csr_phone.csr import CSRSimulator
from worldgym.envs.csr_phone.profiles import FIELD_PHRASES, generate_profile
from worldgym.envs.csr_phone.tasks import sample_task
from worldgym.envs.csr_phone.world import DIFFICULTIES, get_world

_WORD = re.compile(r"[a-z0-9']+")


def repeated_phrase(text: str, min_words: int = 3) -> str | None:
    """The first run of ``min_words`` or more words said twice in a row in ``text``, or None.

    >>> repeated_phrase("I've cleared the hold on your account on your account.")
    'on your account on your account'
    """
    words = _WORD.findall(text.lower())
    for n in range(min_words, len(words) // 2 + 1):
        for i in range(len(words) - 2 * n + 1):
            if words[i:i + n] == words[i + n:i + 2 * n]:
                return " ".join(words[i:i + 2 * n])
    return None


def test_the_detector_finds_what_it_should():
    assert repeated_phrase("All set: I've cleared the hold on your account on your account.") == (
        "on your account on your account")
    assert repeated_phrase("Call Billing. Billing will help.") is None  # one repeated word is fine
    assert repeated_phrase("a b c d a b c d") == "a b c d a b c d"


def test_no_template_repeats_a_phrase_with_any_slot_value():
    """Every paraphrase with every reason and a few field lists and department names."""
    fields = [phrases.join_phrases([FIELD_PHRASES[f] for f in combo])
              for n in (1, 2, 3) for combo in itertools.islice(itertools.combinations(FIELD_PHRASES, n), 6)]
    departments = ["Billing", "Customer Service", "Account Services", "Card Services"]
    for response_type, family in phrases.PARAPHRASES.items():
        for template, (infinitive, participle), field_list, department in itertools.product(
                family, phrases.PREREQUISITE_REASONS, fields, departments):
            reason = participle if response_type == phrases.SERVICE_PROVIDED else infinitive
            text = template.format(fields=field_list, target=department, number="1-800-555-0100",
                                   prerequisite=department, reason=reason, next=department,
                                   goal="close a savings account", router="Customer Service")
            assert repeated_phrase(text) is None, (response_type, text)


@pytest.mark.parametrize("difficulty", sorted(DIFFICULTIES))
def test_no_reply_repeats_a_phrase_over_many_seeds(difficulty: int):
    """Each seed's task company: every department called with no, right and wrong authentication, the task's
    path walked deepest prerequisite first (so service and completion replies occur), and a dead number."""
    world, replies = get_world(0), 0
    for seed in range(100):
        rng = np.random.default_rng(seed)
        task = sample_task(world, "train", difficulty, generate_profile(rng), rng)
        csr = CSRSimulator(world, task)
        right = dict(task.profile.values)
        wrong = {field: "0000" for field in right}
        path = [task.company.by_name[name] for name in reversed(csr.path)]
        for department in path + list(task.company.departments):
            for auth in ({}, right, wrong):
                outcome = csr.call(department.phone_number, auth, rng)
                assert repeated_phrase(outcome.text) is None, (outcome.response_type, outcome.text)
                replies += 1
        assert repeated_phrase(csr.call("1-800-000-0000", {}, rng).text) is None
    assert replies > 1000
