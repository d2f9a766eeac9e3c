"""Dreamer's replay stored once per run: shared segments, exact resumes from any checkpoint, pruning, damage, and
checkpoints of format 2 (the whole ring in each)."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from worldgym.agents.dreamer_v3 import CPUEngine, LossConfig, ReplayConfig, ScheduleConfig, model_size
from worldgym.agents.dreamer_v3.checkpoint import KIND, RING_REPLAY, load_checkpoint
from worldgym.agents.dreamer_v3.gameboy import gameboy_config, make_gameboy_env
from worldgym.checkpointing import (
    MANIFEST,
    is_complete,
    latest_checkpoint,
    read_tensors,
    run_files,
    write_manifest,
)
from worldgym.errors import RunFileError, WorldgymError
from worldgym.segment_store import SEGMENT_FILES, STORE

os.environ.setdefault("WORLDGYM_WARP_CACHE", str(Path.home() / ".cache" / "worldgym" / "warp"))


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def untimed(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in records]


def spans(run_dir: Path) -> list[tuple[int, int]]:
    """The ``[start, end)`` of every segment in the run folder's store, in order."""
    names = (path.name.split("-") for path in run_dir.glob(SEGMENT_FILES))
    return sorted((int(parts[1]), int(parts[2])) for parts in names)


def listed_spans(checkpoint: Path) -> list[tuple[int, int]]:
    state = json.loads((checkpoint / "state.json").read_text())
    return [(s["start"], s["end"]) for s in state["replay_segments"]]


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory, make_config):
    """The tiny CartPole run (80 iterations, 2 envs, a 64-step ring that wraps) with a checkpoint every 20."""
    engine = CPUEngine(make_config(tmp_path_factory.mktemp("cartpole"), checkpoint_every=40))
    engine.run(progress=False)
    return engine


def test_checkpoints_share_one_copy_of_each_step(cartpole_run):
    """No checkpoint holds the replay; each save stores only the steps since the last one; each checkpoint lists
    the segments holding its live steps (all it needs), though the ring wrapped."""
    run_dir = cartpole_run.core.run_dir
    checkpoints = sorted(run_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    assert [p.name for p in checkpoints] == ["checkpoint-20", "checkpoint-40", "checkpoint-60", "checkpoint-80"]
    assert not list(run_dir.glob(f"checkpoint-*/{RING_REPLAY}"))
    assert spans(run_dir) == [(0, 20), (20, 40), (40, 60), (60, 80)]  # each step once
    # live steps: [max(0, iteration - capacity 64 + safety margin 8), iteration)
    assert [listed_spans(p) for p in checkpoints] == [
        [(0, 20)], [(0, 20), (20, 40)], [(0, 20), (20, 40), (40, 60)], [(20, 40), (40, 60), (60, 80)]
    ]
    for path in checkpoints:
        assert sorted(run_files(path)) == [s["file"] for s in json.loads((path / "state.json").read_text())[
            "replay_segments"]]


def test_a_loaded_ring_holds_the_live_steps_it_was_saved_with(cartpole_run, tmp_path, make_config):
    ring = cartpole_run.core.replay
    fresh = CPUEngine(make_config(tmp_path))
    fresh.core.resume(cartpole_run.core.run_dir / "checkpoint-80")
    lo, hi = ring.live_steps()
    assert (fresh.core.replay.committed_t, fresh.core.replay.live_steps()) == (80, (lo, hi))
    for name, want in ring.read_steps(lo, hi).items():
        assert torch.equal(fresh.core.replay.read_steps(lo, hi)[name], want), name


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_a_missing_or_corrupt_segment_is_refused_with_a_run_file_error(cartpole_run, tmp_path, make_config, damage, damage_segment):
    """Loading a checkpoint whose segment is gone or damaged raises RunFileError naming it; the newest checkpoint
    that does not need it is the one to resume."""
    run_dir = tmp_path / "run"
    shutil.copytree(cartpole_run.core.run_dir, run_dir)
    segment = next(run_dir.glob(f"{STORE}/segment-60-80-*"))  # only checkpoint-80 needs it
    message = damage_segment(segment, run_dir / "checkpoint-80", damage)
    engine = CPUEngine(make_config(tmp_path))
    with pytest.raises(RunFileError, match=re.escape(message)) as raised:
        engine.core.resume(run_dir / "checkpoint-80")
    assert isinstance(raised.value, WorldgymError)
    assert not is_complete(run_dir / "checkpoint-80") and is_complete(run_dir / "checkpoint-60")
    with pytest.warns(UserWarning, match=re.escape(message)):
        assert latest_checkpoint(run_dir) == run_dir / "checkpoint-60"
    engine.core.resume(run_dir / "checkpoint-60")
    assert engine.core.replay.committed_t == 60


def test_a_checkpoint_saved_outside_the_run_folder_gets_a_store_there(cartpole_run, tmp_path, make_config):
    """Saved elsewhere, a checkpoint stores its live steps beside it, in one segment; saved there again, it adds
    the steps since, and the store keeps only what the checkpoint there needs."""
    engine = CPUEngine(make_config(tmp_path))
    engine.core.resume(cartpole_run.core.run_dir / "checkpoint-60")
    target = tmp_path / "elsewhere" / "kept"
    engine.core.save(target)
    assert spans(target.parent) == [(4, 60)]
    engine.run(progress=False)  # to iteration 80, saving in its own run folder
    assert spans(engine.core.run_dir) == [(24, 80)]
    engine.core.save(target)
    assert spans(target.parent) == [(4, 60), (60, 80)]
    again = CPUEngine(make_config(tmp_path / "again"))
    again.core.resume(target)
    lo, hi = engine.core.replay.live_steps()
    assert torch.equal(again.core.replay.read_steps(lo, hi)["obs"], engine.core.replay.read_steps(lo, hi)["obs"])


def test_format_2_checkpoints_with_the_whole_ring_still_load_and_resume_alike(cartpole_run, tmp_path, make_config):
    """A checkpoint as worldgym wrote it before the run-level store (format 2, ``replay.safetensors``) resumes to
    the same run as the new format; the next save stores its live steps in the run's store."""
    new_format = cartpole_run.core.run_dir / "checkpoint-40"
    loaded = CPUEngine(make_config(tmp_path / "loaded"))
    loaded.core.resume(new_format)
    old = tmp_path / "old" / "checkpoint-40"
    shutil.copytree(new_format, old)
    state = json.loads((old / "state.json").read_text())
    del state["replay_segments"]
    (old / "state.json").write_text(json.dumps(state))
    replay_state = loaded.core.replay.state_dict()
    save_file({k: v for k, v in replay_state.items() if isinstance(v, torch.Tensor)}, str(old / RING_REPLAY))
    (old / MANIFEST).unlink()
    write_manifest(old, KIND, 2, 40)
    runs = []
    for name, checkpoint in (("from_new", new_format), ("from_old", old)):
        engine = CPUEngine(make_config(tmp_path / name, checkpoint_every=40))
        engine.core.resume(checkpoint)
        engine.run(progress=False)
        runs.append(engine)
    new, legacy = runs
    assert untimed(read_jsonl(legacy.core.metrics_path)) == untimed(read_jsonl(new.core.metrics_path))
    for key, value in new.core.learner.state_dict().items():
        assert torch.equal(legacy.core.learner.state_dict()[key], value), key
    assert spans(legacy.core.run_dir) == [(4, 60), (60, 80)]  # every live step anew at its first save


def _gameboy_engine(run_dir: Path, **overrides) -> CPUEngine:
    """Two homebrew Game Boys (their save states keep the episodes across a resume) and a 20-step ring, which a
    32-iteration run wraps; a checkpoint every 4 iterations, the newest 3 kept. Gradient steps after every
    iteration, so a resumed run samples the oldest live steps its checkpoint holds."""
    settings = dict(
        num_envs=2, num_steps=64, seed=1, model=model_size("tiny"),
        replay=ReplayConfig(capacity=20, seq_len=8, batch_size=4, min_ready_steps=8, safety_margin=8, commit_stride=4),
        schedule=ScheduleConfig(replay_ratio=0.5, learning_starts=16, pretrain_steps=1, rollout_window=1),
        loss=LossConfig(horizon=4), log_every=8, checkpoint_every=8, save_total_limit=3, output_dir=str(run_dir),
    )  # fmt: skip
    env, transform = make_gameboy_env(2, task="sprite_goal", max_episode_steps=13)
    return CPUEngine(gameboy_config(**(settings | overrides)), env=env, obs_transform=transform)


@pytest.fixture(scope="module")
def gameboy_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("gameboy") / "run"
    _gameboy_engine(run_dir).run(progress=False)
    return run_dir


def test_pruning_drops_only_the_segments_no_kept_checkpoint_needs(gameboy_run):
    """Once the ring wrapped and old checkpoints went, their segments went too; the kept ones all verify."""
    kept = sorted(p.name for p in gameboy_run.glob("checkpoint-*"))
    assert kept == ["checkpoint-24", "checkpoint-28", "checkpoint-32"]
    assert all(is_complete(gameboy_run / name) for name in kept)
    # checkpoint-24 needs the steps [24 - 20 + 8, 24) = [12, 24); each save stored the 4 steps since the last one
    assert spans(gameboy_run) == [(12, 16), (16, 20), (20, 24), (24, 28), (28, 32)]


@pytest.mark.parametrize("iteration", [24, 28])
def test_resuming_from_any_kept_checkpoint_ends_like_the_uninterrupted_run(gameboy_run, tmp_path, iteration):
    """Resumed from an older kept checkpoint (its replay partly in segments the newer ones share), the run ends
    with the same weights, metrics, checkpoints and replay segments as without the resume."""
    run_dir = tmp_path / "run"
    shutil.copytree(gameboy_run, run_dir)
    engine = _gameboy_engine(run_dir)
    engine.run(resume_from=run_dir / f"checkpoint-{iteration}", progress=False)
    final = read_tensors(gameboy_run / "checkpoint-32" / "model.safetensors")
    for key, value in engine.core.learner.state_dict().items():
        assert torch.equal(value, final[key]), key
    for name in ("metrics.jsonl", "episodes.jsonl"):
        assert untimed(read_jsonl(run_dir / name)) == untimed(read_jsonl(gameboy_run / name)), name
    assert sorted(p.name for p in run_dir.glob(SEGMENT_FILES)) == sorted(p.name for p in gameboy_run.glob(SEGMENT_FILES))
    assert sorted(p.name for p in run_dir.glob("checkpoint-*")) == sorted(p.name for p in gameboy_run.glob("checkpoint-*"))


def test_a_segment_that_does_not_fit_the_ring_is_refused(cartpole_run, tmp_path, make_config):
    """Another replay capacity needs other live steps than the checkpoint's segments hold: a clear error."""
    other = CPUEngine(make_config(tmp_path, replay=ReplayConfig(
        capacity=80, seq_len=6, batch_size=3, min_ready_steps=6, safety_margin=8, commit_stride=2)))
    with pytest.raises(WorldgymError, match=re.escape("do not hold the steps [8, 80) this ring needs")):
        load_checkpoint(cartpole_run.core.run_dir / "checkpoint-80", other.core.learner, other.core.replay,
                        other.core.generators)
