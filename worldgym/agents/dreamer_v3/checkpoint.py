"""Checkpoints as safetensors (weights, optimiser moments, RNG states) plus one JSON state file, and the replay.

They use the shared checksummed format of :mod:`worldgym.checkpointing` (SHA-256 manifest, format version,
durable atomic replacement); checkpoints of format 1 (before the manifest) are refused with a message.

A checkpoint restores the networks, the optimisers, the committed replay, the ``Ratio`` state and every
generator, so a resumed run keeps its replay ratio. The replay is stored once per run, not in each checkpoint:
format 3 checkpoints list the segments of the run folder's ``replay/`` store that hold its live steps
(:mod:`worldgym.segment_store`); format 2 checkpoints (each with its whole ring in
``replay.safetensors``) still load.

The episodes in progress continue after a resume when the env saves its own state (``save_state(path)`` and
``load_state(path)`` on the unwrapped vector env, :class:`~worldgym.agents.dreamer_v3.engine.rollout.SavesState`:
GameBoy-v0's save states hold the emulators, step counters, ``np_random`` and task state). The checkpoint then
also holds that state (``env_state.npz``) and the actor's side (``actor.safetensors``: the env runner's current
rows and episode returns so far, the policy's recurrent filter state and previous actions), so a resumed CPU
run continues exactly as the uninterrupted one (``tests/test_kill_resume.py``). Envs without such methods
(Gymnasium's vector envs, e.g. CartPole-v1) keep their state in their sub-envs' attributes and RNGs, which
only pickling them would capture (unsafe to load, fragile across versions): for them the episodes in
progress end at a resume, and the resumed run starts new ones, marked ``is_first``, from a fresh filter state.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import save_file

from worldgym.agents.dreamer_v3.learner import DreamerLearner
from worldgym.agents.dreamer_v3.replay import ReplayRing
from worldgym.checkpointing import (
    checkpoint_directory,
    open_checkpoint,
    optimizer_from_tensors,
    optimizer_to_tensors,
    read_json,
    read_tensors,
)
from worldgym.errors import CheckpointError
from worldgym.segment_store import Segment, SegmentStore, listed_segments, segment_digests

if TYPE_CHECKING:  # the engine package imports this module
    from worldgym.agents.dreamer_v3.engine.rollout import SavesState

__all__ = ["CheckpointError", "load_checkpoint", "save_checkpoint"]

KIND = "dreamer_v3"
FORMAT_VERSION = 3  # 1: no manifest; 2: the whole replay ring in each checkpoint; 3: replay segments of the run
READ_VERSIONS = (2, 3)
FILES = ("model.safetensors", "optim.safetensors", "rng.safetensors", "state.json")
RING_REPLAY = "replay.safetensors"  # format 2: the ring's storage
ENV_STATE = "env_state.npz"  # written by the env's save_state
ACTOR_STATE = "actor.safetensors"  # env runner rows and policy filter state, saved with ENV_STATE


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
    env: SavesState | None = None,
    actor: dict[str, torch.Tensor] | None = None,
    step: int | None = None,
    segments: SegmentStore | None = None,
) -> Path:
    """Write the replay steps not yet stored into the store beside ``directory`` (``segments``: those of the run
    so far; default: none, so every live step is written), then the checkpoint into a temporary sibling with a
    SHA-256 manifest (recording ``step``, the iteration, and the segments it needs), fsync it, swap it in.

    With ``env`` and ``actor`` (both or neither), the env's save state and the actor's tensors go in too.
    """
    if (env is None) != (actor is None):
        raise ValueError(
            "save the env's state together with the actor's (pass both env and actor, or neither)"
        )
    final = Path(directory)
    needed = (segments if segments is not None else SegmentStore()).save(final.parent, replay.live_steps(),
                                                                         replay.read_steps)
    state = state | {"replay_segments": [segment.to_dict() for segment in needed]}
    with checkpoint_directory(final, KIND, FORMAT_VERSION, step, segment_digests(needed)) as path:
        _write_checkpoint(path, learner, replay, generators, state)
        if env is not None:
            env.save_state(path / ENV_STATE)
            save_file({k: v.detach().cpu().contiguous() for k, v in actor.items()}, str(path / ACTOR_STATE))
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
    env: SavesState | None = None,
    segments: SegmentStore | None = None,
) -> dict[str, Any]:
    """Restore a checkpoint written by :func:`save_checkpoint` (or of format 2); returns its JSON state.

    When the checkpoint holds an env state and ``env`` is given, ``env`` loads it and the returned state has
    ``"actor"``: the tensors saved as ``actor`` (else no ``"actor"`` key, and the envs are to be reset).
    ``segments`` becomes the checkpoint's replay segments (none for format 2), for the run's next save.

    Raises:
        CheckpointError: naming the file, when a file is missing, truncated or corrupt, the format version
            differs, or tensors do not fit this run's networks or replay.
        RunFileError: (a :class:`CheckpointError`) a replay segment the checkpoint needs is missing or corrupt.
    """
    path = open_checkpoint(directory, KIND, READ_VERSIONS, required=FILES)
    state = read_json(path / "state.json")
    try:
        learner.load_state_dict(read_tensors(path / "model.safetensors"))
    except RuntimeError as err:
        raise CheckpointError(f"checkpoint {path} does not fit this model config: {err}") from err
    _load_optimizers(learner, read_tensors(path / "optim.safetensors"), state["optimizer_groups"])
    learner.gradient_steps = int(state["gradient_steps"])
    _load_replay(path, state, replay, segments if segments is not None else SegmentStore())
    rng = read_tensors(path / "rng.safetensors")
    for name, generator in generators.items():
        if name not in rng:
            raise CheckpointError(f"checkpoint {path} lacks the state of generator {name!r}")
        generator.set_state(rng[name])
    if env is not None and (path / ENV_STATE).is_file():
        actor = read_tensors(path / ACTOR_STATE) if (path / ACTOR_STATE).is_file() else None
        if actor is None:
            raise CheckpointError(f"checkpoint {path} is incomplete: missing ['{ACTOR_STATE}']")
        try:
            env.load_state(path / ENV_STATE)
        except (ValueError, OSError) as err:  # e.g. GameBoy-v0's StateError: another ROM or num_envs
            raise CheckpointError(f"{path / ENV_STATE} does not fit this env: {err}") from err
        state["actor"] = actor
    return state


def _load_replay(path: Path, state: dict[str, Any], replay: ReplayRing, segments: SegmentStore) -> None:
    """Refill ``replay`` from the run's segments the checkpoint lists, or from its ``replay.safetensors``."""
    committed_t = int(state["committed_t"])
    if "replay_segments" not in state:  # format 2
        if not (path / RING_REPLAY).is_file():
            raise CheckpointError(f"checkpoint {path} is incomplete: missing ['{RING_REPLAY}']")
        try:
            replay.load_state_dict(dict(read_tensors(path / RING_REPLAY)) | {"committed_t": committed_t})
        except ValueError as err:
            raise CheckpointError(f"checkpoint {path}: {err}") from err
        segments.forget()
        return
    needed = listed_segments(state["replay_segments"], path / "state.json")
    lo = max(0, committed_t - replay.capacity + replay.safety_margin)  # the live steps once restored

    def restore(parts: list[tuple[Segment, dict[str, torch.Tensor]]]) -> None:
        for segment, fields in parts:
            if any(t.ndim == 0 or t.shape[0] != segment.end - segment.start for t in fields.values()):
                raise ValueError(f"{segment.file} does not hold steps [{segment.start}, {segment.end})")
        replay.restore_steps(committed_t, [(segment.start, fields) for segment, fields in parts])

    needs = f"steps [{lo}, {committed_t}) this ring needs (saved with another replay capacity or safety margin?)"
    segments.load(path.parent, needed, (lo, committed_t), restore, needs)
