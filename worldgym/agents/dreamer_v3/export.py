"""A Dreamer run's policy on its own: the encoder, RSSM and actor weights as safetensors, with what rebuilds them.

:func:`export_policy` writes ``DIR/policy.safetensors`` (keys ``encoder.*``, ``rssm.*``, ``actor.*``: a
:class:`~worldgym.agents.dreamer_v3.policy.DreamerPolicy`'s own) and ``DIR/policy.json`` (the run's config,
observation shape and action count) under a checksummed manifest; :func:`load_policy` rebuilds the policy::

    from worldgym.agents.dreamer_v3.export import load_policy
    policy = load_policy("exports/dreamer")            # a DreamerPolicy for one env, on the CPU
    action = policy.act(obs[None], is_first=torch.ones(1), generator=None, greedy=True)
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from worldgym.agents.dreamer_v3.checkpoint import FILES, KIND, READ_VERSIONS
from worldgym.agents.dreamer_v3.config import DreamerConfig
from worldgym.agents.dreamer_v3.learner import DreamerLearner
from worldgym.agents.dreamer_v3.policy import DreamerPolicy
from worldgym.checkpointing import checkpoint_directory, open_checkpoint, read_json, read_tensors
from worldgym.errors import CheckpointError, ExportError

__all__ = ["POLICY_KIND", "export_policy", "load_policy"]

POLICY_KIND = "dreamer_v3_policy"
POLICY_FORMAT_VERSION = 2
_WEIGHTS, _SPEC = "policy.safetensors", "policy.json"
_PARTS = {"world_model.encoder.": "encoder.", "world_model.rssm.": "rssm.", "actor.": "actor."}


def export_policy(checkpoint: str | Path, out_dir: str | Path) -> Path:
    """Write the policy of a Dreamer ``checkpoint`` folder to ``out_dir`` (replacing it).

    Raises:
        ExportError: the checkpoint records no observation shape (saved by a worldgym without exports).
        CheckpointError: the checkpoint is damaged.
    """
    root = open_checkpoint(checkpoint, KIND, READ_VERSIONS, required=FILES, check_run_files=False)  # no replay
    state = read_json(root / "state.json")
    if "obs_shape" not in state:
        raise ExportError(f"{root} records no observation shape (saved by a worldgym without exports): resume the "
                          "run for one checkpoint more, then export that one")
    weights = {}
    for name, tensor in read_tensors(root / "model.safetensors").items():
        for prefix, new in _PARTS.items():
            if name.startswith(prefix):
                weights[new + name[len(prefix):]] = tensor
    spec = {"config": state["config"], "obs_shape": state["obs_shape"], "action_dim": state["action_dim"],
            "step": state["iter_num"]}
    with checkpoint_directory(out_dir, POLICY_KIND, POLICY_FORMAT_VERSION, state["iter_num"]) as tmp:
        save_file(weights, str(tmp / _WEIGHTS))
        (tmp / _SPEC).write_text(json.dumps(spec, indent=1) + "\n")
    return Path(out_dir)


def load_policy(path: str | Path, num_envs: int = 1, device: str = "cpu") -> DreamerPolicy:
    """The :class:`DreamerPolicy` an :func:`export_policy` folder holds, acting in ``num_envs`` envs.

    Raises:
        CheckpointError: the folder is not a Dreamer policy export, is damaged, or its weights do not fit.
    """
    root = open_checkpoint(path, POLICY_KIND, POLICY_FORMAT_VERSION, required=(_WEIGHTS, _SPEC))
    spec = read_json(root / _SPEC)
    config = DreamerConfig.from_dict({**spec["config"], "device": device})
    with torch.random.fork_rng(devices=[]):
        learner = DreamerLearner(config, tuple(spec["obs_shape"]), int(spec["action_dim"]))
    policy = DreamerPolicy(learner, num_envs)
    missing, unexpected = policy.load_state_dict(read_tensors(root / _WEIGHTS), strict=False)
    if missing or unexpected:
        raise CheckpointError(f"{root / _WEIGHTS} does not fit the policy {_SPEC} describes: missing {missing[:3]}, "
                              f"unexpected {unexpected[:3]}")
    return policy.to(device).eval()
