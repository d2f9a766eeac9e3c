"""The world model's replay stored once per run: shared segments, exact resumes from any kept checkpoint, pruning,
damaged segments, and checkpoints saved before the store."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from worldgym.agents.dual_lora import DualLoRAConfig, DualLoRATrainer
from worldgym.agents.dual_lora.replay import PhoneCallReplay
from worldgym.agents.dual_lora.world_model import PhoneCallExample
from worldgym.agents.llm.checkpoint import load_checkpoint
from worldgym.agents.llm.models import build_tiny_model
from worldgym.checkpointing import MANIFEST, is_complete, latest_checkpoint, run_files, write_manifest
from worldgym.errors import CheckpointError, RunFileError
from worldgym.segment_store import SEGMENT_FILES, STORE

from .conftest import PhoningEngine, make_csr_env

STEPS = 4
CAPACITY = 6  # 4 calls a step (2 prompts x 2, one phone call each): from step 2 on the oldest calls go


def _trainer(run_dir: Path, csr_tokenizer) -> DualLoRATrainer:
    config = DualLoRAConfig(
        env_id="CSRPhone-v1", env_kwargs={"difficulty": 1}, eval_env_kwargs={"split": "validation", "difficulty": 1},
        max_turns=2, num_steps=STEPS, prompts_per_step=2, group_size=2, max_new_tokens=40, eval_every=2,
        eval_episodes=2, minibatch_size=4, learning_rate=1e-2, wm_replay_fraction=0.5, wm_replay_capacity=CAPACITY,
        checkpoint_every=1, save_total_limit=2, progress=False, output_dir=str(run_dir),
    )  # fmt: skip
    return DualLoRATrainer(config, model=build_tiny_model(csr_tokenizer, seed=0), tokenizer=csr_tokenizer,
                           make_env=make_csr_env, make_engine=lambda policy: PhoningEngine(csr_tokenizer))


def spans(folder: Path) -> list[tuple[int, int]]:
    """The ``[start, end)`` of every segment in the store of ``folder``."""
    names = (path.name.split("-") for path in folder.glob(SEGMENT_FILES))
    return sorted((int(parts[1]), int(parts[2])) for parts in names)


def replay_state(checkpoint: Path) -> dict:
    return load_checkpoint(checkpoint, check_run_files=False)[1]["auxiliary"]["replay"]


def untimed(path: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if not k.startswith(("time/", "perf/"))}
            for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def run(tmp_path_factory, csr_tokenizer) -> Path:
    run_dir = tmp_path_factory.mktemp("dual_lora") / "run"
    trainer = _trainer(run_dir, csr_tokenizer)
    trainer.train()
    return run_dir


def test_checkpoints_share_one_copy_of_each_call_and_pruning_keeps_what_they_need(run):
    """No checkpoint holds the replay; each save stored the calls since the last one; the kept checkpoints list
    the segments holding their calls and verify; the segments only pruned checkpoints needed are gone."""
    names = sorted(path.name for path in run.glob("checkpoint-*"))
    assert names == ["checkpoint-3", "checkpoint-4", "checkpoint-best", "checkpoint-last"]
    assert all(is_complete(run / name) for name in names)
    for name in names:
        weights = load_checkpoint(run / name)[0]
        assert not [key for key in weights if "replay" in key], name
    # calls [0, 16) were added, 4 a step; checkpoint-3 holds [6, 12), checkpoint-4 and -last [10, 16)
    assert spans(run) == [(4, 8), (8, 12), (12, 16)]
    listed = {name: [(s["start"], s["end"]) for s in replay_state(run / name)["segments"]] for name in names}
    assert listed["checkpoint-3"] == [(4, 8), (8, 12)] and listed["checkpoint-4"] == [(8, 12), (12, 16)]
    assert listed["checkpoint-last"] == listed["checkpoint-4"] and listed["checkpoint-best"] == []  # step 0
    assert replay_state(run / "checkpoint-3")["calls"] == [6, 12]
    for name in names:
        assert sorted(run_files(run / name)) == sorted(s["file"] for s in replay_state(run / name)["segments"])


def test_resuming_from_an_older_kept_checkpoint_ends_like_the_uninterrupted_run(run, tmp_path, csr_tokenizer):
    """From checkpoint-3 (its calls partly in a segment checkpoint-4 shares): same weights, metrics, checkpoints
    and segments (same bytes: their names hold their hashes) at the end."""
    resumed_dir = tmp_path / "run"
    shutil.copytree(run, resumed_dir)
    for name in ("checkpoint-4", "checkpoint-last"):
        shutil.rmtree(resumed_dir / name)
    trainer = _trainer(resumed_dir, csr_tokenizer)
    assert trainer.resume_latest() == resumed_dir / "checkpoint-3"
    assert trainer.world_model.replay.live() == (6, 12)
    trainer.train()
    want, have = load_checkpoint(run / "checkpoint-last")[0], load_checkpoint(resumed_dir / "checkpoint-last")[0]
    assert sorted(have) == sorted(want) and all(torch.equal(have[k], want[k]) for k in want)
    assert untimed(resumed_dir / "metrics.jsonl") == untimed(run / "metrics.jsonl")
    assert sorted(p.name for p in resumed_dir.glob(SEGMENT_FILES)) == sorted(p.name for p in run.glob(SEGMENT_FILES))
    assert sorted(p.name for p in resumed_dir.glob("checkpoint-*")) == sorted(p.name for p in run.glob("checkpoint-*"))


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_a_missing_or_corrupt_segment_is_refused_with_a_run_file_error(run, tmp_path, csr_tokenizer, damage, damage_segment):
    run_dir = tmp_path / "run"
    shutil.copytree(run, run_dir)
    segment = next(run_dir.glob(f"{STORE}/segment-12-16-*"))  # checkpoint-4 and -last need it, not checkpoint-3
    message = damage_segment(segment, run_dir / "checkpoint-4", damage)
    trainer = _trainer(tmp_path / "other", csr_tokenizer)
    with pytest.raises(RunFileError, match=re.escape(message)):
        trainer.load(run_dir / "checkpoint-4")
    assert not is_complete(run_dir / "checkpoint-4") and is_complete(run_dir / "checkpoint-3")
    with pytest.warns(UserWarning, match="checkpoint-"):
        assert latest_checkpoint(run_dir) == run_dir / "checkpoint-3"


def _as_saved_before_the_store(checkpoint: Path, replay: PhoneCallReplay, target: Path) -> Path:
    """``checkpoint`` as worldgym wrote it before the run-level store: its replay's calls in its own tensors."""
    shutil.copytree(checkpoint, target)
    fields = replay.read_calls(*replay.live())
    types = json.loads(bytes(fields.pop("response_types").tolist()))
    weights = load_file(target / "weights.safetensors") | {f"auxiliary/replay.{k}": v for k, v in fields.items()}
    save_file(weights, str(target / "weights.safetensors"))
    full_state = json.loads((target / "state.json").read_text())
    full_state["state"]["auxiliary"]["replay"] = {"capacity": replay.capacity, "response_types": types}
    (target / "state.json").write_text(json.dumps(full_state))
    (target / MANIFEST).unlink()
    write_manifest(target, "weights", 2, full_state["state"]["step"])
    return target


def test_checkpoints_saved_before_the_store_still_load_and_continue_alike(run, tmp_path, csr_tokenizer):
    """An old-format checkpoint (the replay in its weights) resumes to the same step as the new format; its next
    save stores every call it holds in one segment."""
    new = _trainer(tmp_path / "new", csr_tokenizer)
    new.load(run / "checkpoint-4")
    old = _trainer(tmp_path / "old", csr_tokenizer)
    old.load(_as_saved_before_the_store(run / "checkpoint-4", new.world_model.replay, tmp_path / "old-format"))
    assert old.world_model.replay.live() == (0, CAPACITY)  # counted anew
    for trainer in (new, old):
        trainer.train_step()
    for name, tensor in new.trainable.items():
        assert torch.equal(old.trainable[name], tensor), name
    old.save(tmp_path / "old" / "checkpoint-5")
    assert spans(tmp_path / "old") == [(4, 10)]  # the 6 calls held: 2 of the old checkpoint's, step 5's 4


def test_a_replay_round_trips_through_its_segments_and_a_gap_is_refused(tmp_path):
    replay = PhoneCallReplay(capacity=3)
    for step in range(3):
        replay.add([PhoneCallExample((step, 7, 8), 1, f"type-{step}"), PhoneCallExample((9,) * step, 0, "x")], step)
    state, files = replay.save(tmp_path)
    assert state["calls"] == [3, 6] and sorted(files) == [s["file"] for s in state["segments"]]
    loaded = PhoneCallReplay(capacity=3)
    loaded.load(tmp_path / "checkpoint", state, {})
    rng = np.random.default_rng
    assert loaded.live() == (3, 6) and loaded.sample(3, 9, rng(0)) == replay.sample(3, 9, rng(0))
    with pytest.raises(ValueError, match=re.escape("calls [0, 6) are not in the replay, which holds [3, 6)")):
        replay.read_calls(0, 6)
    replay.add([PhoneCallExample((1, 2), 1, "y")], 3)
    state = replay.save(tmp_path)[0]
    assert [(s["start"], s["end"]) for s in state["segments"]] == [(3, 6), (6, 7)]
    with pytest.raises(CheckpointError, match=re.escape("do not hold the phone calls [4, 7) this replay held")):
        PhoneCallReplay(capacity=3).load(tmp_path / "checkpoint", state | {"segments": state["segments"][1:]}, {})
