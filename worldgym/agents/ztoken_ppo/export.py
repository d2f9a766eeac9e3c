"""A Z-token PPO run's policy on its own: the policy's safetensors, its architecture and tokenizer, no training
state. The folder is a checkpoint of the agent's own kind, so the loader is the one a checkpoint has::

    from worldgym.agents.ztoken_ppo.checkpoint import load_policy
    policy, encoder, num_z_tokens = load_policy("exports/ztoken")
"""

from __future__ import annotations

import shutil
from pathlib import Path

from worldgym.agents.ztoken_ppo.checkpoint import FORMAT_VERSION, KIND, POLICY_SPEC, POLICY_WEIGHTS
from worldgym.checkpointing import checkpoint_directory, open_checkpoint, read_json

__all__ = ["export_policy"]


def export_policy(checkpoint: str | Path, out_dir: str | Path) -> Path:
    """Copy the policy of a Z-token PPO ``checkpoint`` folder (weights, ``policy.json``, tokenizer) to ``out_dir``
    (replacing it), checksummed; a damaged checkpoint raises :class:`~worldgym.errors.CheckpointError`."""
    root = open_checkpoint(checkpoint, KIND, FORMAT_VERSION, required=(POLICY_SPEC, POLICY_WEIGHTS))
    tokenizer_dir = read_json(root / POLICY_SPEC)["tokenizer_dir"]
    step = read_json(root / "manifest.json").get("step")
    with checkpoint_directory(out_dir, KIND, FORMAT_VERSION, step) as tmp:
        for name in (POLICY_WEIGHTS, POLICY_SPEC):
            shutil.copy2(root / name, tmp / name)
        if tokenizer_dir:
            shutil.copytree(root / tokenizer_dir, tmp / tokenizer_dir)
    return Path(out_dir)
