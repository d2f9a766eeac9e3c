"""Checkpoints as safetensors (weights, optimizer tensors) + JSON (everything else), checked on load."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from worldgym.checkpointing import atomic_directory, optimizer_from_tensors, optimizer_to_tensors

__all__ = ["CheckpointError", "load_checkpoint", "save_checkpoint"]

_WEIGHTS, _OPTIMIZER, _STATE, _MANIFEST = (
    "weights.safetensors",
    "optimizer.safetensors",
    "state.json",
    "manifest.json",
)
FORMAT_VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint is missing, incomplete, corrupt or does not fit the model it is loaded into."""


def save_checkpoint(
    path: str | Path,
    weights: dict[str, torch.Tensor],
    state: dict[str, Any],
    optimizer: torch.optim.Optimizer | None = None,
) -> Path:
    """Write ``weights`` and the optimizer's tensors as safetensors and ``state`` (JSON-able) as JSON.

    The files are written into a temporary folder that is renamed into place, and a manifest records each
    file's SHA-256, so an interrupted save never leaves a checkpoint that loads.
    """
    path = Path(path)
    with atomic_directory(path) as tmp:
        save_file({k: v.detach().contiguous().cpu() for k, v in weights.items()}, str(tmp / _WEIGHTS))
        full_state = {"format_version": FORMAT_VERSION, "state": state, "optimizer": None}
        if optimizer is not None:
            tensors, structure = optimizer_to_tensors(optimizer.state_dict())
            save_file(tensors, str(tmp / _OPTIMIZER))
            full_state["optimizer"] = structure
        (tmp / _STATE).write_text(json.dumps(full_state, indent=1))
        manifest = {name: _sha256(tmp / name) for name in sorted(os.listdir(tmp))}
        (tmp / _MANIFEST).write_text(json.dumps(manifest, indent=1))
    return path


def load_checkpoint(
    path: str | Path,
) -> tuple[dict[str, torch.Tensor], dict[str, Any], dict[str, Any] | None]:
    """``(weights, state, optimizer_state_dict or None)`` from :func:`save_checkpoint`'s folder.

    Raises:
        CheckpointError: the folder or a file is missing, a file's hash differs from the manifest (truncated
        or
            edited), or a file does not parse. The message names the file.
    """
    path = Path(path)
    if not (path / _MANIFEST).is_file():
        raise CheckpointError(
            f"{path} is not a checkpoint: {_MANIFEST} is missing (incomplete or wrong folder)"
        )
    try:
        manifest = json.loads((path / _MANIFEST).read_text())
    except json.JSONDecodeError as error:
        raise CheckpointError(f"{path / _MANIFEST} is corrupt: {error}") from None
    for name, digest in manifest.items():
        if not (path / name).is_file():
            raise CheckpointError(f"checkpoint {path} is missing {name}")
        if _sha256(path / name) != digest:
            raise CheckpointError(
                f"checkpoint file {path / name} is corrupt (its SHA-256 differs from the manifest)"
            )
    try:
        weights = load_file(str(path / _WEIGHTS))
        full_state = json.loads((path / _STATE).read_text())
        optimizer = None
        if full_state.get("optimizer") is not None:
            optimizer = optimizer_from_tensors(load_file(str(path / _OPTIMIZER)), full_state["optimizer"])
    except (SafetensorError, json.JSONDecodeError, KeyError, OSError) as error:
        raise CheckpointError(f"checkpoint {path} does not parse: {error}") from None
    if full_state.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint {path} has format {full_state.get('format_version')}, "
            f"this version reads {FORMAT_VERSION}"
        )
    return weights, full_state["state"], optimizer


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
