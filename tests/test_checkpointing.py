"""Tests for the shared checkpoint format: optimizer round trips, damage detection, kill -9 during a save."""

import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from worldgym.checkpointing import (
    CRASH_ENV,
    MANIFEST,
    SAVE_STAGES,
    atomic_directory,
    checkpoint_directory,
    latest_checkpoint,
    load_checkpoint,
    load_latest,
    open_checkpoint,
    optimizer_from_tensors,
    optimizer_to_tensors,
    resolve_checkpoint,
    save_checkpoint,
    write_durably,
)
from worldgym.errors import CheckpointError, RunFileError


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
    with pytest.raises(RuntimeError, match="crash"), atomic_directory(target) as tmp:
        (tmp / "a.txt").write_text("new, half written")
        raise RuntimeError("crash")
    assert (target / "a.txt").read_text() == "old"
    assert not (tmp_path / "ckpt.tmp").exists()
    with atomic_directory(target) as tmp:
        (tmp / "b.txt").write_text("new")
    assert sorted(p.name for p in target.iterdir()) == ["b.txt"]


# ---------------------------------------------------------------- one error type, one format
def test_every_trainer_raises_the_one_checkpoint_error():
    from worldgym.agents.dreamer_v3 import checkpoint as dreamer_checkpoint
    from worldgym.agents.llm import checkpoint as llm_checkpoint
    from worldgym.agents.ztoken_ppo import checkpoint as ztoken_checkpoint

    assert issubclass(CheckpointError, ValueError)
    for module in (llm_checkpoint, ztoken_checkpoint, dreamer_checkpoint):
        assert module.CheckpointError is CheckpointError, module.__name__


def _weights_checkpoint(path: Path, step: int = 3) -> Path:
    param = torch.nn.Parameter(torch.arange(64.0).reshape(8, 8))
    optimizer = torch.optim.AdamW([param], lr=0.1)
    param.grad = torch.ones_like(param)
    optimizer.step()
    return save_checkpoint(path, {"w": param}, {"step": step}, optimizer)


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        ("truncated", "weights.safetensors"),
        ("truncated", "state.json"),
        ("flipped_byte", "weights.safetensors"),
        ("flipped_byte", "optimizer.safetensors"),
        ("missing", "weights.safetensors"),
        ("missing", "optimizer.safetensors"),
        ("wrong_version", "manifest.json"),
    ],
)
def test_damaged_weights_checkpoint_names_the_file(tmp_path, damage, kind, name):
    """The format GRPO (and every LLM agent) saves: each damage gives a CheckpointError naming the file."""
    path = _weights_checkpoint(tmp_path / "ckpt")
    message = damage(path, name, kind)
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(path)


def test_format_1_and_foreign_manifests_are_refused_clearly(tmp_path):
    path = _weights_checkpoint(tmp_path / "ckpt")
    manifest = json.loads((path / MANIFEST).read_text())
    (path / MANIFEST).write_text(json.dumps(manifest["files"]))  # format 1: a bare {file: sha256} table
    with pytest.raises(CheckpointError, match="checkpoint format 1, this worldgym reads format 2 and 3 only"):
        load_checkpoint(path)
    (path / MANIFEST).write_text(json.dumps({**manifest, "kind": "dreamer_v3"}))
    with pytest.raises(CheckpointError, match="a 'dreamer_v3' checkpoint, not a 'weights' one"):
        load_checkpoint(path)
    (path / MANIFEST).write_text(json.dumps({**manifest, "kind": "cartridge", "format_version": 1}))
    with pytest.raises(CheckpointError, match="a 'cartridge' checkpoint, not a 'weights' one: another kind"):
        load_checkpoint(path)  # a cartridge's manifest in a trainer's checkpoint: its kind, not its format
    escaping = {**manifest["files"], "../escape.json": "0" * 64}
    (path / MANIFEST).write_text(json.dumps({**manifest, "files": escaping}))
    with pytest.raises(CheckpointError, match="points outside the checkpoint"):
        load_checkpoint(path)
    (path / MANIFEST).write_text('{"kind": "weig')
    with pytest.raises(CheckpointError, match=re.escape(f"{path / MANIFEST} is corrupt")):
        load_checkpoint(path)
    with pytest.raises(CheckpointError, match="is not a weights checkpoint: it holds none of"):
        load_checkpoint(tmp_path / "nowhere")


# ---------------------------------------------------------------- the newest checkpoint of a run
def _save_at(run_dir: Path, name: str, step: int | None) -> Path:
    """A checkpoint whose weight is its step (``step=None``: saved without a step, as older worldgyms did)."""
    return save_checkpoint(run_dir / name, {"w": torch.full((1,), float(step or 0))}, {"step": step}, step=step)


@pytest.mark.parametrize(
    ("steps", "newest"),
    [
        ({"checkpoint-10": 10, "checkpoint-20": 20, "checkpoint-last": 15}, "checkpoint-20"),  # numbered newer
        ({"checkpoint-10": 10, "checkpoint-20": 20, "checkpoint-last": 25}, "checkpoint-last"),  # last newer
        ({"checkpoint-20": 20, "checkpoint-last": 20}, "checkpoint-20"),  # the same state: the numbered one
        ({"checkpoint-last": 3}, "checkpoint-last"),
        ({"checkpoint-9": None, "checkpoint-10": None, "checkpoint-last": None}, "checkpoint-10"),  # no steps
        ({"checkpoint-9": 9, "checkpoint-last": None}, "checkpoint-9"),
    ],
)
def test_latest_checkpoint_is_the_highest_recorded_step(tmp_path, steps, newest):
    for name, step in steps.items():
        _save_at(tmp_path, name, step)
    (tmp_path / "checkpoint-99.tmp").mkdir()  # a save still writing (or killed before its rename)
    (tmp_path / "metrics.jsonl").write_text("")
    (tmp_path / "other").mkdir()
    assert latest_checkpoint(tmp_path) == tmp_path / newest


def test_a_run_without_checkpoints_has_none(tmp_path):
    assert latest_checkpoint(tmp_path / "missing") is None
    (tmp_path / "checkpoint-3.tmp").mkdir()
    assert latest_checkpoint(tmp_path) is None


def test_load_latest_loads_the_newest_or_nothing(tmp_path):
    loaded = []
    assert load_latest(tmp_path, loaded.append) is None and loaded == []
    _save_at(tmp_path, "checkpoint-10", 10)
    _save_at(tmp_path, "checkpoint-last", 12)
    assert load_latest(tmp_path, loaded.append) == tmp_path / "checkpoint-last"
    assert loaded == [tmp_path / "checkpoint-last"]


def test_a_half_written_checkpoint_is_skipped_with_a_warning(tmp_path):
    _save_at(tmp_path, "checkpoint-10", 10)
    half = _save_at(tmp_path, "checkpoint-20", 20)
    (half / "state.json").unlink()  # a copy cut short
    with pytest.warns(UserWarning, match=r"checkpoint-20.*incomplete: missing \['state.json'\]"):
        assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint-10"
    (half / MANIFEST).unlink()  # no manifest: never finished
    with pytest.warns(UserWarning, match="manifest.json is missing"):
        assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint-10"


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        (lambda m: m["files"].update({"weights.safetensors": "0" * 64}), "weights.safetensors is corrupt"),
        (lambda m: m["files"].update({"extra.json": "0" * 64}), r"missing \['extra.json'\]"),
        (lambda m: m.update({"step": "30"}), "'step' is '30', not an integer"),
        (lambda m: m.update({"files": []}), "no 'files' table"),
    ],
)
def test_a_tampered_manifest_is_skipped_with_a_warning(tmp_path, tamper, message):
    _save_at(tmp_path, "checkpoint-last", 10)
    newer = _save_at(tmp_path, "checkpoint-20", 20)
    manifest = json.loads((newer / MANIFEST).read_text())
    tamper(manifest)
    (newer / MANIFEST).write_text(json.dumps(manifest))
    with pytest.warns(UserWarning, match=message):
        assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint-last"


def test_a_checkpoint_moved_aside_by_an_interrupted_save_stands_in_for_it(tmp_path):
    _save_at(tmp_path, "checkpoint-10", 10)
    _save_at(tmp_path, "checkpoint-last", 20).rename(tmp_path / "checkpoint-last.old")
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint-last.old"
    assert load_checkpoint(latest_checkpoint(tmp_path))[0]["w"].item() == 20
    _save_at(tmp_path, "checkpoint-last", 30)  # the next save restores, then replaces, the moved-aside one
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint-last"
    assert not (tmp_path / "checkpoint-last.old").exists()


# ---------------------------------------------------------------- crashes during a save
def test_a_save_interrupted_between_its_renames_is_recovered(tmp_path):
    target = tmp_path / "ckpt"
    _weights_checkpoint(target, step=1)
    target.rename(tmp_path / "ckpt.old")  # what a kill between "old moved aside" and "new renamed in" leaves
    assert resolve_checkpoint(target) == tmp_path / "ckpt.old"
    assert load_checkpoint(target)[1] == {"step": 1}
    _weights_checkpoint(target, step=2)
    assert load_checkpoint(target)[1] == {"step": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


_SAVER = """
import sys
import torch
from worldgym.checkpointing import save_checkpoint

print("ready", flush=True)
for i in range(int(sys.argv[2]), int(sys.argv[3])):
    save_checkpoint(sys.argv[1], {"w": torch.full((64, 64), float(i))}, {"i": i})
    print(i, flush=True)
"""


def _start_saver(path: Path, first: int, stop: int, crash_at: str | None = None) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop(CRASH_ENV, None)
    if crash_at is not None:
        env[CRASH_ENV] = crash_at
    command = [sys.executable, "-c", _SAVER, str(path), str(first), str(stop)]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)


def _saved_index(path: Path) -> int:
    weights, state, _ = load_checkpoint(path)
    assert torch.equal(weights["w"], torch.full((64, 64), float(state["i"])))
    return state["i"]


@pytest.mark.parametrize("stage", SAVE_STAGES)
def test_kill_at_each_stage_of_a_save_leaves_a_loadable_checkpoint(tmp_path, stage):
    target = tmp_path / "ckpt"
    save_checkpoint(target, {"w": torch.full((64, 64), 0.0)}, {"i": 0})
    saver = _start_saver(target, 1, 2, crash_at=stage)
    saver.communicate(timeout=120)
    assert saver.returncode == -signal.SIGKILL, "the save was not killed at the injection point"
    assert _saved_index(target) == (1 if stage == "new_renamed_in" else 0)
    save_checkpoint(target, {"w": torch.full((64, 64), 2.0)}, {"i": 2})  # the next save cleans up
    assert _saved_index(target) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_kill_at_random_moments_never_loses_the_checkpoint(tmp_path):
    """SIGKILL a process that saves over its checkpoint in a loop: the last or the next save always loads."""
    rng = random.Random(0)
    target = tmp_path / "ckpt"
    save_checkpoint(target, {"w": torch.full((64, 64), 0.0)}, {"i": 0})
    for _ in range(3):
        first = _saved_index(target) + 1
        saver = _start_saver(target, first, first + 10_000)
        assert saver.stdout.readline() == "ready\n"
        time.sleep(rng.uniform(0.0, 0.25))
        saver.send_signal(signal.SIGKILL)
        printed = saver.communicate(timeout=60)[0].split()
        last_done = int(printed[-1]) if printed else first - 1
        assert last_done <= _saved_index(target) <= last_done + 1


def test_run_files_a_manifest_lists_are_checked_with_the_checkpoint(tmp_path):
    """A checkpoint's shared run files (beside it) count as its own: missing or changed, it does not open."""
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "part").write_bytes(b"shared bytes")
    digest = hashlib.sha256(b"shared bytes").hexdigest()
    with checkpoint_directory(tmp_path / "ckpt", "test", 3, 1, {"store/part": digest}) as tmp:
        (tmp / "state.json").write_text("{}")
    assert open_checkpoint(tmp_path / "ckpt", "test", (2, 3), required=["state.json"]) == tmp_path / "ckpt"
    (tmp_path / "store" / "part").write_bytes(b"shared bytez")
    with pytest.raises(RunFileError, match=re.escape(f"run file {tmp_path / 'store' / 'part'} is corrupt")):
        open_checkpoint(tmp_path / "ckpt", "test", 3, required=["state.json"])
    (tmp_path / "store" / "part").unlink()
    with pytest.raises(RunFileError, match=re.escape(f"needs {tmp_path / 'store' / 'part'}, which is missing")):
        open_checkpoint(tmp_path / "ckpt", "test", 3, required=["state.json"])
    assert open_checkpoint(tmp_path / "ckpt", "test", 3, required=["state.json"], check_run_files=False)
    with pytest.raises(CheckpointError, match=re.escape("reads format 1 and 2 only")):
        open_checkpoint(tmp_path / "ckpt", "test", (1, 2), required=["state.json"])
    with pytest.raises(CheckpointError, match="points outside the checkpoint"):
        with checkpoint_directory(tmp_path / "bad", "test", 3, 1, {"../elsewhere": digest}):
            pass


def test_a_weights_checkpoint_that_lists_run_files_is_of_format_3_and_checks_them(tmp_path):
    """Older worldgyms (format 2 only) refuse it rather than load it without its run files; a reader that needs
    none of them (a policy export) skips them."""
    write_durably(tmp_path / "store" / "part", b"shared bytes")
    shared = {"store/part": hashlib.sha256(b"shared bytes").hexdigest()}
    save_checkpoint(tmp_path / "ckpt", {"w": torch.ones(2)}, {"step": 1}, shared=shared)
    assert json.loads((tmp_path / "ckpt" / MANIFEST).read_text())["format_version"] == 3
    assert load_checkpoint(tmp_path / "ckpt")[1] == {"step": 1}
    (tmp_path / "store" / "part").unlink()
    with pytest.raises(RunFileError, match="which is missing"):
        load_checkpoint(tmp_path / "ckpt")
    assert torch.equal(load_checkpoint(tmp_path / "ckpt", check_run_files=False)[0]["w"], torch.ones(2))
