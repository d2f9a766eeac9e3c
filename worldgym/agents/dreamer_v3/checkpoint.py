"""Checkpoints as safetensors (weights, optimiser moments, replay, RNG states) plus one JSON state file.

A checkpoint restores the networks, the optimisers, the committed replay, the ``Ratio`` state and every
generator, so a resumed run keeps its replay ratio. Not restored: the envs' internal state (episodes in
progress end; the resumed run starts new ones, marked ``is_first``) and the actor's recurrent filter state.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from worldgym.agents.dreamer_v3.learner import DreamerLearner
from worldgym.agents.dreamer_v3.replay import ReplayRing
from worldgym.checkpointing import atomic_directory, optimizer_from_tensors, optimizer_to_tensors

FILES = ("model.safetensors", "optim.safetensors", "replay.safetensors", "rng.safetensors", "state.json")


class CheckpointError(ValueError):
    """A checkpoint is missing, incomplete or does not fit the run that loads it."""


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
    """Write a checkpoint into ``directory`` atomically (a temporary sibling renamed over it when complete)."""
    final = Path(directory)
    with atomic_directory(final) as path:
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
        CheckpointError: a file is missing, or tensors do not fit this run's networks or replay.
    """
    path = Path(directory)
    missing = [name for name in FILES if not (path / name).is_file()]
    if missing:
        raise CheckpointError(f"checkpoint {path} is incomplete: missing {missing}")
    state = json.loads((path / "state.json").read_text())
    try:
        learner.load_state_dict(load_file(str(path / "model.safetensors")))
    except RuntimeError as err:
        raise CheckpointError(f"checkpoint {path} does not fit this model config: {err}") from err
    _load_optimizers(learner, load_file(str(path / "optim.safetensors")), state["optimizer_groups"])
    learner.gradient_steps = int(state["gradient_steps"])
    replay_state: dict[str, Any] = dict(load_file(str(path / "replay.safetensors")))
    replay_state["committed_t"] = int(state["committed_t"])
    try:
        replay.load_state_dict(replay_state)
    except ValueError as err:
        raise CheckpointError(f"checkpoint {path}: {err}") from err
    rng = load_file(str(path / "rng.safetensors"))
    for name, generator in generators.items():
        if name not in rng:
            raise CheckpointError(f"checkpoint {path} lacks the state of generator {name!r}")
        generator.set_state(rng[name])
    return state


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint under ``run_dir/checkpoints`` (by iteration), or None."""
    root = Path(run_dir) / "checkpoints"
    complete = [p for p in root.glob("iter_*") if (p / "state.json").is_file()]
    return max(complete, key=lambda p: int(p.name.split("_")[1]), default=None)
