"""Checkpoints as safetensors (weights, optimiser moments, replay, RNG states) plus one JSON state file.

They use the shared checksummed format of :mod:`worldgym.checkpointing` (SHA-256 manifest, format version,
durable atomic replacement); checkpoints of format 1 (before the manifest) are refused with a message.

A checkpoint restores the networks, the optimisers, the committed replay, the ``Ratio`` state and every
generator, so a resumed run keeps its replay ratio. Not restored: the envs' internal state (episodes in
progress end; the resumed run starts new ones, marked ``is_first``) and the actor's recurrent filter state.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from worldgym.agents.dreamer_v3.learner import DreamerLearner
from worldgym.agents.dreamer_v3.replay import ReplayRing
from worldgym.checkpointing import (
    MANIFEST,
    checkpoint_directory,
    open_checkpoint,
    optimizer_from_tensors,
    optimizer_to_tensors,
    read_json,
    read_tensors,
)
from worldgym.errors import CheckpointError

__all__ = ["CheckpointError", "latest_checkpoint", "load_checkpoint", "save_checkpoint"]

KIND = "dreamer_v3"
FORMAT_VERSION = 2  # 1: no manifest
FILES = ("model.safetensors", "optim.safetensors", "replay.safetensors", "rng.safetensors", "state.json")
_ITERATION = re.compile(r"iter_(\d+)(\.old)?")


def _optimizer_tensors(learner: DreamerLearner) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    tensors, structures = {}, {}
    for name, optimizer in learner.optimizers.items():
        named_tensors, structures[name] = optimizer_to_tensors(optimizer.state_dict(), prefix=f"{name}.")
        tensors.update(named_tensors)
    return tensors, structures


def _load_optimizers(
    learner: DreamerLearner, tensors: dict[str, torch.Tensor], structures: dict[str, Any]
) -> None:
    for name, optimizer in learner.optimizers.items():
        optimizer.load_state_dict(optimizer_from_tensors(tensors, structures[name], prefix=f"{name}."))


def save_checkpoint(
    directory: str | Path,
    learner: DreamerLearner,
    replay: ReplayRing,
    generators: dict[str, torch.Generator],
    state: dict[str, Any],
) -> Path:
    """Write a checkpoint into a temporary sibling with a SHA-256 manifest, fsync it, then swap it in."""
    final = Path(directory)
    with checkpoint_directory(final, KIND, FORMAT_VERSION) as path:
        _write_checkpoint(path, learner, replay, generators, state)
    return final


def _write_checkpoint(
    path: Path,
    learner: DreamerLearner,
    replay: ReplayRing,
    generators: dict[str, torch.Generator],
    state: dict[str, Any],
) -> None:
    model = {k: v.detach().cpu().contiguous() for k, v in learner.state_dict().items()}
    save_file(model, str(path / "model.safetensors"))
    optim_tensors, groups = _optimizer_tensors(learner)
    save_file(optim_tensors, str(path / "optim.safetensors"))
    replay_state = replay.state_dict()
    save_file(
        {k: v.cpu().contiguous() for k, v in replay_state.items() if isinstance(v, torch.Tensor)},
        str(path / "replay.safetensors"),
    )
    save_file({k: g.get_state() for k, g in generators.items()}, str(path / "rng.safetensors"))
    payload = dict(state)
    payload |= {
        "optimizer_groups": groups,
        "committed_t": replay.committed_t,
        "gradient_steps": learner.gradient_steps,
    }
    (path / "state.json").write_text(json.dumps(payload, indent=1) + "\n")


def load_checkpoint(
    directory: str | Path,
    learner: DreamerLearner,
    replay: ReplayRing,
    generators: dict[str, torch.Generator],
) -> dict[str, Any]:
    """Restore a checkpoint written by :func:`save_checkpoint`; returns its JSON state.

    Raises:
        CheckpointError: naming the file, when a file is missing, truncated or corrupt, the format version
            differs, or tensors do not fit this run's networks or replay.
    """
    path = open_checkpoint(directory, KIND, FORMAT_VERSION, required=FILES)
    state = read_json(path / "state.json")
    try:
        learner.load_state_dict(read_tensors(path / "model.safetensors"))
    except RuntimeError as err:
        raise CheckpointError(f"checkpoint {path} does not fit this model config: {err}") from err
    _load_optimizers(learner, read_tensors(path / "optim.safetensors"), state["optimizer_groups"])
    learner.gradient_steps = int(state["gradient_steps"])
    replay_state: dict[str, Any] = dict(read_tensors(path / "replay.safetensors"))
    replay_state["committed_t"] = int(state["committed_t"])
    try:
        replay.load_state_dict(replay_state)
    except ValueError as err:
        raise CheckpointError(f"checkpoint {path}: {err}") from err
    rng = read_tensors(path / "rng.safetensors")
    for name, generator in generators.items():
        if name not in rng:
            raise CheckpointError(f"checkpoint {path} lacks the state of generator {name!r}")
        generator.set_state(rng[name])
    return state


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint under ``run_dir/checkpoints`` (by iteration), or None.

    A complete checkpoint has its manifest (written last); an ``iter_<n>.old`` left by a save killed while
    replacing ``iter_<n>`` counts when ``iter_<n>`` itself is gone.
    """
    root = Path(run_dir) / "checkpoints"
    complete = {}
    for path in root.glob("iter_*"):
        match = _ITERATION.fullmatch(path.name)
        if match and (path / MANIFEST).is_file():
            complete[(int(match[1]), match[2] is None)] = path
    return complete[max(complete)] if complete else None
