"""Tests for the shared checkpoint pieces: optimizer state round trips and atomic directories."""

import pytest
import torch

from worldgym.checkpointing import atomic_directory, optimizer_from_tensors, optimizer_to_tensors


def _stepped_optimizers():
    a, b = torch.nn.Linear(3, 2), torch.nn.Linear(2, 1)
    opts = {"actor": torch.optim.Adam(a.parameters(), lr=1e-3), "critic": torch.optim.SGD(b.parameters(), lr=0.1,
                                                                                          momentum=0.9)}
    b(a(torch.randn(4, 3))).sum().backward()
    for opt in opts.values():
        opt.step()
    return opts


def test_optimizer_round_trip_with_prefixes():
    opts = _stepped_optimizers()
    tensors, structures = {}, {}
    for name, opt in opts.items():
        named, structures[name] = optimizer_to_tensors(opt.state_dict(), prefix=f"{name}.")
        tensors.update(named)
    for name, opt in opts.items():
        restored = optimizer_from_tensors(tensors, structures[name], prefix=f"{name}.")
        original = opt.state_dict()
        assert restored["param_groups"] == original["param_groups"]
        assert restored["state"].keys() == original["state"].keys()
        for pid, values in original["state"].items():
            for key, value in values.items():
                assert torch.equal(torch.as_tensor(restored["state"][pid][key]), torch.as_tensor(value))
        opt.load_state_dict(restored)


def test_atomic_directory_keeps_the_old_checkpoint_when_writing_fails(tmp_path):
    target = tmp_path / "ckpt"
    with atomic_directory(target) as tmp:
        (tmp / "a.txt").write_text("old")
    with pytest.raises(RuntimeError, match="crash"):
        with atomic_directory(target) as tmp:
            (tmp / "a.txt").write_text("new, half written")
            raise RuntimeError("crash")
    assert (target / "a.txt").read_text() == "old"
    assert not (tmp_path / "ckpt.tmp").exists()
    with atomic_directory(target) as tmp:
        (tmp / "b.txt").write_text("new")
    assert sorted(p.name for p in target.iterdir()) == ["b.txt"]
