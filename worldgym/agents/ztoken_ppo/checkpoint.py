"""Checkpoints in the shared checksummed format: safetensors for policy/optimizer/RNG, JSON for the rest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_model, save_file, save_model

from worldgym.agents.ztoken_ppo.encoding import ObservationEncoder, TokenizerEncoder
from worldgym.agents.ztoken_ppo.factory import rebuild_policy
from worldgym.agents.ztoken_ppo.model import ZTokenPolicy
from worldgym.checkpointing import (
    checkpoint_directory,
    open_checkpoint,
    optimizer_from_tensors,
    optimizer_to_tensors,
    read_json,
    read_tensors,
)
from worldgym.envs.ztoken.vocab import ZTokenVocab
from worldgym.errors import CheckpointError

__all__ = ["CheckpointError", "load_policy", "load_policy_weights", "load_training_state", "save_checkpoint"]

KIND = "ztoken_ppo"
FORMAT_VERSION = 2  # 1: no manifest (checkpoints of format 1 are refused with a message saying so)
POLICY_WEIGHTS = "policy.safetensors"
POLICY_SPEC = "policy.json"
OPTIMIZER_TENSORS = "optimizer.safetensors"
TRAINER_STATE = "trainer_state.json"


def save_checkpoint(
    path: str | Path,
    policy: ZTokenPolicy,
    encoder: ObservationEncoder,
    num_z_tokens: int,
    optimizer: torch.optim.Optimizer | None = None,
    generator: torch.Generator | None = None,
    trainer_state: dict[str, Any] | None = None,
    step: int | None = None,
) -> Path:
    """Write a checkpoint into ``<path>.tmp`` with a SHA-256 manifest (recording ``step``, the rollout),
    fsync it, then swap it in."""
    final = Path(path)
    with checkpoint_directory(final, KIND, FORMAT_VERSION, step) as tmp:
        _write_checkpoint(tmp, policy, encoder, num_z_tokens, optimizer, generator, trainer_state)
    return final


def _write_checkpoint(
    tmp: Path,
    policy: ZTokenPolicy,
    encoder: ObservationEncoder,
    num_z_tokens: int,
    optimizer: torch.optim.Optimizer | None,
    generator: torch.Generator | None,
    trainer_state: dict[str, Any] | None,
) -> None:
    save_model(policy, str(tmp / POLICY_WEIGHTS))
    tokenizer_dir = None
    if isinstance(encoder, TokenizerEncoder):
        tokenizer_dir = "tokenizer"
        encoder.tokenizer.save_pretrained(str(tmp / tokenizer_dir))
    spec = {
        "num_z_tokens": num_z_tokens,
        "tokenizer_dir": tokenizer_dir,
        "lm_config": policy.lm.config.to_dict(),
    }
    (tmp / POLICY_SPEC).write_text(json.dumps(spec, indent=1, default=str))
    if optimizer is not None or generator is not None:
        tensors, structure = {}, None
        if optimizer is not None:
            tensors, structure = optimizer_to_tensors(optimizer.state_dict(), prefix="optim.")
        if generator is not None:
            tensors["rng.torch"] = generator.get_state()
        save_file(tensors, str(tmp / OPTIMIZER_TENSORS))
        trainer_state = {**(trainer_state or {}), "optimizer": structure}
    if trainer_state is not None:
        (tmp / TRAINER_STATE).write_text(json.dumps(trainer_state, indent=1))


def load_policy(path: str | Path) -> tuple[ZTokenPolicy, ObservationEncoder, int]:
    """Load ``(policy, encoder, num_z_tokens)`` from a checkpoint directory.

    Raises:
        CheckpointError: naming the file, when the checkpoint is missing, incomplete, corrupt, of another
            format version, or its weights do not fit the architecture it records.
    """
    root = open_checkpoint(path, KIND, FORMAT_VERSION, required=(POLICY_SPEC, POLICY_WEIGHTS))
    spec = read_json(root / POLICY_SPEC)
    tokenizer_dir = str(root / spec["tokenizer_dir"]) if spec["tokenizer_dir"] else None
    vocab = ZTokenVocab(int(spec["num_z_tokens"]))
    policy, encoder = rebuild_policy(spec["lm_config"], vocab, tokenizer_dir)
    _load_weights(root, policy, f"the architecture in {POLICY_SPEC}")
    return policy, encoder, vocab.num_z_tokens


def load_policy_weights(path: str | Path, policy: ZTokenPolicy, num_z_tokens: int) -> None:
    """Copy a checkpoint's policy weights into ``policy`` (of the same architecture and Z-token count).

    Raises:
        CheckpointError: as :func:`load_policy` does, and when the checkpoint's Z tokens or weights do not fit
            ``policy``.
    """
    root = open_checkpoint(path, KIND, FORMAT_VERSION, required=(POLICY_SPEC, POLICY_WEIGHTS))
    saved = int(read_json(root / POLICY_SPEC)["num_z_tokens"])
    if saved != num_z_tokens:
        raise CheckpointError(f"{root} holds a policy over {saved} Z tokens, this one has {num_z_tokens}")
    _load_weights(root, policy, "this policy's architecture")


def _load_weights(root: Path, policy: ZTokenPolicy, architecture: str) -> None:
    try:
        missing, unexpected = load_model(policy, str(root / POLICY_WEIGHTS), strict=False)
    except (OSError, SafetensorError) as error:
        raise CheckpointError(f"{root / POLICY_WEIGHTS} is corrupt: {error}") from None
    except RuntimeError as error:  # same names, other shapes
        raise CheckpointError(
            f"{root / POLICY_WEIGHTS}: weights do not match {architecture}: {error}"
        ) from None
    if missing or unexpected:
        raise CheckpointError(
            f"{root / POLICY_WEIGHTS}: weights do not match {architecture} (missing "
            f"{missing[:3]}, unexpected {unexpected[:3]})"
        )


def load_training_state(
    path: str | Path, optimizer: torch.optim.Optimizer, generator: torch.Generator
) -> dict[str, Any]:
    """Restore the optimizer and RNG in place; return the trainer state dict."""
    root = open_checkpoint(path, KIND, FORMAT_VERSION, required=(POLICY_SPEC, POLICY_WEIGHTS))
    if not (root / TRAINER_STATE).is_file() or not (root / OPTIMIZER_TENSORS).is_file():
        raise CheckpointError(
            f"{root} has no training state ({TRAINER_STATE}, {OPTIMIZER_TENSORS}); "
            "it is a policy-only checkpoint: start a new run from it instead of resuming"
        )
    state = read_json(root / TRAINER_STATE)
    tensors = read_tensors(root / OPTIMIZER_TENSORS)
    generator.set_state(tensors.pop("rng.torch"))
    optimizer.load_state_dict(optimizer_from_tensors(tensors, state["optimizer"], prefix="optim."))
    return state
