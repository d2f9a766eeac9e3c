"""Checkpoints: safetensors for policy/optimizer/RNG tensors, JSON for architecture and trainer state."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, load_model, save_file, save_model

from worldgym.agents.ztoken_ppo.encoding import ObservationEncoder, TokenizerEncoder
from worldgym.agents.ztoken_ppo.factory import rebuild_policy
from worldgym.agents.ztoken_ppo.model import ZTokenPolicy
from worldgym.checkpointing import atomic_directory, optimizer_from_tensors, optimizer_to_tensors
from worldgym.envs.ztoken.vocab import ZTokenVocab

FORMAT_VERSION = 1
POLICY_WEIGHTS = "policy.safetensors"
POLICY_SPEC = "policy.json"
OPTIMIZER_TENSORS = "optimizer.safetensors"
TRAINER_STATE = "trainer_state.json"


class CheckpointError(ValueError):
    """A checkpoint directory is missing files or does not match what is being loaded."""


def save_checkpoint(
    path: str | Path,
    policy: ZTokenPolicy,
    encoder: ObservationEncoder,
    num_z_tokens: int,
    optimizer: torch.optim.Optimizer | None = None,
    generator: torch.Generator | None = None,
    trainer_state: dict[str, Any] | None = None,
) -> Path:
    """Write a checkpoint atomically (into ``<path>.tmp``, then renamed over ``path``)."""
    final = Path(path)
    with atomic_directory(final) as tmp:
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
        "format_version": FORMAT_VERSION,
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
    """Load ``(policy, encoder, num_z_tokens)`` from a checkpoint directory."""
    root = Path(path)
    spec_file = root / POLICY_SPEC
    if not spec_file.is_file() or not (root / POLICY_WEIGHTS).is_file():
        raise CheckpointError(
            f"{root} is not a ztoken_ppo checkpoint: need {POLICY_SPEC} and {POLICY_WEIGHTS}"
        )
    spec = json.loads(spec_file.read_text())
    if spec.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{spec_file}: format_version {spec.get('format_version')!r}, expected {FORMAT_VERSION}"
        )
    tokenizer_dir = str(root / spec["tokenizer_dir"]) if spec["tokenizer_dir"] else None
    vocab = ZTokenVocab(int(spec["num_z_tokens"]))
    policy, encoder = rebuild_policy(spec["lm_config"], vocab, tokenizer_dir)
    missing, unexpected = load_model(policy, str(root / POLICY_WEIGHTS), strict=False)
    if missing or unexpected:
        raise CheckpointError(
            f"{root}: weights do not match the architecture (missing {missing[:3]}, "
            f"unexpected {unexpected[:3]})"
        )
    return policy, encoder, vocab.num_z_tokens


def load_training_state(
    path: str | Path, optimizer: torch.optim.Optimizer, generator: torch.Generator
) -> dict[str, Any]:
    """Restore the optimizer and RNG in place; return the trainer state dict."""
    root = Path(path)
    if not (root / TRAINER_STATE).is_file() or not (root / OPTIMIZER_TENSORS).is_file():
        raise CheckpointError(
            f"{root} has no training state ({TRAINER_STATE}, {OPTIMIZER_TENSORS}); "
            "it is a policy-only checkpoint: start a new run from it instead of resuming"
        )
    state = json.loads((root / TRAINER_STATE).read_text())
    tensors = load_file(str(root / OPTIMIZER_TENSORS))
    generator.set_state(tensors.pop("rng.torch"))
    optimizer.load_state_dict(optimizer_from_tensors(tensors, state["optimizer"], prefix="optim."))
    return state
