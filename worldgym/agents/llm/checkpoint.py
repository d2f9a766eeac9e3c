"""Checkpoints of weights + JSON state (+ optimizer): the shared format of :mod:`worldgym.checkpointing`."""

from __future__ import annotations

from worldgym.checkpointing import FORMAT_VERSION, load_checkpoint, save_checkpoint
from worldgym.errors import CheckpointError

__all__ = ["FORMAT_VERSION", "CheckpointError", "load_checkpoint", "save_checkpoint"]
