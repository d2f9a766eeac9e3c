"""The cartridge distiller's test fixtures: a tokenizer trained on a small synthetic panel, and a trainer factory."""

from __future__ import annotations

from typing import Any

import pytest

import worldgym  # noqa: F401  (registers the env ids)
from worldgym.agents.cartridge import CartridgeDistillConfig, CartridgeDistillTrainer
from worldgym.agents.llm import build_tiny_model, train_chat_tokenizer
from worldgym.agents.llm.models import sharpen
from worldgym.envs.longhealth import generate_panel

PANEL = {"num_patients": 3, "task": 1}


@pytest.fixture(scope="module")
def tokenizer():
    panel = generate_panel(3, 0)
    corpus = [text for patient in panel.values() for text in patient["texts"].values()]
    corpus += [q["question"] for patient in panel.values() for q in patient["questions"]]
    return train_chat_tokenizer(corpus, vocab_size=1000)


def make_trainer(tmp_path, tokenizer, **overrides: Any) -> CartridgeDistillTrainer:
    """A distiller on a sharpened tiny model (outputs that depend on the context) over :data:`PANEL`."""
    settings = dict(env_kwargs=PANEL, num_tokens=16, num_steps=3, questions_per_step=2, samples_per_question=2,
                    max_new_tokens=8, eval_every=0, output_dir=str(tmp_path / "run"), progress=False)
    model = sharpen(build_tiny_model(tokenizer, seed=0))
    return CartridgeDistillTrainer(CartridgeDistillConfig(**{**settings, **overrides}), model=model,
                                   tokenizer=tokenizer)
