"""Dreamer v3 test fixtures: one torch thread, golden-fixture loading and a tiny CartPole config factory."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from worldgym.agents.dreamer_v3.config import (
    DreamerConfig,
    LossConfig,
    ReplayConfig,
    ScheduleConfig,
    model_size,
)

GOLDEN_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "dreamer_v3"


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tests run on one thread (the CI machine has 2 shared cores; also makes float sums reproducible)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class Golden:
    """Reads the files written by tools/make_dreamer_fixtures.py."""

    path = GOLDEN_DIR

    def npz(self, name: str) -> dict[str, torch.Tensor]:
        with np.load(GOLDEN_DIR / name) as data:
            return {k: torch.from_numpy(data[k]) for k in data.files}

    def json(self, name: str) -> dict:
        return json.loads((GOLDEN_DIR / name).read_text())


@pytest.fixture
def golden() -> Golden:
    return Golden()


def tiny_config(root: Path, **overrides) -> DreamerConfig:
    """A CartPole run small enough for a unit test (a few seconds on one core)."""
    base = dict(
        env_id="CartPole-v1",
        num_envs=2,
        num_steps=160,
        seed=3,
        model=model_size("tiny"),
        replay=ReplayConfig(
            capacity=64, seq_len=6, batch_size=3, min_ready_steps=6, safety_margin=8, commit_stride=2
        ),
        schedule=ScheduleConfig(replay_ratio=0.1, learning_starts=20, pretrain_steps=2, rollout_window=4),
        loss=LossConfig(horizon=4),
        log_every=40,
        output_dir=str(Path(root) / "run"),
    )
    base.update(overrides)
    return DreamerConfig(**base)


@pytest.fixture(scope="session")
def make_config():
    """Factory: ``make_config(root, **overrides)`` -> tiny CartPole :class:`DreamerConfig`."""
    return tiny_config
