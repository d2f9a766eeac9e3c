"""Data-parallel learners launched by Ray Train: 2 CPU learners on gloo (DDP, and FSDP2) train like one process
(the same run as the torchrun-style tests in test_ddp_learner.py and test_fsdp_learner.py)."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import pytest
import torch

from worldgym.agents.llm.checkpoint import load_checkpoint
from worldgym.distributed.launch import train_ddp_on_ray

ray = pytest.importorskip("ray")
sys.path.insert(0, str(Path(__file__).resolve().parent))
import ddp_worker as worker


@pytest.fixture(scope="module", autouse=True)
def ray_cluster():
    """A 2-CPU local Ray instance; the workers get the test's helper module by value (it is not installed)."""
    ray.cloudpickle.register_pickle_by_value(worker)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.parametrize("learner", ["ddp", "fsdp"])
def test_two_ray_train_learners_train_like_one_process(tmp_path, one_torch_thread, learner):
    settings = worker.LEARNER_SETTINGS.get(learner, {})
    train_ddp_on_ray(partial(worker.loop_trainer, str(tmp_path / "run"), learner, **settings), num_learners=2,
                     storage_path=tmp_path / "ray_train")
    weights, state, _ = load_checkpoint(tmp_path / "run" / "checkpoint-last")
    single = worker.loop_trainer(str(tmp_path / "single"), "single", **settings)
    single.train()
    assert state["step"] == worker.LOOP_STEPS
    for name, tensor in single.trainable.items():
        torch.testing.assert_close(weights[name], tensor, rtol=1e-5, atol=1e-7)
    assert (tmp_path / "run" / "metrics.jsonl").read_text().count("\n") == worker.LOOP_STEPS


def test_a_single_process_learner_is_refused(tmp_path):
    with pytest.raises(Exception, match=r"learner in \('ddp', 'fsdp'\)"):
        train_ddp_on_ray(partial(worker.loop_trainer, str(tmp_path / "run"), "single"), num_learners=1,
                         storage_path=tmp_path / "ray_train")
