"""The cartridge distiller in bfloat16: a bf16 frozen model, a float32 cartridge and Adam state, steps close to
float32's, deterministic runs, float32 untouched, and checkpoints that load in either precision."""

from __future__ import annotations

import math
import re

import pytest
import torch

import worldgym  # noqa: F401  (registers the env ids)
from worldgym.agents.cartridge import CartridgeDistillConfig, CartridgeDistillTrainer
from worldgym.checkpointing import load_checkpoint

from .conftest import make_trainer


def _trainer(tmp_path, tokenizer, **overrides) -> CartridgeDistillTrainer:
    return make_trainer(tmp_path, tokenizer, **{"num_steps": 2, **overrides})


def _untimed(rows: list[dict]) -> list[dict]:
    return [{key: value for key, value in row.items() if not key.startswith(("time/", "eval/tokens_per_s"))}
            for row in rows]


def test_bfloat16_steps_are_finite_and_close_to_float32s(tmp_path, tokenizer):
    full = _trainer(tmp_path / "f32", tokenizer, mode="offline")
    half = _trainer(tmp_path / "bf16", tokenizer, mode="offline", dtype="bfloat16")
    assert half.dtype == torch.bfloat16 and {p.dtype for p in half.model.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in half.cartridge.parameters()} == {torch.float32}
    reference, history = full.train(), half.train()
    assert [row["dtype"] for row in history] == ["bfloat16"] * 3
    moments = [t for state in half.optimizer.state.values() for t in state.values() if t.ndim > 0]
    assert moments and {t.dtype for t in moments} == {torch.float32}
    for ours, theirs in zip(history, reference, strict=True):
        for key in ("kl/full", "loss/kl", "eval/kl_cartridge", "eval/kl_none"):
            if key in theirs:
                assert math.isfinite(ours[key]) and ours[key] == pytest.approx(theirs[key], rel=0.05), key
    assert history[-1]["eval/kl_cartridge"] < history[0]["eval/kl_cartridge"]
    assert history[-1]["eval/memory_ratio"] == reference[-1]["eval/memory_ratio"]  # KV at the same dtype
    _, state, _ = load_checkpoint(tmp_path / "bf16" / "run" / "checkpoint-last")
    assert state["dtype"] == "bfloat16" and state["config"]["dtype"] == "bfloat16"


def test_bfloat16_runs_repeat_exactly(tmp_path, tokenizer):
    runs = [_trainer(tmp_path / name, tokenizer, dtype="bfloat16") for name in ("a", "b")]
    first, second = (trainer.train() for trainer in runs)
    assert _untimed(first) == _untimed(second)
    torch.testing.assert_close(runs[0].cartridge.keys, runs[1].cartridge.keys, atol=0, rtol=0)


def test_float32_is_the_default_and_keeps_the_model_as_it_is(tmp_path, tokenizer):
    trainer = _trainer(tmp_path, tokenizer, num_steps=1)
    assert trainer.dtype == torch.float32 and trainer.config.to_dict()["dtype"] == "float32"
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}
    assert {row["dtype"] for row in trainer.train()} == {"float32"}


@pytest.mark.parametrize(("saved", "loaded"), [("bfloat16", "float32"), ("float32", "bfloat16")])
def test_a_checkpoint_resumes_in_the_other_precision(tmp_path, tokenizer, saved, loaded):
    first = _trainer(tmp_path, tokenizer, num_steps=1, checkpoint_every=1, dtype=saved)
    first.train()
    resumed = _trainer(tmp_path, tokenizer, dtype=loaded)
    assert resumed.resume_latest() is not None and resumed.step == 1
    torch.testing.assert_close(resumed.cartridge.keys, first.cartridge.keys, atol=0, rtol=0)
    history = resumed.train()
    assert [row["dtype"] for row in history] == [saved, saved, loaded]
    assert math.isfinite(history[-1]["kl/full"])


def test_a_bad_dtype_names_the_field():
    with pytest.raises(ValueError, match=re.escape("dtype='half' is invalid: use one of")):
        CartridgeDistillConfig(dtype="half")
