"""FSDPLearner (``learner="fsdp"``, FSDP2's ``fully_shard``) on 2 gloo processes: a training run matches
one process (LoRA with validation; full fine-tuning with a KL term and activation checkpointing), its
checkpoints resume exactly and load into a single process, microbatched updates match one process's whole
minibatches, the dual-LoRA world model trains as in one process, and so does an auxiliary loss's gradient capped
and projected over sharded gradients."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from worldgym.agents.grpo import GRPOConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))  # spawned ranks import the workers by name
import ddp_worker
import fsdp_worker
from test_ddp_learner import (
    _free_port,
    _run_ranks,
    assert_dual_lora_like_one_process,
    assert_microbatches_like_one_process,
    assert_shaped_auxiliary_like_one_process,
)


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """One torch thread (the shared fixture) for every test here."""


@pytest.fixture(scope="module")
def fsdp_results(tmp_path_factory) -> tuple[Path, dict]:
    """Both ranks' runs (once for the module) and their folder."""
    out = tmp_path_factory.mktemp("fsdp")
    _run_ranks(fsdp_worker.run_rank, (_free_port(), str(out)))
    return out, torch.load(out / "fsdp.pt")


@pytest.mark.parametrize("case", list(fsdp_worker.LOOP_CASES))
def test_an_fsdp_training_run_matches_one_process(fsdp_results, tmp_path, case):
    _, results = fsdp_results
    got = results[case]
    single = ddp_worker.loop_trainer(str(tmp_path / "single"), "single", **fsdp_worker.LOOP_CASES[case])
    expected = single.train()
    assert len(got["history"]) == len(expected) == ddp_worker.LOOP_STEPS
    for row, want in zip(got["history"], expected):
        assert row["rollout/model_tokens"] == want["rollout/model_tokens"]  # rank 0 generated: whole weights
        for key in ("loss/total", "loss/policy", "loss/kl", "loss/grad_norm", "eval/reward_mean"):
            if key in want:
                assert row[key] == pytest.approx(want[key], rel=1e-5, abs=1e-6), key  # losses near 0
    assert all(row["loss/grad_norm"] > 0 for row in expected)  # real updates
    assert ("eval/reward_mean" in expected[-1]) == (case == "lora")
    for name, tensor in single.trainable.items():
        torch.testing.assert_close(got["weights"][name], tensor, rtol=1e-5, atol=1e-7)


def test_an_fsdp_checkpoint_resumes_exactly_and_loads_in_one_process(fsdp_results, tmp_path):
    out, results = fsdp_results
    straight, resumed = results["resume"]["straight"], results["resume"]["resumed"]
    for name, tensor in straight.items():
        torch.testing.assert_close(resumed[name], tensor, rtol=1e-6, atol=1e-8)
    # rank 0 wrote the project's checkpoint format: one process loads the whole weights and AdamW state
    single = ddp_worker.loop_trainer(str(tmp_path / "single"), "single", sgd=False, **fsdp_worker.RESUME)
    single.load(out / "straight" / "checkpoint-last")
    assert single.step == ddp_worker.LOOP_STEPS
    for name, tensor in straight.items():
        torch.testing.assert_close(single.trainable[name], tensor, rtol=0, atol=0)
    moments = single.optimizer.state_dict()["state"]
    assert {tuple(state["exp_avg"].shape) for state in moments.values()} == {
        tuple(p.shape) for p in single.trainable.values()}


def test_the_dual_lora_world_model_trains_sharded_like_one_process(tmp_path):
    """The DDP test's dual-LoRA cases (world-model calls subsampled, replayed, skipped; a rank with no call, a
    step with no call) with learner="fsdp"."""
    csr_tokenizer_dir = tmp_path / "tokenizer"
    ddp_worker.csr_tokenizer().save_pretrained(csr_tokenizer_dir)
    assert_dual_lora_like_one_process(csr_tokenizer_dir, tmp_path, "fsdp")


def test_fsdp_microbatches_on_two_ranks_update_like_one_process_without(tokenizer_dir, tmp_path):
    """The DDP test's microbatch cases with learner="fsdp": a rank whose share needs fewer microbatches pads
    with zero-weight ones (every forward is a collective)."""
    assert_microbatches_like_one_process(tokenizer_dir, tmp_path, "fsdp")


def test_fsdp_refuses_the_shared_prefix_pass():
    with pytest.raises(ValueError, match=r"share_prompt_prefix=True is invalid: use False with learner"):
        GRPOConfig(learner="fsdp")


def test_the_auxiliary_gradient_cap_and_projection_sharded_update_like_one_process(tokenizer_dir, tmp_path):
    """The DDP test's capped and projected auxiliary gradients with learner="fsdp": each rank holds a shard of
    both gradients, and their norms and dot products are summed over the ranks."""
    assert_shaped_auxiliary_like_one_process(tokenizer_dir, tmp_path, "fsdp")
