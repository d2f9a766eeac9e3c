"""Async engine: on CPU (threads only) it reproduces the reference async order exactly; CUDA smoke."""

import dataclasses
import json
import re

import pytest
import torch

from worldgym.agents.dreamer_v3.engine.async_engine import AsyncEngine
from worldgym.agents.dreamer_v3.engine.cpu import CPUEngine


def no_wrap_config(make_config, path, **overrides):
    cfg = make_config(path, num_steps=120, **overrides)
    return dataclasses.replace(cfg, replay=dataclasses.replace(cfg.replay, capacity=256))


def test_async_engine_matches_the_reference_async_order(tmp_path, make_config):
    reference = CPUEngine(no_wrap_config(make_config, tmp_path / "cpu"), pipeline_lag=1)
    expected = reference.run(progress=False)
    engine = AsyncEngine(no_wrap_config(make_config, tmp_path / "async"))
    final = engine.run(progress=False)
    assert final["gradient_steps"] == expected["gradient_steps"] > 0
    assert final["replay/committed_t"] == expected["replay/committed_t"]
    for key, value in reference.core.learner.state_dict().items():
        assert torch.equal(value, engine.core.learner.state_dict()[key]), key
    records = [json.loads(line) for line in (engine.core.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all(r["policy/actor_version"] <= r["policy/learner_version"] for r in records)
    assert (engine.core.run_dir / "checkpoint-60" / "state.json").is_file()


def test_async_engine_surfaces_learner_errors(tmp_path, monkeypatch, make_config):
    engine = AsyncEngine(no_wrap_config(make_config, tmp_path))

    def broken(window):
        raise RuntimeError("learner exploded")

    monkeypatch.setattr(engine.core, "learner_window", broken)
    with pytest.raises(RuntimeError, match="learner exploded"):
        engine.run(progress=False)


def test_async_engine_needs_two_windows_of_margin(tmp_path, make_config):
    cfg = make_config(tmp_path)
    cfg = dataclasses.replace(cfg, schedule=dataclasses.replace(cfg.schedule, rollout_window=5))
    with pytest.raises(ValueError, match=re.escape("replay.safety_margin=8 is invalid for the async engine")):
        AsyncEngine(cfg)


@pytest.mark.gpu
def test_async_engine_on_cuda(tmp_path, make_config):
    engine = AsyncEngine(no_wrap_config(make_config, tmp_path, device="cuda"))
    final = engine.run(progress=False)
    assert final["gradient_steps"] > 0
    assert engine.core.replay.storage["obs"].device.type == "cuda"
    assert all(torch.isfinite(p).all() for p in engine.core.learner.parameters())
