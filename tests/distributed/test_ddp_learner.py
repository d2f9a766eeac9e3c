"""DDPLearner on 2 gloo processes gives the update of one process on the concatenated batch, with shards of
unequal token counts (token_mean, dr_grpo and seq_mean; LoRA and full fine-tuning), in microbatches, and with
the dual-LoRA world model's auxiliary loss."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from transformers import AutoTokenizer

from worldgym.distributed import DDPLearner, shard_rows

sys.path.insert(0, str(Path(__file__).resolve().parent))  # spawned ranks import the worker by name
import ddp_worker as worker

TIMEOUT_S = 180


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """One torch thread (the shared fixture) for every test here."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _spawn(tokenizer_dir: Path, out_dir: Path, backend: str = "gloo") -> None:
    """Run both ranks of the update test."""
    _run_ranks(worker.run_rank, (_free_port(), str(tokenizer_dir), str(out_dir), backend))


def _run_ranks(function, args: tuple) -> None:
    """``function(rank, *args)`` on every rank; on a failure or a hang, no process is left behind."""
    context = mp.start_processes(function, args=args, nprocs=worker.WORLD_SIZE, join=False, start_method="spawn")
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while not context.join(timeout=1):  # raises when a rank failed (and ends the others)
            if time.monotonic() > deadline:
                pytest.fail(f"the {worker.WORLD_SIZE} ranks did not finish in {TIMEOUT_S} s")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
            process.join()


def _assert_same_as_one_process(tokenizer_dir: Path, out_dir: Path, device: str) -> None:
    ddp = torch.load(out_dir / "ddp.pt")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    for finetune, aggregation, kl_coef in worker.CASES:
        trainer = worker.make_trainer(tokenizer, finetune, aggregation, kl_coef, str(out_dir / "single"), device)
        batch = worker.make_batch(trainer)
        expected = worker.result(trainer, trainer.update(batch))
        got = ddp[finetune, aggregation]
        assert (finetune == "lora") == all("lora_" in name for name in got["weights"])
        # float rounding differs with the shard shapes (a mis-weighted shard moves gradients by percents)
        for kind in ("grads", "weights"):
            for name, tensor in expected[kind].items():
                where = f"{finetune}/{aggregation} {kind} {name}"
                torch.testing.assert_close(got[kind][name], tensor, rtol=1e-5, atol=1e-7,
                                           msg=lambda m, where=where: f"{where}: {m}")
        assert got["metrics"].keys() == expected["metrics"].keys()
        for key, value in expected["metrics"].items():
            assert got["metrics"][key] == pytest.approx(value, rel=1e-5, abs=1e-7), (finetune, aggregation, key)


def test_two_gloo_ranks_update_like_one_process_on_the_whole_batch(tokenizer_dir, tmp_path):
    _spawn(tokenizer_dir, tmp_path)
    _assert_same_as_one_process(tokenizer_dir, tmp_path, "cpu")


@pytest.mark.gpu
def test_two_nccl_ranks_update_like_one_process_on_the_whole_batch(tokenizer_dir, tmp_path):
    if torch.cuda.device_count() < worker.WORLD_SIZE:
        pytest.skip(f"needs {worker.WORLD_SIZE} CUDA devices")
    _spawn(tokenizer_dir, tmp_path, backend="nccl")
    _assert_same_as_one_process(tokenizer_dir, tmp_path, "cuda:0")


def test_a_ddp_training_run_matches_one_process(tmp_path):
    """Two ranks joined from torchrun-style environment variables run GRPOTrainer.train with learner="ddp":
    rank 0's rollouts (dynamic sampling included) and the sharded updates give one process's weights and
    metrics; only rank 0 writes the run's files."""
    _run_ranks(worker.run_loop_rank, (_free_port(), str(tmp_path)))
    ddp = torch.load(tmp_path / "loop.pt")
    single = worker.loop_trainer(str(tmp_path / "single"), "single")
    expected = single.train()
    assert len(ddp["history"]) == len(expected) == worker.LOOP_STEPS
    for got, want in zip(ddp["history"], expected):
        assert got["rollout/model_tokens"] == want["rollout/model_tokens"]
        assert got["loss/grad_norm"] == pytest.approx(want["loss/grad_norm"], rel=1e-5, abs=1e-7)
    assert any(row["loss/grad_norm"] > 0 for row in expected)  # real updates
    for name, tensor in single.trainable.items():
        torch.testing.assert_close(ddp["weights"][name], tensor, rtol=1e-5, atol=1e-7)
    assert (tmp_path / "run" / "metrics.jsonl").read_text().count("\n") == worker.LOOP_STEPS


@pytest.fixture(scope="module")
def csr_tokenizer_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("csr_tokenizer")
    worker.csr_tokenizer().save_pretrained(path)
    return path


def test_the_dual_lora_world_model_trains_on_two_ranks_like_one_process(csr_tokenizer_dir, tmp_path):
    """learner="ddp" with the world-model loss ("separate" and "shared" adapters): the phone calls drawn on
    the whole minibatch (wm_max_calls, replay) and split over the ranks, confidence skipping, a rank that
    scores no call, a step with no phone call and microbatches ("separate") give one process's weights and
    metrics."""
    assert_dual_lora_like_one_process(csr_tokenizer_dir, tmp_path, "ddp")


def assert_dual_lora_like_one_process(csr_tokenizer_dir: Path, tmp_path: Path, learner: str) -> None:
    """The test above for ``learner``."""
    _run_ranks(worker.run_dual_lora_rank, (_free_port(), str(csr_tokenizer_dir), str(tmp_path), learner))
    ddp = torch.load(tmp_path / "dual_lora.pt")
    tokenizer = AutoTokenizer.from_pretrained(csr_tokenizer_dir)
    settings = worker.LEARNER_SETTINGS.get(learner, {})
    single = {case: worker.dual_lora_run(tokenizer, case, str(tmp_path / case), "single", **settings)
              for case in worker.DUAL_CASES}
    for case, expected in single.items():
        for step, (got, want) in enumerate(zip(ddp[case]["history"], expected["history"], strict=True)):
            assert got.keys() == want.keys(), (case, step)
            for key, value in want.items():
                assert got[key] == pytest.approx(value, rel=1e-5, abs=1e-7), (case, step, key)
        for name, tensor in expected["weights"].items():
            torch.testing.assert_close(ddp[case]["weights"][name], tensor, rtol=1e-5, atol=1e-7,
                                       msg=lambda m, where=f"{case} {name}": f"{where}: {m}")
    separate, shared = single["separate"]["history"], single["shared"]["history"]
    assert all(row["wm/trained_calls"] < row["wm/calls"] for row in separate[:2] + shared[:2])  # subsampled
    assert separate[1]["wm/replayed"] > 0 and 0 < separate[1]["wm/skipped_confident"] < 6  # some skipped
    assert shared[0]["wm/trained_calls"] == 1  # one rank scores no call
    assert separate[2]["wm/calls"] == shared[2]["wm/calls"] == 0 and "loss/world_model" not in separate[2]


def test_ddp_microbatches_on_two_ranks_update_like_one_process_without(tokenizer_dir, tmp_path):
    """learner="ddp" with microbatch_size below each rank's share (LoRA token_mean, full fine-tuning seq_mean
    with KL; shares of equal and of unequal row counts): one process's update on whole minibatches."""
    assert_microbatches_like_one_process(tokenizer_dir, tmp_path, "ddp")


def assert_microbatches_like_one_process(tokenizer_dir: Path, tmp_path: Path, learner: str) -> None:
    """The test above for ``learner``: the same weights, gradients and metrics (rtol 1e-5), every training
    forward of at most ``microbatch_size`` rows, and under FSDP as many forwards on each rank (shorter shares
    padded)."""
    _run_ranks(worker.run_microbatch_rank, (_free_port(), str(tokenizer_dir), str(tmp_path), learner))
    parallel = torch.load(tmp_path / "micro.pt")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    for case, (*_, micro) in worker.MICRO_CASES.items():
        single = worker.micro_trainer(tokenizer, case, str(tmp_path / "single"), "single", microbatches=False,
                                      **worker.LEARNER_SETTINGS.get(learner, {}))
        expected = single.update(worker.make_batch(single))
        got = parallel[case]
        forward_rows = got["forward_rows"]
        assert max(max(rows) for rows in forward_rows) <= micro, (case, forward_rows)
        forwarded = sum(map(sum, forward_rows))
        if learner == "fsdp":
            assert len(forward_rows[0]) == len(forward_rows[1]), (case, forward_rows)
            assert (forwarded > worker.ROWS) == case.endswith("unequal"), (case, forward_rows)  # padding
        else:
            assert forwarded == worker.ROWS, (case, forward_rows)
        for kind, tensors in (("weights", single.trainable), ("grads", worker.whole_grads(single))):
            for name, tensor in tensors.items():
                torch.testing.assert_close(got[kind][name], tensor.detach(), rtol=1e-5, atol=1e-7,
                                           msg=lambda m, where=f"{case} {kind} {name}": f"{where}: {m}")
        assert got["metrics"].keys() == expected.keys()
        for key, value in expected.items():
            assert got["metrics"][key] == pytest.approx(value, rel=1e-5, abs=1e-7), (case, key)


def test_ddp_learner_outside_torchrun_says_how_to_launch(monkeypatch, tmp_path):
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(RuntimeError, match="torchrun --nproc-per-node"):
        worker.loop_trainer(str(tmp_path), "ddp")


def test_shards_train_unequal_token_counts():
    """The premise of the test above: each minibatch's two shards hold different numbers of trained tokens."""
    counts = torch.tensor(worker.TRAINED)
    for order in (torch.randperm(worker.ROWS) for _ in range(20)):
        for rows in order.split(worker.MINIBATCH):
            shards = [int(counts[shard_rows(rows, rank, worker.WORLD_SIZE)].sum()) for rank in range(2)]
            assert shards[0] != shards[1]


def test_learner_refuses_to_run_without_a_process_group(tokenizer_dir, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    trainer = worker.make_trainer(tokenizer, "lora", "token_mean", 0.0, str(tmp_path))
    with pytest.raises(RuntimeError, match="init_process_group"):
        DDPLearner(trainer)


def test_a_minibatch_smaller_than_the_world_cannot_be_split():
    with pytest.raises(ValueError, match="every rank needs one row"):
        shard_rows(torch.arange(1), 0, 2)


def test_the_auxiliary_gradient_cap_and_projection_on_two_ranks_update_like_one_process(tokenizer_dir, tmp_path):
    """auxiliary_grad_ratio and auxiliary_projection with learner="ddp": the capped or projected auxiliary
    gradient, its norms and dot products over the ranks' reduced gradients, gives one process's update (with
    unequal shares of the auxiliary examples, and in microbatches)."""
    assert_shaped_auxiliary_like_one_process(tokenizer_dir, tmp_path, "ddp")


def assert_shaped_auxiliary_like_one_process(tokenizer_dir: Path, tmp_path: Path, learner: str) -> None:
    """The test above for ``learner``: the same weights, gradients and metrics (rtol 1e-5), the cap and the
    projection each at work."""
    _run_ranks(worker.run_shaped_auxiliary_rank, (_free_port(), str(tokenizer_dir), str(tmp_path), learner))
    parallel = torch.load(tmp_path / "shaped.pt")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    for case in worker.SHAPED_CASES:
        expected = worker.shaped_auxiliary_update(tokenizer, case, str(tmp_path / "single"), "single")
        got = parallel[case]
        for kind in ("weights", "grads"):
            for name, tensor in expected[kind].items():
                torch.testing.assert_close(got[kind][name], tensor, rtol=1e-5, atol=1e-7,
                                           msg=lambda m, where=f"{case} {kind} {name}": f"{where}: {m}")
        assert got["metrics"].keys() == expected["metrics"].keys()
        for key, value in expected["metrics"].items():
            assert got["metrics"][key] == pytest.approx(value, rel=1e-5, abs=1e-7), (case, key)
        settings, metrics = worker.SHAPED_CASES[case], expected["metrics"]
        assert ("auxiliary_grad_ratio" in settings) == (metrics["aux/grad_scale"] < 1), case  # the cap binds
        assert metrics["aux/grad_cosine"] < 0, case  # a conflict: the projection has a part to remove


def test_the_echo_loss_on_two_ranks_in_microbatches_updates_like_one_process(tokenizer_dir, tmp_path):
    """echo_coef with learner="ddp" in microbatches of one row: every part's echo term is its share of the whole
    minibatch's observations, so the update is one process's on whole minibatches, and the metrics one
    process's in the same microbatches (the echo metrics are sums over the parts, made means at the end)."""
    _run_ranks(worker.run_echo_rank, (_free_port(), str(tokenizer_dir), str(tmp_path), "ddp"))
    got = torch.load(tmp_path / "echo.pt")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    whole = worker.echo_update(tokenizer, str(tmp_path / "whole"), "single", microbatch_size=0)
    for kind in ("weights", "grads"):
        for name, tensor in whole[kind].items():
            torch.testing.assert_close(got[kind][name], tensor, rtol=1e-5, atol=1e-7,
                                       msg=lambda m, where=f"{kind} {name}": f"{where}: {m}")
    expected = worker.echo_update(tokenizer, str(tmp_path / "micro"), "single", microbatch_size=1)["metrics"]
    assert got["metrics"].keys() == expected.keys()
    for key, value in expected.items():
        assert got["metrics"][key] == pytest.approx(value, rel=1e-5, abs=1e-7), key
    assert expected["loss/echo"] > 0
